"""Read the records a model card cites: phase ``run.json``, corpus manifest, evaluation table.

Every number in the card comes from these files (paths: :mod:`clmdetour.pipeline.paths`):
``results/pretrain/{variant}/{phase}/run.json``, ``results/corpus/manifest.json``
and ``results/eval_table.tsv``. Readers check the keys they use and raise one
line naming the file and the key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..io import read_json
from . import ReleaseError

# Keys of run.json the card uses (written by clmdetour.training.phase.phase_record).
RUN_KEYS = ("objective", "attention", "tokens", "frozen_parameters", "trainable_parameters", "world_size", "device",
            "global_batch_sequences", "micro_batch_sequences", "grad_accum", "seq_len", "wall_time_s", "versions",
            "git_sha", "section")
SECTION_KEYS = ("optimizer", "warmup_tokens", "lr")


def _require(obj: dict, keys, where: str) -> None:
    if not isinstance(obj, dict):
        raise ReleaseError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise ReleaseError(f"{where}: missing key(s) {missing}")


def read_phase_record(path: str | Path) -> dict[str, Any]:
    """Read one phase's ``run.json`` and check the keys the card cites.

    Raises:
        ReleaseError: the file is missing or invalid JSON, or lacks a key of
            ``RUN_KEYS`` (or ``section.optimizer`` / ``section.warmup_tokens``).
    """
    path = Path(path)
    try:
        record = read_json(path)
    except (FileNotFoundError, ValueError) as e:
        raise ReleaseError(f"{path}: cannot read the phase record ({e})") from None
    _require(record, RUN_KEYS, str(path))
    _require(record["section"], SECTION_KEYS, f"{path}: section")
    _require(record["attention"], ("implementation", "causal"), f"{path}: attention")
    _require(record["device"], ("type", "count"), f"{path}: device")
    _require(record["section"]["optimizer"], ("betas", "eps", "weight_decay"), f"{path}: section.optimizer")
    return record


def read_manifest_sources(path: str | Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per-source rows and the other top-level keys of ``results/corpus/manifest.json``.

    Each row is normalised to ``documents`` and ``tokens`` of the training split
    (the manifest's ``documents_train`` / ``tokens_train``, or plain
    ``documents`` / ``tokens``), ``epochs`` (how often the source's text was
    used; > 1 = repeated) and ``licence``; the manifest's other per-source
    keys are kept.

    Returns:
        (``{source: row}``, the manifest without ``sources``).

    Raises:
        ReleaseError: unreadable file, no ``sources`` object, or a source
            without tokens or ``licence``.
    """
    path = Path(path)
    try:
        manifest = read_json(path)
    except (FileNotFoundError, ValueError) as e:
        raise ReleaseError(f"{path}: cannot read the corpus manifest ({e})") from None
    _require(manifest, ("sources",), str(path))
    sources = manifest["sources"]
    if not isinstance(sources, dict) or not sources:
        raise ReleaseError(f"{path}: 'sources' must be a non-empty object {{name: {{tokens_train, licence, ...}}}}")
    rows = {}
    for name, row in sources.items():
        _require(row, ("licence",), f"{path}: sources.{name}")
        tokens = row.get("tokens_train", row.get("tokens"))
        if tokens is None:
            raise ReleaseError(f"{path}: sources.{name} has neither 'tokens_train' nor 'tokens'")
        rows[name] = {**row, "tokens": int(tokens), "documents": row.get("documents_train", row.get("documents"))}
    return rows, {k: v for k, v in manifest.items() if k != "sources"}


def read_eval_table(path: str | Path):
    """Read ``results/eval_table.tsv`` as a pandas DataFrame (empty cells become NaN).

    Raises:
        ReleaseError: unreadable file or no ``model`` column.
    """
    import pandas as pd

    path = Path(path)
    try:
        table = pd.read_csv(path, sep="\t")
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ReleaseError(f"{path}: cannot read the evaluation table ({e})") from None
    if "model" not in table.columns:
        raise ReleaseError(f"{path}: no 'model' column; columns are {list(table.columns)}")
    table["model"] = table["model"].astype(str)
    return table


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def missing_cells(table, model: str, tasks: list[str], baseline: str | None = None) -> list[str]:
    """Cells of ``model``'s row that hold no result, as ``"{column}"`` names.

    A cell is missing when the column is absent or the value is empty/NaN, for:
    ``{task}_mean`` and ``{task}_n`` of every task, ``macro_avg``, and (for a
    model other than ``baseline``) ``{task}_delta``. Cells that are NaN by
    construction are not results that could be missing and are not checked:
    the std of a single seed, Welch's p with zero variance, the baseline's own
    delta, and the sign test.

    Args:
        table: ``read_eval_table`` output.
        model: the ``model`` key of the row.
        tasks: the configured task names.
        baseline: the model deltas are measured against.

    Returns:
        Missing column names (``["<row>"]`` when the model has no row at all).
    """
    rows = table[table["model"] == model]
    if rows.empty:
        return ["<row>"]
    row = rows.iloc[0]
    wanted = []
    for task in tasks:
        wanted += [f"{task}_mean", f"{task}_n"]
        if model != baseline:
            wanted.append(f"{task}_delta")
    wanted.append("macro_avg")
    out = []
    for col in wanted:
        if col not in table.columns or _missing(row[col]) or col.endswith("_n") and float(row[col]) < 1:
            out.append(col)
    return out
