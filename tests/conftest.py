"""Shared fixtures and hooks: tiny models built locally, the shared data folder, the demo run (helpers: helpers.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, SHARED_DATA, clean_env, train_tokenizer


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
def demo_tokenizer():
    """helpers.train_tokenizer on 150 demo texts (seed 3), 400 tokens: the fine-tuning tests' tokenizer.

    Shared by the session (training is deterministic, so it is the tokenizer each test trained before):
    a test must not change it."""
    from clmdetour.demo.generator import generate_corpus

    return train_tokenizer([r["text"] for r in generate_corpus(150, seed=3)], vocab_size=400)


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
