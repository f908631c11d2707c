"""Shared fixtures: tiny models built locally, the shared data folder, the demo run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_configure(config):
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (it sits beside the checkout as ../shared/data)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def demo_texts() -> list[str]:
    from clmdetour.demo.generator import generate_corpus

    return [r["text"] for r in generate_corpus(400, seed=3)]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, demo_texts) -> Path:
    """A tiny ModernBERT (4 layers, hidden 32) + byte-level BPE tokenizer saved as an HF folder."""
    from clmdetour.demo.base import init_model_dir

    out = tmp_path_factory.mktemp("tiny") / "model"
    build = {"vocab_size": 600, "hidden_size": 32, "intermediate_size": 64, "num_layers": 4, "num_attention_heads": 2,
                 "global_attn_every_n_layers": 3, "local_attention": 8, "max_position_embeddings": 128, "seed": 0}
    init_model_dir(build, demo_texts, out)
    return out


DEMO_DIR_ENV = "CLMDETOUR_DEMO_RESULTS"


def clean_env() -> dict:
    """This environment with the virtualenv taken off ``PATH`` (and ``VIRTUAL_ENV`` unset).

    A user types ``.venv/bin/snakemake ...`` in a shell where no virtualenv is
    activated: every rule must then run with Snakemake's own interpreter, never a
    ``python`` or ``composer`` found on ``PATH``. Workflow tests run that way so
    that a rule calling either from ``PATH`` fails here too.
    """
    env = dict(os.environ)
    venv_bins = {str(Path(sys.executable).parent), str(Path(sys.prefix) / "bin")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p not in venv_bins)
    env.pop("VIRTUAL_ENV", None)
    return env


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> Path:
    """The demo DAG (`all`), run once per test session in a scratch working directory.

    Set CLMDETOUR_DEMO_RESULTS to a folder where it already ran to reuse it.
    """
    given = os.environ.get(DEMO_DIR_ENV)
    if given:
        return Path(given)
    workdir = tmp_path_factory.mktemp("demo_run")
    cmd = [sys.executable, "-m", "snakemake", "all", "--snakefile", str(REPO / "Snakefile"), "--directory",
           str(workdir), "--cores", "2", "--set-threads", "build_base=2", "--rerun-incomplete",
           "--configfiles", str(REPO / "config/config.yaml"), str(REPO / "config/demo.yaml")]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=clean_env(), check=False)
    (workdir / "snakemake.out").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        pytest.fail(f"demo DAG failed (exit {proc.returncode}); tail:\n{(proc.stdout + proc.stderr)[-4000:]}")
    return workdir


def tiny_phase1_section(tmp: Path, tiny_model_dir: Path, texts: list[str], seq_len: int = 64) -> dict:
    """Pack ``texts`` into ``tmp/corpus`` with the tiny model's tokenizer; return the demo's resolved
    ``clm-detour`` phase-1 section at ``seq_len`` tokens (the caller sets steps, batch and checkpoints)."""
    import json

    from clmdetour.config import _deep_merge, load_yaml, resolve_phase, validate_config
    from clmdetour.corpus.prepare import prepare_corpus

    src = tmp / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    cfg = validate_config(_deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml")))
    corpus = dict(cfg["corpus"], sources=[{"name": "d", "format": "jsonl", "path": str(src), "weight": 1.0,
                                           "licence": "x", "text_field": "text"}],
                  seq_len=seq_len, train_tokens=None, num_proc=1)
    prepare_corpus(corpus, str(tiny_model_dir), str(tmp / "corpus"))
    cfg["corpus"]["seq_len"] = seq_len
    return resolve_phase(cfg, "clm-detour", "phase1")
