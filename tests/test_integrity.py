"""A run never trains on the wrong thing or runs foreign code (issue integrity).

Checkpoints bound to their run and loaded weights-only are tested in tests/test_resume.py; here:
shell-quoted paths, a good release kept until its replacement is complete, configs that cannot
train refused at planning, exported files readable where the umask allows, yte overlays refused.
"""
import json
import subprocess
import sys

import pytest
from conftest import REPO, clean_env

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
