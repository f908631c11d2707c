"""The benchmark command: ``python benchmarks/run.py [--quick] [--only NAME ...]``.

Runs the benchmarks (see ``docs/performance.md``), prints one table and
writes it with the machine description to ``benchmarks/results/latest.json``
(``quick.json`` with ``--quick``), atomically. Library chatter (Composer's
console logger, transformers' warnings, progress bars) goes to
``benchmarks/results/{latest,quick}.log``; the terminal shows progress lines
and the table. Exit status 1 if a benchmark failed (its row says why);
a benchmark whose data are absent is marked skipped, not failed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import BenchmarkSkipped, Row

# name -> module; run in this order (cheap first).
BENCHMARKS = {"planning": "benchmarks.planning", "corpus": "benchmarks.corpus", "loss_memory": "benchmarks.loss_memory",
              "throughput": "benchmarks.throughput", "finetune": "benchmarks.finetune", "fixed_cost": "benchmarks.fixed_cost",
              "loader": "benchmarks.loader"}
NUMBERS = {"throughput": "1", "corpus": "2, 5", "loss_memory": "3", "finetune": "4", "planning": "6", "fixed_cost": "7",
           "loader": "8"}


def machine() -> dict:
    """Description of this machine and software (for the results file)."""
    import composer
    import datasets
    import torch
    import transformers

    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gib = None
    return {"cpu": cpu, "cpu_count": os.cpu_count(), "memory_gib": round(mem_gib, 1) if mem_gib else None,
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "composer": composer.__version__, "datasets": datasets.__version__,
            "torch_threads": torch.get_num_threads()}


def format_value(v: float | None, unit: str) -> str:
    """A number for the table, in ``unit``."""
    if v is None:
        return "not measured"
    if unit == "fraction":
        return f"{v:.2%}"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def table(rows: list[dict]) -> str:
    """Markdown table of result rows."""
    out = ["| # | metric | unit | ours | reference | ratio [min, max] | goal | met |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rng = f" [{r['ratio_range'][0]:.3g}, {r['ratio_range'][1]:.3g}]" if r.get("ratio_range") else ""
        ratio = f"{r['ratio']:.3g}{rng}" if r.get("ratio") is not None else "-"
        met = {True: "yes", False: "**no**", None: "-"}[r.get("goal_met")]
        out.append(f"| {r['benchmark']} | {r['metric']} | {r['unit']} | {format_value(r['ours'], r['unit'])} | "
                   f"{format_value(r['reference'], r['unit'])} | {ratio} | {r['goal']} | {met} |")
    notes = [f"- {r['benchmark']}, {r['metric']}: {r['notes']}" for r in rows if r.get("notes")]
    return "\n".join(out + ([""] + notes if notes else []))


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks; returns the exit status."""
    p = argparse.ArgumentParser(description="Benchmarks of the pipeline's hot paths (ratios measured in one run).")
    p.add_argument("--quick", action="store_true", help="small sizes and 1-2 repeats: a smoke run, not a measurement")
    p.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run only these benchmarks")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads in this process (default 1)")
    p.add_argument("--out", type=Path, default=None, help="results JSON (default benchmarks/results/{latest,quick}.json)")
    p.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a new temporary folder)")
    a = p.parse_args(argv)

    import importlib
    import tempfile

    import torch

    from clmdetour.io import atomic_write_json

    torch.set_num_threads(a.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = a.out or REPO / "benchmarks" / "results" / ("quick.json" if a.quick else "latest.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    log_path = out.with_suffix(".log")
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="clmdetour-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    term = sys.stdout

    def say(msg: str) -> None:
        print(msg, file=term, flush=True)

    selected = a.only or list(BENCHMARKS)
    rows: list[dict] = []
    timings: dict[str, float] = {}
    failed = False
    load_start = os.getloadavg()
    t_all = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as logf, contextlib.redirect_stdout(logf), contextlib.redirect_stderr(logf):
        for name in [n for n in BENCHMARKS if n in selected]:
            say(f"[{name}] benchmark {NUMBERS[name]} ...")
            t0 = time.perf_counter()
            try:
                result = importlib.import_module(BENCHMARKS[name]).run(workdir, quick=a.quick, log=say)
                rows += [r.as_dict() for r in result]
            except BenchmarkSkipped as e:
                rows.append(Row(benchmark=NUMBERS[name], metric=name, unit="-", ours=None, reference=None, ratio=None,
                                ratio_meaning="-", goal="-", goal_met=None, repeats=0, notes=f"skipped: {e}").as_dict())
            except Exception as e:  # noqa: BLE001 (one failing benchmark must not hide the others' figures)
                failed = True
                import traceback

                traceback.print_exc()
                rows.append(Row(benchmark=NUMBERS[name], metric=name, unit="-", ours=None, reference=None, ratio=None,
                                ratio_meaning="-", goal="-", goal_met=None, repeats=0,
                                notes=f"failed: {type(e).__name__}: {str(e)[:300]}").as_dict())
            timings[name] = round(time.perf_counter() - t0, 1)
            say(f"[{name}] done in {timings[name]:.0f} s")
    result = {
        "command": "python benchmarks/run.py" + (" --quick" if a.quick else "") + (f" --only {' '.join(a.only)}" if a.only else ""),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), "quick": a.quick,
        "machine": machine(), "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()], "wall_time_s": round(time.perf_counter() - t_all, 1),
        "benchmark_wall_time_s": timings, "rows": rows,
    }
    atomic_write_json(out, result)
    say("")
    say(table(rows))
    say(f"\nwritten: {out.relative_to(REPO) if out.is_relative_to(REPO) else out} (log: {log_path.name}); "
        f"wall time {result['wall_time_s']:.0f} s; load average {load_start[0]:.1f} -> {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs")
    if a.workdir is None:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
