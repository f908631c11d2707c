"""Benchmark 6: planning overhead, wall time of ``snakemake -n all`` on the paper config.

The paper config's full grid (every variant and reference model x 8 tasks x 9
seeds). It runs in an empty working directory (``-d``) so that nothing under
the repository's ``results/`` changes the plan, with ``--configfile``
pointing at ``config/config.yaml`` and the three ``user`` tasks pointed at
tiny fixture files through ``--config`` (as the dry-run tests do), since a
user task without files stops planning by design. Time is measured around
the whole ``python -m snakemake`` process (interpreter start included), as a
user experiences it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, Row, median_range

GOAL_S = 5.0


def user_task_fixtures(root: Path) -> dict[str, str]:
    """Write a 1-row train/dev/test JSONL for each ``source: user`` task of the paper config; returns ``{task: folder}``."""
    from clmdetour.config import load_yaml
    from clmdetour.tasktypes import get_task_type

    tasks = load_yaml(REPO / "config" / "config.yaml").get("tasks") or {}
    out = {}
    for name, spec in tasks.items():
        if spec.get("source") != "user":
            continue
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        field = spec.get("label_field", "label")
        label = ["a"] if get_task_type(spec["type"], f"tasks.{name}.type").label_separator else "a"  # several labels: a list
        for split in ("train", "dev", "test"):
            (folder / f"{split}.jsonl").write_text(json.dumps({"id": split, "text": "t", field: label}) + "\n",
                                                   encoding="utf-8")
        out[name] = str(folder)
    return out


def dry_run(workdir: Path, fixtures: dict[str, str], target: str = "all", timeout_s: float = 300) -> tuple[float, int, str]:
    """Time one ``snakemake -n {target}``; returns (seconds, exit status, output tail)."""
    overrides = "{" + ", ".join(f"{k}: {{path: {v}}}" for k, v in fixtures.items()) + "}"
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--configfile",
           str(REPO / "config" / "config.yaml"), "-n", "--cores", "1", "--quiet", "rules", target]
    if fixtures:
        cmd += ["--config", f"tasks={overrides}"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=REPO, check=False)
    return time.perf_counter() - t0, r.returncode, (r.stdout + r.stderr)[-1500:]


def job_count(output: str) -> int | None:
    """Total job count from the dry-run summary table (``total  N``), if printed."""
    m = re.search(r"^total\s+(\d+)", output, re.MULTILINE)
    return int(m.group(1)) if m else None


def run(workdir: Path, quick: bool = False, log=print) -> list[Row]:
    """Median of ``repeats`` dry runs; also times ``snakemake --version`` (interpreter + import floor)."""
    root = Path(tempfile.mkdtemp(dir=workdir, prefix="planning-"))
    fixtures = user_task_fixtures(root / "fixtures")
    repeats = 1 if quick else 3
    times, floor = [], []
    status, tail = 0, ""
    for r in range(repeats):
        dt, status, tail = dry_run(root / "wd", fixtures)
        if status != 0:
            break
        times.append(dt)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "snakemake", "--version"], capture_output=True, timeout=120, check=False)
        floor.append(time.perf_counter() - t0)
        log(f"  snakemake -n all repeat {r + 1}/{repeats}: {dt:.2f} s (snakemake --version: {floor[-1]:.2f} s)")
    if status != 0:
        last = " ".join(tail.split())[-400:]
        return [Row(benchmark="6 planning overhead", metric="snakemake -n all (paper config)", unit="s", ours=None,
                    reference=None, ratio=None, ratio_meaning="seconds / 5 s goal", goal=f"< {GOAL_S} s", goal_met=None,
                    repeats=0, notes=f"dry run failed (exit {status}): {last}")]
    med, rng = median_range(times)
    fl, fl_rng = median_range(floor)
    return [Row(benchmark="6 planning overhead", metric="snakemake -n all (paper config)", unit="s", ours=med,
                reference=fl, ratio=med / GOAL_S, ratio_meaning="seconds / 5 s goal (lower is better); reference = "
                "`snakemake --version` (start-up floor)", goal=f"< {GOAL_S} s", goal_met=med < GOAL_S,
                repeats=len(times), ratio_range=[x / GOAL_S for x in rng], ours_range=rng, reference_range=fl_rng,
                details={"jobs": job_count(tail)})]
