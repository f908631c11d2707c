"""A Markdown summary of a finished run directory, for docs and lab notebooks.

``python -m clmdetour.run_summary RUN_DIR [--out FILE]`` reads what the
workflow wrote under ``RUN_DIR/results`` and prints (or writes atomically):

- the corpus manifest per source (``results/corpus/manifest.json``): licence,
  documents, held apart, duplicates, decontaminated (per task), tokens, epochs;
- every pretraining phase's held-out loss at its start and end and its wall
  time (``results/base/run.json``, ``results/pretrain/{variant}/{phase}/run.json``);
- the evaluation table (``results/eval_table.md``), when present;
- the paper's claims tested on the run (``results/claims.md``), when present;
- the summed job wall time from Snakemake's ``benchmark:`` files
  (``results/benchmarks/**``, column ``s``, seconds), per rule.

The summed job time is CPU-time-like (parallel jobs add up); the elapsed wall
time of the whole command is what ``time`` around ``snakemake`` measures.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

from clmdetour.io import atomic_write_text, read_json


class SummaryError(ValueError):
    """A run folder lacks the files a summary needs (the message names the file)."""


def _read_json(path: Path) -> dict:
    try:
        return read_json(path)
    except FileNotFoundError:
        raise SummaryError(f"{path}: missing; has the run finished (`snakemake ... all`)?") from None
    except ValueError as e:  # read_json's message names the file, line and column
        raise SummaryError(str(e)) from None


def manifest_table(manifest: dict) -> list[str]:
    """Markdown lines: one row per corpus source of a ``results/corpus/manifest.json``."""
    lines = [("| source | licence | documents (train / valid) | held apart for base | duplicates removed "
              "| decontaminated (per task) | tokens available | epochs | tokens in train stream |"),
             "|---|---|---|---|---|---|---|---|---|"]
    for name, s in manifest["sources"].items():
        per_task = ", ".join(f"{k}: {v}" for k, v in s.get("decontaminated_per_task", {}).items()) or "-"
        lines.append(f"| {name} | {s['licence']} | {s['documents_train']:,} / {s['documents_valid']:,} "
                     f"| {s.get('held_apart_for_base_model', 0):,} | {s['duplicates_removed']:,} "
                     f"| {s['decontaminated']} ({per_task}) | {s['tokens_available']:,} | {s['epochs']} "
                     f"| {s['tokens_train']:,} |")
    train = manifest.get("train", {})
    if train:
        lines += ["", (f"Train stream: {train['sequences']:,} sequences of {manifest['seq_len']} tokens "
                       f"({train['tokens']:,} tokens), packing efficiency {train['packing_efficiency']:.4f}.")]
    return lines


def phase_table(results: Path) -> list[str]:
    """Markdown lines: held-out loss start -> end and wall time of the base model and every phase run."""
    runs = sorted(results.glob("base/run.json")) + sorted(results.glob("pretrain/*/*/run.json"))
    lines = ["| model / phase | objective | tokens | steps | held-out loss start -> end | wall time (s) |",
             "|---|---|---|---|---|---|"]
    for path in runs:
        r = _read_json(path)
        phase = "base MLM" if r.get("variant") == "base" else r["phase"]
        lines.append(f"| {r['variant']} / {phase} | {r['objective']} | {r['tokens']:,} | {r['steps']} "
                     f"| {r['valid_loss_start']:.3f} -> {r['valid_loss_end']:.3f} | {r['wall_time_s']:.0f} |")
    return lines


def benchmark_seconds(results: Path) -> dict[str, float]:
    """Summed ``s`` column (seconds) of Snakemake benchmark files, per rule (the folder under ``benchmarks``)."""
    per_rule: dict[str, float] = defaultdict(float)
    for path in sorted((results / "benchmarks").rglob("*")):
        if not path.is_file():
            continue
        with path.open(encoding="utf-8") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        if rows and "s" in rows[-1]:
            rule = path.relative_to(results / "benchmarks").parts[0]
            per_rule[rule] += float(rows[-1]["s"])
    return dict(per_rule)


def summarize(run_dir: str | Path) -> str:
    """The Markdown summary of ``run_dir`` (see the module doc).

    Raises:
        SummaryError: ``results/corpus/manifest.json`` or a phase ``run.json`` is missing or unreadable.
    """
    results = Path(run_dir) / "results"
    out = ["## Corpus manifest", ""] + manifest_table(_read_json(results / "corpus" / "manifest.json"))
    out += ["", "## Pretraining", ""] + phase_table(results)
    table = results / "eval_table.md"
    out += ["", "## Evaluation", ""]
    out += table.read_text(encoding="utf-8").rstrip().splitlines() if table.exists() else ["(no results/eval_table.md yet)"]
    claims = results / "claims.md"
    out += ["", "## The paper's claims on this run", ""]
    out += claims.read_text(encoding="utf-8").rstrip().splitlines() if claims.exists() else ["(no results/claims.md yet)"]
    seconds = benchmark_seconds(results)
    if seconds:
        out += ["", "## Job time (Snakemake benchmark files, summed over jobs)", "", "| rule | jobs' wall time (min) |", "|---|---|"]
        out += [f"| {rule} | {s / 60:.1f} |" for rule, s in sorted(seconds.items(), key=lambda kv: -kv[1])]
        out += [f"| total | {sum(seconds.values()) / 60:.1f} |"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m clmdetour.run_summary RUN_DIR [--out FILE]``; exit 1 with a one-line error."""
    p = argparse.ArgumentParser(description="Markdown summary of a finished run directory.")
    p.add_argument("run_dir", help="the folder snakemake ran in (holds results/)")
    p.add_argument("--out", help="write here (atomically) instead of stdout")
    a = p.parse_args(argv)
    try:
        text = summarize(a.run_dir)
    except SummaryError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if a.out:
        atomic_write_text(a.out, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
