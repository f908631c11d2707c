"""A killed phase resumes from its last checkpoint; a changed config starts afresh."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, tiny_phase1_section


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model_dir, demo_texts):
    tmp = tmp_path_factory.mktemp("resume")
    section = tiny_phase1_section(tmp, tiny_model_dir, demo_texts, 64)
    section.update(tokens=64 * 8 * 40, global_batch_sequences=8, micro_batch_sequences=8, checkpoint_interval="10ba",
                   log_interval_steps=1, checkpoint_root=str(tmp / "ckpt"), valid_sequences=4, warmup_tokens=0)
    return tmp, section


def _cmd(tmp, tiny_model_dir, section, out):
    return [sys.executable, "-m", "clmdetour.training.cli", "--variant", "v", "--input-model", str(tiny_model_dir),
            "--corpus", str(tmp / "corpus"), "--output-dir", str(out), "--section", json.dumps(section)]


@pytest.mark.slow  # training subprocesses (about 40-60 s each): the unit stage keeps its 5-minute budget
def test_killed_phase_resumes_and_changed_lr_restarts(setup, tiny_model_dir):
    tmp, section = setup
    out = tmp / "phase"
    proc = subprocess.Popen(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=open(tmp / "first.log", "w"))  # noqa: SIM115 (the child process writes to it until the test ends)
    deadline = time.time() + 240
    links = []
    while time.time() < deadline and proc.poll() is None:
        # a finished save: Composer points latest-rank0.pt at the file once it is written
        links = list(Path(section["checkpoint_root"]).glob("v/phase1/*/latest-rank0.pt"))
        if links:
            break
        time.sleep(0.2)
    assert links, f"no checkpoint appeared; log:\n{(tmp / 'first.log').read_text()[-2000:]}"
    proc.kill()  # by the PID we started
    proc.wait()
    assert not (out / "run.json").exists()
    ckpts = list(links[0].parent.glob("ep*-ba*-rank0.pt"))
    saved_step = int(os.readlink(links[0]).split("-ba")[1].split("-")[0])
    # A later save cut off by the kill (the empty file a job killed mid-write leaves): the rerun must
    # drop it, not stop with FileExistsError when it reaches that step.
    cut_off = links[0].parent / f"ep0-ba{saved_step + 10}-rank0.pt"
    if not cut_off.exists():
        cut_off.write_bytes(b"")

    r = subprocess.run(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "removed checkpoint files of a save that did not finish" in r.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["resumed_from_step"] >= saved_step > 0 and ckpts
    assert run["steps"] == 40 and run["tokens"] == section["tokens"]
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in log]
    resumed_at = steps.index(run["resumed_from_step"] + 1, 1)
    assert steps[resumed_at - 1] >= run["resumed_from_step"]  # the live log continues the killed run's lines

    changed = dict(section, lr=section["lr"] / 2)
    subprocess.run(_cmd(tmp, tiny_model_dir, changed, tmp / "phase_lr"), cwd=REPO, check=True, capture_output=True)
    run2 = json.loads((tmp / "phase_lr" / "run.json").read_text())
    assert run2["resumed_from_step"] == 0 and run2["run_hash"] != run["run_hash"]
    assert run2["valid_loss_end"] < run2["valid_loss_start"]


@pytest.mark.slow  # training subprocesses (about 40-60 s each): the unit stage keeps its 5-minute budget
def test_finished_phase_asked_again_rewrites_the_same_outputs(setup, tiny_model_dir):
    """`--forcerun` on a finished phase: the complete checkpoint is reused, not an error (Composer refuses fit())."""
    from safetensors.torch import load_file

    tmp, section = setup
    section = dict(section, tokens=64 * 8 * 12, checkpoint_root=str(tmp / "ckpt_again"))
    out = tmp / "again"
    subprocess.run(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, check=True, capture_output=True)
    first = json.loads((out / "run.json").read_text())
    weights = load_file(out / "model" / "model.safetensors")
    r = subprocess.run(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    again = json.loads((out / "run.json").read_text())
    assert again["resumed_from_step"] == first["steps"] == 12
    assert again["valid_loss_end"] == first["valid_loss_end"] and again["valid_loss_start"] == first["valid_loss_start"]
    assert all((load_file(out / "model" / "model.safetensors")[k] == v).all() for k, v in weights.items())


def test_unfinished_checkpoint_files_are_dropped(tmp_path):
    from clmdetour.training.phase import drop_unfinished_checkpoints

    for name in ("ep0-ba10-rank0.pt", "ep0-ba20-rank0.pt", "ep0-ba30-rank0.pt", "ep0-ba30-rank1.pt"):
        (tmp_path / name).write_bytes(b"x" if "ba30" not in name else b"")
    (tmp_path / "latest-rank0.pt").symlink_to("ep0-ba20-rank0.pt")
    assert drop_unfinished_checkpoints(tmp_path) == ["ep0-ba30-rank0.pt", "ep0-ba30-rank1.pt"]
    assert sorted(p.name for p in tmp_path.glob("ep*")) == ["ep0-ba10-rank0.pt", "ep0-ba20-rank0.pt"]
    assert drop_unfinished_checkpoints(tmp_path) == []
    (tmp_path / "latest-rank0.pt").unlink()  # no finished save at all: nothing is vouched for
    assert drop_unfinished_checkpoints(tmp_path) == ["ep0-ba10-rank0.pt", "ep0-ba20-rank0.pt"]
