"""Run guards (issue run-guards): inputs that planned, or crashed, without a word that names them.

Each test gives the input of one item of the issue and checks the one-line answer: `snakemake -n` (a dry
run in an empty folder, the way tests/test_integrity.py plans overlays) or
`python -m clmdetour.pipeline.check_config`. Refusals checked through a library call alone are cases of
tests/test_bad_inputs.py (the table of docs/tasks.md, "Refused inputs and their errors").
"""
import re
import subprocess
import sys
import time

import pytest
from helpers import REPO, clean_env
from test_cost import _fresh_checkout

SNAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
PAPER = str(REPO / "config/config.yaml")
DEMO = str(REPO / "config/demo.yaml")
#: YAML that expands to 10^8 nodes from 90 lines: 8 nested levels of 10 aliases (an "alias bomb").
ALIAS_BOMB = "evaluation:\n  first_seed:\n    - &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"    - &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9))


def _dry(tmp_path, *args, timeout=300):
    """``snakemake -n`` in the folder ``tmp_path``."""
    r = subprocess.run([*SNAKE, "--directory", str(tmp_path), "-n", *args], cwd=tmp_path, capture_output=True,
                       text=True, timeout=timeout, env=clean_env(), check=False)
    return r.returncode, r.stdout + r.stderr


def _overlay(tmp_path, text: str, name: str = "my.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, message", [
    ("pretraining: {checkpoint_root: ''}\n", r"pretraining\.checkpoint_root: '' is an empty path"),
    ("evaluation: {tasks: []}\n", r"the evaluation grid is empty \(evaluation\.tasks lists nothing\).*\bpretrain_all\b"),
    ("pretraining: {micro_batch_sequences: 8.0}\n",
     r"'pretraining\.micro_batch_sequences': 8\.0 is a float where a whole number is expected; write 8"),
    (ALIAS_BOMB, r"my\.yaml: line \d+ invalid YAML: aliases expand to more than 10,000 nodes"),
], ids=["empty_checkpoint_root", "empty_grid", "float_micro_batch", "alias_bomb"])
def test_planning_refuses_the_overlay_naming_the_key_or_file(tmp_path, text, message):
    """Each planned before (the empty root under /scratch, the empty grid with a warning) or failed after
    minutes (the alias bomb: 25 s and 3 GB, then a 580 MB line): now one line at planning, in seconds."""
    t0 = time.perf_counter()
    rc, out = _dry(tmp_path, "all", "--cores", "2", "--configfiles", PAPER, DEMO, _overlay(tmp_path, text), timeout=120)
    assert rc != 0 and re.search(message, out), out[-3000:]
    assert time.perf_counter() - t0 < 60 and len(out) < 100_000


def test_check_config_refuses_an_alias_bomb_in_bounded_time_and_memory(tmp_path, capsys):
    """check_config is the bounded check of an untrusted overlay: the bomb's 10^8 nodes are never built."""
    import tracemalloc

    from clmdetour.pipeline.check_config import main

    overlay = _overlay(tmp_path, ALIAS_BOMB)
    tracemalloc.start()
    t0 = time.perf_counter()
    assert main([PAPER, DEMO, overlay]) == 1
    elapsed, (_, peak) = time.perf_counter() - t0, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    err = capsys.readouterr().err
    assert f"{overlay}: line 6 invalid YAML: aliases expand to more than 10,000 nodes" in err, err[:2000]
    assert "check_config" in err and len(err.strip().splitlines()) == 1
    assert elapsed < 10 and peak < 200 * 2**20, (elapsed, peak)
    # ordinary anchors, a merge key included, stay accepted
    fine = _overlay(tmp_path, "pretraining:\n  phase1: &p {warmup_tokens: 0}\n  decay:\n    <<: *p\n", "fine.yaml")
    assert main([PAPER, DEMO, fine]) == 0, capsys.readouterr().err


def test_planning_warns_of_a_variant_that_freezes_every_layer(tmp_path):
    """freeze: [embeddings, '0-5'] on the demo's 6 layers trains only the MLM head: said at planning."""
    overlay = _overlay(tmp_path, "pretraining:\n  variants:\n    clm-freeze-low:\n      phase1: {freeze: [embeddings, '0-5']}\n")
    rc, out = _dry(tmp_path, "pretrain_clm_freeze_low", "--cores", "2", "--configfiles", PAPER, DEMO, overlay)
    assert rc == 0, out[-3000:]
    assert ("pretraining.variants.clm-freeze-low.phase1.freeze ['embeddings', '0-5'] freezes every encoder layer "
            "(0-5 of base_model.num_layers 6) and the embeddings of clm-freeze-low's phase1: only the MLM head trains"
            in out), out[-3000:]
    rc, out = _dry(tmp_path, "pretrain_clm_freeze_low", "--cores", "2", "--configfiles", PAPER, DEMO)
    assert rc == 0 and "freezes every encoder layer" not in out, out[-3000:]


@pytest.mark.slow  # Snakemake planning in a subprocess: 7 s (the unit stage keeps its 5-minute budget)
def test_the_local_profile_with_only_my_overlay_stops_with_the_corrected_command(tmp_path):
    """`--configfiles my.yaml` replaces the profile's files: the paper DAG (219 jobs, 4 Hub model fetches)
    was planned under the CPU profile without a word. Now it stops, giving the command that was meant."""
    overlay = _overlay(tmp_path, "evaluation: {first_seed: 0}\n")
    root = _fresh_checkout(tmp_path)  # the profile and its config files, relative to the folder planned in
    rc, out = _dry(root, "all", "--profile", "profiles/local", "--configfiles", overlay)
    assert rc != 0, out[-3000:]
    assert "profiles/local/config.yaml" in out and "without config/demo.yaml" in out, out[-3000:]
    assert f"--configfiles config/config.yaml config/demo.yaml {overlay}" in out, out[-3000:]
    assert "fetch_model" not in out
    rc, out = _dry(root, "--profile", "profiles/local", "--configfiles", "config/config.yaml", "config/demo.yaml",
                   overlay, "--", "all")
    assert rc == 0, out[-3000:]


def test_forgotten_profile_files_are_found_from_every_way_of_naming_the_profile(tmp_path):
    from clmdetour.pipeline.check_config import forgotten_profile_files

    profile = tmp_path / "profiles" / "mine"
    profile.mkdir(parents=True)
    (profile / "config.yaml").write_text("configfiles: [config/config.yaml, config/demo.yaml]\ncores: 2\n")
    (tmp_path / "slurm.yaml").write_text("executor: slurm\n")  # no configfiles: nothing to compare
    full = [tmp_path / "config/config.yaml", tmp_path / "config/demo.yaml", tmp_path / "my.yaml"]
    for argv, env in [(["--profile", "profiles/mine"], {}), (["--profile=profiles/mine"], {}),
                      ([], {"SNAKEMAKE_PROFILE": "profiles/mine"}), (["--profile", "profiles/mine", "--profile",
                                                                       str(tmp_path / "slurm.yaml")], {})]:
        message = forgotten_profile_files(["snakemake", "-n", *argv], env, [tmp_path / "my.yaml"], tmp_path)
        assert "without config/config.yaml, config/demo.yaml" in message, (argv, env)
        assert forgotten_profile_files(["snakemake", *argv], env, full, tmp_path) == ""
    for argv, env in [([], {}), (["--profile", "none"], {"SNAKEMAKE_PROFILE": "profiles/mine"}),
                      (["--profile", str(tmp_path / "slurm.yaml")], {})]:
        assert forgotten_profile_files(["snakemake", *argv], env, [tmp_path / "my.yaml"], tmp_path) == ""


@pytest.mark.parametrize("args, message", [
    (["--config", "evaluation.first_seed=3"],
     r"--config 'evaluation\.first_seed=3': Snakemake takes no dotted key .*--config evaluation='\{first_seed: 3\}'"),
    (["--config", "evaluation={first_seed: 3}", "all"],
     r"--config 'all': not KEY=VALUE; --config takes every value that follows it.*before --config, or after --"),
    (["--config", "evaluation={first_seed: x}"], r"config key 'evaluation\.first_seed': 'x' is not of type 'integer'"),
], ids=["dotted_key", "target_after_config", "bad_value"])
def test_check_config_reads_config_values_as_snakemake_does(args, message, capsys):
    """Snakemake's own --config errors are tracebacks (ValueError: Invalid config definition ...)."""
    from clmdetour.pipeline.check_config import main

    assert main([PAPER, DEMO, *args]) == 1
    err = capsys.readouterr().err
    assert re.search(message, err) and len(err.strip().splitlines()) == 1, err
    assert main([PAPER, DEMO, "--config", "evaluation={first_seed: 3}", "allow_yte_configs=true"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("data, message", [
    (b"evaluation:\n  first_seed: 1 # \xe9\n", r"my\.yaml: line 2: not UTF-8 text \(byte 30\)"),
    (b"", r"my\.yaml: holds no keys \(Snakemake refuses an empty config file\)"),
    (None, r"my\.yaml: config file not found"),
    ("folder", r"my\.yaml: is a folder, not a config file"),
], ids=["not_utf8", "empty", "missing", "folder"])
def test_check_config_names_the_file_of_snakemakes_own_errors(tmp_path, data, message, capsys):
    """Snakemake's tracebacks for these (FileNotFoundError, IsADirectoryError, UnicodeDecodeError, "Config file
    must be given as JSON or YAML with keys at top level") name no file; check_config does, in one line."""
    from clmdetour.pipeline.check_config import main

    overlay = tmp_path / "my.yaml"
    if data == "folder":
        overlay.mkdir()
    elif data is not None:
        overlay.write_bytes(data)
    assert main([PAPER, DEMO, str(overlay)]) == 1
    err = capsys.readouterr().err
    assert re.search(message, err) and len(err.strip().splitlines()) == 1, err


def test_a_yte_overlay_refusal_says_its_code_already_ran_and_how_to_check_the_next_one(tmp_path):
    from clmdetour.config import ConfigError, check_config_files

    yte = _overlay(tmp_path, "__use_yte__: true\nevaluation:\n  first_seed: ?1 + 1\n")
    with pytest.raises(ConfigError) as info:
        check_config_files([yte])
    message = str(info.value)
    assert message.startswith(f"{yte}: __use_yte__: true") and len(message.splitlines()) == 1
    assert "its expressions have already been evaluated by Snakemake" in message
    assert "python -m clmdetour.pipeline.check_config" in message and "you did not write" in message


def test_setup_installs_composer_with_no_deps_after_every_step_pip_resolves():
    """pip checks every installed package's pins after each resolving install: one after Composer (pinned
    torch<2.7.1, installed with --no-deps) printed "ERROR: pip's dependency resolver ..." and 5 lines."""
    steps = [line.split() for line in (REPO / "scripts/setup.sh").read_text().splitlines() if line.startswith("pipq ")]
    composer = next(i for i, s in enumerate(steps) if "requirements/composer.txt" in s)
    assert "--no-deps" in steps[composer]
    assert all("--no-deps" in s for s in steps[composer:]), steps
    assert any("--no-deps" in line and "torch<2.7.1" in line
               for line in (REPO / "scripts/setup.sh").read_text().split("\n\n")), "say why Composer goes in --no-deps"


def test_a_phase_section_that_is_not_json_is_one_line_naming_the_option():
    """`--section '{not json'` was a JSONDecodeError traceback."""
    from clmdetour.training.cli import main

    with pytest.raises(SystemExit) as info:
        main(["--variant", "v", "--input-model", "m", "--corpus", "c", "--output-dir", "o", "--section", "{not json"])
    message = str(info.value.code)
    assert message.startswith("error: --section: not valid JSON: Expecting property name enclosed in double quotes "
                              "at line 1, column 2 (character 1)") and len(message.splitlines()) == 1, message


@pytest.mark.slow  # a training CLI subprocess: 6 s (the unit stage keeps its 5-minute budget)
def test_a_phase_section_that_is_json_but_not_a_mapping_is_one_line_and_no_traceback():
    """data-safe item 8: `--section '[1,2]'` printed its one-line error, then a traceback."""
    import subprocess
    import sys

    from helpers import REPO

    r = subprocess.run([sys.executable, "-m", "clmdetour.training.cli", "--variant", "v", "--input-model", "m",
                        "--corpus", "c", "--output-dir", "o", "--section", "[1,2]"], cwd=REPO, capture_output=True,
                       text=True, timeout=300, check=False)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == "error: pretraining.variants.v phase section: expected a mapping, got list"
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("overlay, message", [
    ("corpus: {train_tokens: 1000000000000000000}", "'corpus.train_tokens': 1000000000000000000 is greater than the maximum"),
    ("pretraining: {checkpoint_root: FILE}", "pretraining.checkpoint_root: 'FILE': 'FILE' is a file, not a folder"),
])
def test_an_absurd_token_budget_or_a_file_as_checkpoint_root_is_refused_at_planning(tmp_path, overlay, message, capsys):
    """data-safe item 7: both planned without a word."""
    from helpers import REPO

    from clmdetour.pipeline.check_config import main

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    (tmp_path / "my.yaml").write_text(overlay.replace("FILE", str(blocker)) + "\n")
    rc = main([str(REPO / "config/config.yaml"), str(REPO / "config/demo.yaml"), str(tmp_path / "my.yaml")])
    assert rc != 0
    assert message.replace("FILE", str(blocker)) in capsys.readouterr().err
