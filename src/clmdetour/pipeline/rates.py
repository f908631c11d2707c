"""The throughput rates of the GPU-hours projection, in one data file with their provenance.

``gpu_rates.json`` (beside this module) holds, per rate kind (``causal``, ``masked``, ``finetune_8192``,
``finetune_512``), tokens/s per GPU, the sequence length, whether it was measured (False: an estimate, said
so in the projection) and where it comes from: the benchmark row, what it ran, the device, torch, the date and
the commit. :func:`update_from_benchmark` rewrites it from a device run of ``bash benchmarks/gpu.sh``::

    python -m clmdetour.pipeline.rates update benchmarks/results/gpu.json [more.json ...]
    python -m clmdetour.pipeline.rates show
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RATES_FILE = Path(__file__).with_name("gpu_rates.json")

#: rate kind -> the benchmark row (benchmarks/gpu.py) whose tokens/s measures it, and its sequence length (tokens)
RATE_ROWS = {"causal": ("pretrain/clm-flex", 8192), "masked": ("pretrain/decay-flex", 8192),
             "finetune_8192": ("finetune/doc-8192/project", 8192), "finetune_512": ("finetune/cls-512/project", 512)}
#: Fields every entry has.
FIELDS = ("tokens_per_s", "seq_len", "measured", "row", "what", "device", "torch", "date", "commit")


def read_rates(path: Path = RATES_FILE) -> dict[str, dict]:
    """The entries of the rates file, checked.

    Raises:
        ValueError: the file is not JSON, or an entry lacks a field of :data:`FIELDS` or has a rate that is not
            a positive number (naming the file and the kind).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    out = {}
    for kind, entry in data.items():
        if kind.startswith("_"):
            continue
        missing = [f for f in FIELDS if f not in entry]
        if missing:
            raise ValueError(f"{path}: rate {kind!r} lacks {missing}")
        rate = entry["tokens_per_s"]
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
            raise ValueError(f"{path}: rate {kind!r}: tokens_per_s {rate!r} is not a positive number")
        out[kind] = entry
    return out


def provenance(entry: dict) -> str:
    """One line saying where a rate comes from (row, what it ran, device, torch, date, commit)."""
    head = "measured" if entry["measured"] else "ESTIMATE, not measured for this use"
    return (f"{head}: benchmarks/gpu.py row {entry['row']} ({entry['what']}) on {entry['device']}, torch "
            f"{entry['torch']}, {entry['date']}, commit {entry['commit']}")


def rates_from_benchmark(result: dict, where: str) -> dict[str, dict]:
    """The entries a device run's JSON (``benchmarks/results/gpu.json``) measures: each rate kind whose row
    finished with a tokens/s (a stopped row's partial rate counts, said so in ``what``).

    Raises:
        ValueError: a ``--dry`` run (CPU figures are no GPU rates) or a JSON without rows, naming ``where``.
    """
    if result.get("dry"):
        raise ValueError(f"{where}: a --dry run on the CPU; its figures are no GPU rates")
    if not isinstance(result.get("rows"), list):
        raise ValueError(f"{where}: no 'rows' list (not a benchmarks/gpu.py result)")  # noqa: TRY004 (bad file content)
    by_row = {r.get("metric"): r for r in result["rows"] if isinstance(r, dict)}
    out = {}
    for kind, (row, seq_len) in RATE_ROWS.items():
        r = by_row.get(row)
        if not r or not isinstance(r.get("tokens_per_s"), (int, float)) or "error" in r:
            continue
        what = f"{row}: {r.get('attention', '?')} attention, micro-batch {r.get('micro_batch_sequences', '?')}"
        if r.get("stopped"):
            what += f", STOPPED at its {r['stopped']} after {r.get('steps')} steps (partial)"
        out[kind] = {"tokens_per_s": round(float(r["tokens_per_s"]), 1), "seq_len": seq_len, "measured": True,
                     "row": row, "what": what, "device": result.get("device", "?"), "torch": result.get("torch", "?"),
                     "date": str(result.get("date", "?"))[:10], "commit": result.get("commit", "?")}
    return out


def update_from_benchmark(files: list[Path], path: Path = RATES_FILE) -> dict[str, dict]:
    """Rewrite the rates file (atomically) with the rates ``files`` measure, later files winning; entries
    they do not measure stay as they were.

    Returns:
        The entries written, by kind.

    Raises:
        ValueError: a file that is not a device run's JSON (:func:`rates_from_benchmark`), or none measures a rate.
        OSError: a file cannot be read.
    """
    from clmdetour.io import atomic_write_text

    current = json.loads(Path(path).read_text(encoding="utf-8"))
    read_rates(path)
    new = {}
    for f in files:
        try:
            result = json.loads(Path(f).read_text(encoding="utf-8"))
        except ValueError as e:
            raise ValueError(f"{f}: not valid JSON ({e})") from e
        new.update(rates_from_benchmark(result, str(f)))
    if not new:
        raise ValueError(f"{', '.join(map(str, files))}: no rate measured (rows {[r for r, _ in RATE_ROWS.values()]})")
    current.update(new)
    atomic_write_text(path, json.dumps(current, indent=2) + "\n")
    return new


def main(argv: list[str] | None = None) -> int:
    """``update FILE...`` or ``show``; exit 1 with one line on bad input."""
    p = argparse.ArgumentParser(prog="python -m clmdetour.pipeline.rates", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("update", help="rewrite the rates from device runs' JSON (benchmarks/results/gpu*.json)")
    up.add_argument("files", nargs="+", type=Path)
    sub.add_parser("show", help="print each rate with its provenance")
    a = p.parse_args(argv)
    try:
        if a.cmd == "update":
            for kind, entry in update_from_benchmark(a.files).items():
                print(f"{kind}: {entry['tokens_per_s']:,.0f} tokens/s ({provenance(entry)})")
            print(f"written: {RATES_FILE}")
        else:
            for kind, entry in read_rates().items():
                print(f"{kind}: {entry['tokens_per_s']:,.0f} tokens/s at {entry['seq_len']:,} tokens ({provenance(entry)})")
    except (OSError, ValueError) as e:
        print(f"rates: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
