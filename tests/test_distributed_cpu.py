"""Distributed training proven on CPU: 2 gloo processes through the same launcher as the GPU path.

Every run goes through ``python -m clmdetour.training.launch --gpus 0
--cpu-processes N -- -m clmdetour.training.cli ...``, which starts N processes
with Composer's launcher (gloo backend), as the pretraining rules do with GPUs.

- Equivalence: one CLM phase-1 run as 2 processes (world size 2, micro-batch
  2) and as 1 process with gradient accumulation 2 (micro-batch 2) ends with
  the same weights (max |delta| <= 1e-5, fp32) and the same logged losses.
  CLM only: MLM masks are drawn from each process's own torch generator, so
  2 processes mask the rows differently from 1 process; the decay phase is
  therefore not compared (its data path, the sampler, is the same code).
- Data order: every row of a phase stream is read exactly once per step
  across ranks, by exactly one rank (``tests/dist_data_order.py``).
- Kill and resume: killing rank 1 ends the run (Composer's launcher, the
  parent of both ranks, sees rank 1 fail and terminates rank 0); the rerun
  resumes both ranks from the same checkpoint and ends where an uninterrupted
  2-process run does.
- SLURM time limit: only rank 1's job end time (a fake ``squeue``) is near, yet
  both ranks stop after the same step (the stop decision is a MAX all-reduce),
  one checkpoint set is written, and the rerun resumes both ranks from it and
  ends where the uninterrupted run does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, tiny_phase1_section

pytestmark = pytest.mark.slow

STEPS = 12
GLOBAL_BATCH = 4
SEQ_LEN = 64


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model_dir, demo_texts):
    tmp = tmp_path_factory.mktemp("dist")
    section = tiny_phase1_section(tmp, tiny_model_dir, demo_texts, SEQ_LEN)
    section.update(tokens=SEQ_LEN * GLOBAL_BATCH * STEPS, global_batch_sequences=GLOBAL_BATCH, micro_batch_sequences=2,
                   checkpoint_interval="3ba", log_interval_steps=1, valid_sequences=4, warmup_tokens=0,
                   precision="fp32", attn_implementation="sdpa", process_group_timeout_s=20, progress_bar=False)
    return tmp, section


def _env() -> dict:
    env = dict(os.environ, CLMDETOUR_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO / "tests")]))
    return env


def _cmd(tmp, model, section, out, processes):
    return [sys.executable, "-m", "clmdetour.training.launch", "--gpus", "0", "--cpu-processes", str(processes), "--",
            "-m", "clmdetour.training.cli", "--variant", "v", "--input-model", str(model), "--corpus",
            str(tmp / "corpus"), "--output-dir", str(out), "--section", json.dumps(section)]


def _run(tmp, model, section, name, processes):
    out = tmp / name
    section = dict(section, checkpoint_root=str(tmp / f"ckpt-{name}"))
    t0 = time.time()
    r = subprocess.run(_cmd(tmp, model, section, out, processes), cwd=tmp, env=_env(), capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    print(f"\n[dist] {name}: {processes} process(es), {time.time() - t0:.1f} s")
    return out


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "model" / "model.safetensors")


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def _losses(folder: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (folder / "train_log.jsonl").read_text().splitlines())]


@pytest.fixture(scope="module")
def two_procs(setup, tiny_model_dir):
    tmp, section = setup
    return _run(tmp, tiny_model_dir, section, "two", 2)


def test_two_processes_equal_one_process_with_gradient_accumulation(setup, tiny_model_dir, two_procs):
    tmp, section = setup
    one = _run(tmp, tiny_model_dir, section, "one", 1)
    run2, run1 = (json.loads((d / "run.json").read_text()) for d in (two_procs, one))
    assert (run2["world_size"], run2["grad_accum"], run2["per_device_batch_sequences"]) == (2, 1, 2)
    assert (run1["world_size"], run1["grad_accum"], run1["per_device_batch_sequences"]) == (1, 2, 4)
    assert run2["nodes"] == 1 and [r["rank"] for r in run2["ranks"]] == [0, 1]
    assert run2["steps"] == run1["steps"] == STEPS
    diff = _max_diff(_weights(two_procs), _weights(one))
    print(f"[dist] max |delta| of final weights, 2 processes vs 1 process x 2 micro-batches: {diff:.2e}")
    assert diff <= 1e-5
    # the trained weights moved far more than the tolerance
    assert _max_diff(_weights(one), {k: v for k, v in _weights_of_input(tiny_model_dir).items()}) > 1e-3
    l2, l1 = _losses(two_procs), _losses(one)
    assert [s for s, _ in l2] == [s for s, _ in l1] == list(range(1, STEPS + 1))
    assert max(abs(a - b) for (_, a), (_, b) in zip(l2, l1)) <= 1e-5, (l2, l1)


def _weights_of_input(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(model_dir / "model.safetensors")


def test_every_row_read_once_per_step_by_exactly_one_rank(tmp_path):
    cmd = [sys.executable, "-m", "clmdetour.training.launch", "--gpus", "0", "--cpu-processes", "2", "--",
           "-m", "dist_data_order", str(tmp_path)]
    r = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in (0, 1)]
    expected = ranks[0]["expected"]
    assert len(expected) == 3 and all(len(step) == 8 for step in expected)
    for s, step in enumerate(expected):
        # rank 0 reads the first half of the step's global batch, rank 1 the second: each stream
        # position once, by one rank (rows may repeat only where the stream wraps into a new epoch)
        assert ranks[0]["seen"][s] + ranks[1]["seen"][s] == step
        assert len(ranks[0]["seen"][s]) == len(ranks[1]["seen"][s]) == 4


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds the rank processes through /proc (Linux)")
def test_killed_rank_ends_the_run_and_both_ranks_resume_from_one_checkpoint(setup, tiny_model_dir, two_procs):
    tmp, section = setup
    section = dict(section, checkpoint_root=str(tmp / "ckpt-killed"))
    out = tmp / "killed"
    log = open(tmp / "killed.log", "w")  # noqa: SIM115 (closed at the end of the test)
    launcher = subprocess.Popen(_cmd(tmp, tiny_model_dir, section, out, 2), cwd=tmp, env=_env(), stdout=log,
                                stderr=subprocess.STDOUT)
    deadline = time.time() + 240
    ckpts: list[Path] = []
    while time.time() < deadline and launcher.poll() is None:
        # a finished save: Composer points latest-rank0.pt at the file once it is written (a file without
        # the link is a save in progress, which the rerun drops as unfinished)
        ckpts = list(Path(section["checkpoint_root"]).glob("v/phase1/*/latest-rank0.pt"))
        if ckpts:
            break
        time.sleep(0.05)
    assert ckpts and launcher.poll() is None, (tmp / "killed.log").read_text()[-3000:]
    ranks = {_rank_of(p): p for p in _children(launcher.pid)}
    assert set(ranks) == {0, 1}, ranks
    os.kill(ranks[1], signal.SIGKILL)  # rank 1, a process this test started (through the launcher)
    t_kill = time.time()
    launcher.wait(timeout=120)
    waited = time.time() - t_kill
    print(f"\n[dist] rank 1 killed: the launcher ended rank 0 and exited (status {launcher.returncode}) "
          f"after {waited:.1f} s")
    assert launcher.returncode != 0 and waited < 60
    assert _rank_of(ranks[0]) is None  # rank 0 is gone too
    assert not (out / "run.json").exists()

    r = subprocess.run(_cmd(tmp, tiny_model_dir, section, out, 2), cwd=tmp, env=_env(), capture_output=True,
                       text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    resumed = {rec["rank"]: rec["resumed_from_step"] for rec in run["ranks"]}
    assert resumed[0] == resumed[1] == run["resumed_from_step"] > 0, run["ranks"]
    assert run["steps"] == STEPS
    diff = _max_diff(_weights(out), _weights(two_procs))
    print(f"[dist] resumed from step {run['resumed_from_step']}: max |delta| vs uninterrupted run {diff:.2e}")
    assert diff <= 1e-5


FAKE_SQUEUE = """#!/bin/sh
# squeue -h -j ID -o %e as SLURM prints it: rank 1's job ends now + MARGIN s (its checkpoint deadline is
# now), every other rank's in an hour
if [ "$RANK" = 1 ]; then left=$MARGIN; else left=3600; fi
date -d "@$(( $(date +%s) + left ))" +%Y-%m-%dT%H:%M:%S
"""


def test_time_limit_stops_every_rank_at_one_step_and_the_rerun_resumes(setup, tiny_model_dir, two_procs):
    tmp, section = setup
    margin = 30
    section = dict(section, checkpoint_root=str(tmp / "ckpt-timelimit"), checkpoint_margin_s=margin)
    out = tmp / "timelimit"
    bin_dir = tmp / "fake-slurm-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "squeue").write_text(FAKE_SQUEUE)
    (bin_dir / "squeue").chmod(0o755)
    env = dict(_env(), SLURM_JOB_ID="4242", MARGIN=str(margin), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    r = subprocess.run(_cmd(tmp, tiny_model_dir, section, out, 2), cwd=tmp, env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode != 0 and not (out / "run.json").exists(), r.stderr[-3000:]
    folder = next(Path(section["checkpoint_root"]).glob("v/phase1/*"))
    events = [json.loads(line) for line in (folder / "time_limit.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "stop"], events
    stop = events[1]["step"]
    assert 1 <= stop < STEPS
    # One checkpoint set, at the stop step (DDP: Composer writes rank 0's file, which every rank loads), and
    # nothing after it.
    saved = sorted(p.name for p in folder.glob("ep*-ba*-rank*.pt"))
    assert f"ep0-ba{stop}-rank0.pt" in saved, saved
    assert all(int(name.split("-ba")[1].split("-")[0]) <= stop for name in saved), saved
    assert "saving a checkpoint at step" in r.stderr + r.stdout

    env.pop("SLURM_JOB_ID")  # the retried job: no deadline this time
    r = subprocess.run(_cmd(tmp, tiny_model_dir, section, out, 2), cwd=tmp, env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert [rec["resumed_from_step"] for rec in run["ranks"]] == [stop, stop] and run["steps"] == STEPS
    diff = _max_diff(_weights(out), _weights(two_procs))
    print(f"\n[dist] time limit on rank 1 only: both ranks stopped after step {stop}; resumed: max |delta| vs "
          f"uninterrupted run {diff:.2e}")
    assert diff <= 1e-5
