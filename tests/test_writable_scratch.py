"""Every folder a job writes is checked before it starts, its rule's scratch folders included (issue 65 item 2):
a read-only `pretraining.checkpoint_root` stops the run in one line before any phase or fine-tune starts."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest
from helpers import REPO

CHECK = textwrap.dedent("""
    import sys
    from types import SimpleNamespace
    from clmdetour.pipeline.writable import ReadOnlyError, check_jobs_writable

    def job(rule, out):
        return SimpleNamespace(rule=SimpleNamespace(name=rule), output=[out], log=[])

    root, results, rule = sys.argv[1:4]
    scratch = {"pretrain_phase1": [root], "finetune": [root]}
    try:
        check_jobs_writable([job(rule, results + "/out.json")], scratch)
        print("writable")
    except ReadOnlyError as e:
        print(e)
""")


def _can_mount_read_only() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o ro tmpfs /mnt"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not _can_mount_read_only(), reason="no user namespaces here to mount a read-only folder")
@pytest.mark.parametrize("rule", ["pretrain_phase1", "finetune", "eval_table"])
def test_a_read_only_checkpoint_root_is_refused_for_the_rules_that_write_there(tmp_path, rule):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "results").mkdir()
    script = (f"mount --bind checkpoints checkpoints && mount -o remount,ro,bind checkpoints && "
              f"{sys.executable} -c {shlex_quote(CHECK)} {tmp_path / 'checkpoints'} {tmp_path / 'results'} {rule}")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120, check=False, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    if rule == "eval_table":  # writes no scratch: a read-only checkpoint root does not concern it
        assert r.stdout.strip() == "writable"
    else:
        assert r.stdout.strip() == (
            f"nothing was run: the jobs would write where writes are refused: {tmp_path / 'checkpoints'}: read-only "
            f"file system (rules {rule}). Remount it read-write, or run in a writable copy (--directory DIR, or "
            "another pretraining.checkpoint_root for the scratch); a dry run (-n) of a read-only run still works.")


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def test_the_workflow_passes_each_rules_scratch_folders():
    from clmdetour.config import deep_merge, load_yaml, validate_config
    from clmdetour.pipeline import Pipeline

    cfg = deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml"))
    pipeline = Pipeline(validate_config(cfg))
    writers = pipeline.scratch_writers()
    root = [cfg["pretraining"]["checkpoint_root"]]
    assert {r for r, folders in writers.items() if folders == root} >= {
        "pretrain_phase1", "pretrain_decay", "prepare_corpus", "corpus_shard_text", "build_base",
        *pipeline.finetune_rules()}
    assert "PIPELINE.scratch_writers()" in (REPO / "Snakefile").read_text()
