"""The corpus jobs keep datasets' cache and temporary files in the run's scratch folder (issue 40 item 3):
nothing under $HOME, the folder removed on success and kept after a failure."""
import json
import os
import subprocess
import sys

import pytest
from helpers import REPO

from clmdetour.corpus.scratch import job_scratch, job_scratch_dir


def _bytes_under(folder) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_a_corpus_preparation_writes_nothing_under_home(tmp_path, tiny_model_dir, demo_texts):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    code = f"""
import json, sys
sys.path.insert(0, {str(REPO / "tests")!r})
from pathlib import Path
from helpers import tiny_phase1_section
from clmdetour.corpus.scratch import job_scratch
texts = json.loads(Path({str(work / "texts.json")!r}).read_text())
import datasets.config
seen = []
with job_scratch({str(work / "checkpoints")!r}, "prepare_corpus") as scratch:
    real_load = datasets.load_dataset
    def spy(*a, **k):  # where datasets' cache is while the corpus step loads its shards
        seen.append(str(datasets.config.HF_DATASETS_CACHE))
        return real_load(*a, **k)
    datasets.load_dataset = spy
    tiny_phase1_section(Path({str(work)!r}), Path({str(tiny_model_dir)!r}), texts)
assert seen and all(s.startswith({str(work)!r}) for s in seen), seen
print("CACHED", len(seen))
"""
    (work / "texts.json").write_text(json.dumps(demo_texts[:120]))
    env = dict(os.environ, HOME=str(home))
    for key in ("HF_HOME", "HF_DATASETS_CACHE", "XDG_CACHE_HOME"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CACHED" in proc.stdout
    assert _bytes_under(home) < 5 * 2**20, sorted(str(p.relative_to(home)) for p in home.rglob("*"))[:20]
    assert not list(home.rglob("*.arrow"))  # no datasets cache under $HOME
    assert not job_scratch_dir(work / "checkpoints", "prepare_corpus").exists()  # removed on success
    assert (work / "corpus" / "manifest.json").is_file()


def test_a_failed_job_keeps_its_scratch_and_the_environment_is_restored(tmp_path):
    before = os.environ.get("HF_DATASETS_CACHE")
    with pytest.raises(RuntimeError, match="boom"), job_scratch(tmp_path / "ckpt", "prepare_corpus") as scratch:
        assert os.environ["HF_DATASETS_CACHE"] == str(scratch / "hf" / "datasets")
        (scratch / "hf" / "partial").write_text("x")
        raise RuntimeError("boom")
    assert (job_scratch_dir(tmp_path / "ckpt", "prepare_corpus") / "hf" / "partial").is_file()
    assert os.environ.get("HF_DATASETS_CACHE") == before
