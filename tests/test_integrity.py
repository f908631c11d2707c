"""A run never trains on the wrong thing or runs foreign code (issue integrity).

Checkpoints bound to their run and loaded weights-only are tested in tests/test_resume.py; here:
shell-quoted paths, a good release kept until its replacement is complete, configs that cannot
train refused at planning, exported files readable where the umask allows, yte overlays refused.
"""
import json
import subprocess
import sys

import pytest
from helpers import REPO, clean_env

SNAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
PAPER = str(REPO / "config/config.yaml")
DEMO = str(REPO / "config/demo.yaml")
#: A folder name a shell would read as syntax: a space, a command substitution, both quotes, a `;`.
HOSTILE_NAME = "m $(touch PWNED) 'q\" ;x"


def _run(args, cwd, timeout=600):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=clean_env(), check=False)


@pytest.mark.slow  # plans and runs the corpus and one phase on the tiny model (about 40 s)
def test_a_phase_runs_on_a_model_folder_whose_name_is_shell_syntax(tmp_path, tiny_model_dir, demo_texts):
    import shutil

    model = tmp_path / HOSTILE_NAME
    shutil.copytree(tiny_model_dir, model)
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in demo_texts), encoding="utf-8")
    overlay = {
        "base_model": {"key": "tiny", "hub_id": None, "path": str(model), "build": None},
        "corpus": {"sources": [{"name": "d", "format": "jsonl", "path": str(docs), "weight": 1.0, "licence": "x"}],
                   "seq_len": 64, "train_tokens": None, "decontaminate_against": []},
        "pretraining": {"global_batch_sequences": 8, "micro_batch_sequences": 8, "checkpoint_interval": "5ba",
                        "phase1": {"tokens": 64 * 8 * 6, "warmup_tokens": 0},
                        "checkpoint_root": str(tmp_path / "scratch")},
    }
    (tmp_path / "overlay.yaml").write_text(json.dumps(overlay))
    target = "results/pretrain/clm-detour/phase1/run.json"
    r = _run([*SNAKE, "--directory", str(tmp_path), "--cores", "1", target,
              "--configfiles", PAPER, DEMO, str(tmp_path / "overlay.yaml")], cwd=tmp_path)
    log = tmp_path / "logs/pretrain_phase1/clm-detour.log"
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:] + (log.read_text()[-2000:] if log.exists() else "")
    assert not list(tmp_path.rglob("PWNED")), "the folder name ran as a command"
    run = json.loads((tmp_path / target).read_text())
    assert run["input_model"] == str(model) and run["steps"] == 6


def test_exported_model_files_get_the_modes_the_umask_allows(tmp_path, tiny_model_dir):
    """transformers writes model.safetensors with mode 0600 whatever the umask; an exported model is
    readable by the group and others where the umask allows (0644 under 0022, 0640 under 0027)."""
    import os
    import stat

    from transformers import AutoTokenizer, ModernBertForMaskedLM

    from clmdetour.io import atomic_output_dir, versioned_output_dir

    model = ModernBertForMaskedLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    old = os.umask(0o022)
    try:
        for writer, umask, out in ((versioned_output_dir, 0o022, tmp_path / "v" / "model"),
                                   (atomic_output_dir, 0o027, tmp_path / "a" / "model")):
            os.umask(umask)
            with writer(out) as tmp:
                model.save_pretrained(tmp)
                tokenizer.save_pretrained(tmp)
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
            assert modes["model.safetensors"] == 0o666 & ~umask, modes
            assert set(modes.values()) == {0o666 & ~umask}, modes
            assert stat.S_IMODE(out.resolve().stat().st_mode) == 0o777 & ~umask
    finally:
        os.umask(old)


def _demo_config(**over) -> dict:
    from clmdetour.config import deep_merge, load_yaml

    cfg = deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml"))
    return deep_merge(cfg, over)


# Configs that cannot train, each refused at planning with the key that sets the bad value.
CANNOT_TRAIN = {
    "warmup_longer_than_phase": ({"pretraining": {"phase1": {"warmup_tokens": 200_000}}},
                                 (r"pretraining\.phase1\.warmup_tokens \(200,000 tokens\) is longer than clm-detour's "
                                 r"phase1 \(pretraining\.phase1\.tokens: 100,000 tokens\): the learning rate would "
                                 r"never reach its peak")),
    "decay_warmup_is_refused": (
        {"pretraining": {"variants": {"clm-detour": {"decay": {"warmup_tokens": 10_000}}}}},
        (r"pretraining\.variants\.clm-detour\.decay\.warmup_tokens \(10,000 tokens\): the decay starts at its peak "
        r"learning rate and decays \(1-sqrt\); it has no warm-up")),
    "phase_under_one_global_batch": ({"pretraining": {"decay": {"tokens": 1_000}}},
                                     (r"pretraining\.decay\.tokens \(1,000 tokens\) is less than one global batch "
                                     r"\(pretraining\.global_batch_sequences 16 x corpus\.seq_len 128 = 2,048 tokens\)")),
    "build_warmup_longer_than_build": ({"base_model": {"build": {"warmup_tokens": 500_000}}},
                                       (r"base_model\.build\.warmup_tokens \(500,000 tokens\) is longer than the base "
                                       r"model's build")),
    "checkpoint_interval_zero": ({"pretraining": {"checkpoint_interval": "0ba"}},
                                 (r"pretraining\.checkpoint_interval \('0ba'\): no checkpoint would ever be written, "
                                 r"so a killed or timed-out phase could not resume")),
    "decay_objective_clm": ({"pretraining": {"decay": {"objective": "clm"}}},
                            r"pretraining\.decay\.objective: the decay phase is MLM \(the paper's phase 2\), got 'clm'"),
    "variant_decay_objective_clm": ({"pretraining": {"variants": {"mlm-baseline": {"decay": {"objective": "clm"}}}}},
                                    r"pretraining\.variants\.mlm-baseline\.decay\.objective: the decay phase is MLM"),
    "float_batch": ({"pretraining": {"global_batch_sequences": 16.0}},
                    (r"config key 'pretraining\.global_batch_sequences': 16\.0 is a float where a whole number is "
                    r"expected; write 16")),
}


@pytest.mark.parametrize("case", sorted(CANNOT_TRAIN))
def test_a_config_that_cannot_train_is_refused_naming_the_key(case):
    from clmdetour.config import ConfigError, validate_config

    over, message = CANNOT_TRAIN[case]
    with pytest.raises(ConfigError, match=message) as info:
        validate_config(_demo_config(**over))
    assert len(str(info.value).splitlines()) == 1
    validate_config(_demo_config())  # the demo itself is accepted


def test_a_base_tokenizer_without_a_mask_token_is_refused_at_planning(tmp_path, tiny_model_dir):
    import shutil

    from clmdetour.config import ConfigError, validate_config

    model = tmp_path / "base"
    shutil.copytree(tiny_model_dir, model)
    over = {"base_model": {"key": "tiny", "hub_id": None, "path": str(model), "build": None}, "corpus": {"seq_len": 128}}
    validate_config(_demo_config(**over))
    tok = json.loads((model / "tokenizer_config.json").read_text())
    tok.pop("mask_token")
    (model / "tokenizer_config.json").write_text(json.dumps(tok))
    with pytest.raises(ConfigError, match=rf"base_model \({model}\): the tokenizer has no mask token"):
        validate_config(_demo_config(**over))


def test_a_repeated_yaml_key_a_list_and_a_yte_template_name_their_file(tmp_path):
    from clmdetour.config import ConfigError, check_config_files, load_yaml

    twice = tmp_path / "twice.yaml"
    twice.write_text("pretraining:\n  optimizer: {lr: 1.0e-3}\n  phase1:\n    tokens: 100\n  optimizer: {lr: 2.0e-3}\n")
    with pytest.raises(ConfigError, match=rf"{twice}: line 5 invalid YAML: key 'optimizer' appears twice in one "
                       r"mapping \(lines 2 and 5\); YAML would keep only the last value"):
        load_yaml(twice)
    listed = tmp_path / "list.yaml"
    listed.write_text("- corpus\n- tasks\n")
    with pytest.raises(ConfigError, match=rf"{listed}: a config file holds a mapping of keys at its top level, not a list"):
        load_yaml(listed)
    yte = tmp_path / "yte.yaml"
    yte.write_text("__use_yte__: true\nevaluation:\n  first_seed: ?1 + 1\n")
    check_config_files([str(REPO / "config/demo.yaml")])
    with pytest.raises(ConfigError, match=rf"{yte}: __use_yte__: true makes Snakemake run the file's Python "
                       r"expressions \(yte\)"):
        check_config_files([str(yte)])
    check_config_files([str(yte)], allow_yte=True)


@pytest.mark.parametrize("overlay, message", [
    ("pretraining:\n  phase1: {tokens: 100_000}\n  phase1: {tokens: 50_000}\n", "key 'phase1' appears twice"),
    ("__use_yte__: true\nevaluation:\n  first_seed: ?0\n", "__use_yte__: true makes Snakemake run"),
    ("tasks: {emea: {max_length: 1024}}\n", None),
], ids=["repeated_key", "yte", "max_length"])
def test_planning_stops_or_warns_on_the_overlay(tmp_path, overlay, message):
    """What Snakemake itself merges without a word is refused (or, for a capped task input, said) at planning
    (`evaluation.tasks: []`, once a warning, is refused: tests/test_run_guards.py)."""
    (tmp_path / "my.yaml").write_text(overlay)
    r = _run([*SNAKE, "--directory", str(tmp_path), "-n", "all", "--configfiles", PAPER, DEMO,
              str(tmp_path / "my.yaml")], cwd=tmp_path)
    out = r.stdout + r.stderr
    if message:
        assert r.returncode != 0 and f"invalid configuration: {tmp_path / 'my.yaml'}" in out and message in out, out[-3000:]
    else:
        assert r.returncode == 0, out[-3000:]
        assert ("tasks.emea.max_length (1,024) above the base model's max_position_embeddings (512 tokens, "
                "base_model.build): its fine-tuning inputs are capped at 512 tokens" in out), out[-2000:]


@pytest.mark.parametrize("text, message", [
    ("evaluation:\n\tfirst_seed: 1\n", r"my\.yaml: line 2 invalid YAML: found character '\\t' that cannot start any token"),
    ("a: &x 1\nb: *y\n", r"my\.yaml: line 2 invalid YAML: found undefined alias 'y'"),
    ("- corpus\n- tasks\n", r"my\.yaml: a config file holds a mapping of keys at its top level, not a list"),
    (None, r"my\.yaml: config file not found"),
    ("pretraining:\n  optimizer: {lr: 1e-5}\n", r"'pretraining\.optimizer\.lr': '1e-5' is a string, not a number: .*write 1\.0e-5"),
    ("pretraining:\n  optimizer: {lr: 2.0e4}\n", r"'2\.0e4' is a string, not a number: .*write 2\.0e\+4"),
    ("pretraining:\n  phase1: {tokens: 1e5}\n", r"'1e5' is a string, not a number: .*write 100_000"),
    ("pretraining:\n  variants:\n    clm-detour: {phase1: {objective: clm, objective: mlm}}\n",
     r"my\.yaml: line 3 invalid YAML: key 'objective' appears twice in one mapping \(line 3\)"),
    ("# only a comment\n", r"my\.yaml: holds no keys"),
    ("evaluation: {models: []}\n", r"evaluation\.baseline: 'mlm-baseline' is not among the evaluated models \[\]"),
    ("evaluation: {tasks: [emea, nonexistent]}\n", r"evaluation\.tasks: 'nonexistent' is not a configured task"),
], ids=["tab", "bad_anchor", "top_level_list", "missing", "yaml11_float", "yaml11_unsigned_exponent",
        "yaml11_integer", "repeated_key_on_one_line", "empty", "no_models", "unknown_task"])
def test_check_config_names_the_file_snakemake_does_not(tmp_path, text, message, capsys):
    """Snakemake reads --configfiles before the workflow and names no file for these; the checker does."""
    import re

    from clmdetour.pipeline.check_config import main

    overlay = tmp_path / "my.yaml"
    if text is not None:
        overlay.write_text(text)
    assert main([PAPER, DEMO, str(overlay)]) == 1
    err = capsys.readouterr().err
    assert re.search(message, err) and len(err.strip().splitlines()) == 1, err
    assert main([PAPER, DEMO]) == 0


def test_check_config_reads_what_snakemake_reads(tmp_path, capsys):
    """A tab-indented JSON overlay and a YAML merge key are valid (Snakemake reads both); a yte
    template is read as plain YAML when allowed; a folder is named."""
    from clmdetour.pipeline.check_config import main

    js = tmp_path / "my.json"
    js.write_text('{\n\t"evaluation": {\n\t\t"first_seed": 2\n\t}\n}\n')
    merge = tmp_path / "merge.yaml"
    merge.write_text("x: &lr {lr: 1.0e-3}\npretraining:\n  optimizer:\n    <<: *lr\n    lr: 2.0e-3\n")
    yte = tmp_path / "yte.yaml"
    yte.write_text("__use_yte__: true\nallow_yte_configs: true\n")
    for f in (js, yte):
        assert main([PAPER, DEMO, str(f)]) == 0, capsys.readouterr().err
    assert main([PAPER, DEMO, str(merge)]) == 1  # parses (the merge key), then `x` is an unknown key
    assert "config key 'x' is unknown" in capsys.readouterr().err
    assert main([PAPER, DEMO, str(tmp_path)]) == 1 and f"{tmp_path}: is a folder, not a config file" in capsys.readouterr().err
