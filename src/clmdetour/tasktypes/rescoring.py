"""Saved predictions: their file, their digest, and every metric recomputed from them (docs/tasks.md,
"Saved predictions and rescoring").

A fine-tuning run saves, beside its seed record ``seed{N}.json``, ``seed{N}.predictions.json.gz``: gzip
(mtime 0, keys sorted, so equal content gives equal bytes) of one JSON object::

    {"format": "clmdetour-predictions/1", "model", "task", "seed", "task_type", "metric", "labels",
     "dev": {"fitted": {...}, "rows": [{"id", "gold", "predicted"[, "scores"]}, ...]},
     "test": {...}}

rows in the task's split order, labels by name (:class:`clmdetour.tasktypes.Predictions`). The record names
the file and its sha256 (``predictions``). :func:`prediction_problems` recomputes every metric of both splits
from the rows (:meth:`clmdetour.tasktypes.TaskType.rescore`) and compares them with the record's, and the
saved gold with the task's.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from pathlib import Path

FORMAT = "clmdetour-predictions/1"
#: Largest difference between a recorded and a recomputed score that counts as equal (fractions; both come
#: from the same float64 arithmetic, so any real difference is far larger).
TOLERANCE = 1e-9
SPLITS = ("dev", "test")


def predictions_path(record_path: str | Path) -> Path:
    """``seed{N}.predictions.json.gz`` beside the record ``seed{N}.json``."""
    record_path = Path(record_path)
    return record_path.with_name(f"{record_path.stem}.predictions.json.gz")


def write_predictions(record_path: str | Path, header: dict, splits: dict) -> dict:
    """Write the predictions of a run beside its record, atomically (temp file, then rename).

    Args:
        header: ``model``, ``task``, ``seed``, ``task_type``, ``metric``, ``labels``.
        splits: ``{"dev": {"fitted", "rows"}, "test": {...}}``.

    Returns:
        The record's ``predictions`` field: ``{"file": name, "sha256": hex, "bytes": size, "format"}``.
    """
    from clmdetour.io import naming_full_disk

    path = predictions_path(record_path)
    # keys sorted: the same predictions give the same bytes (and sha256) whether they were just computed or read
    # back from a job's scratch store, whose JSON sorts its keys
    body = json.dumps(dict(header, format=FORMAT, **{s: splits[s] for s in SPLITS}), ensure_ascii=False,
                      separators=(",", ":"), allow_nan=True, sort_keys=True).encode("utf-8")
    data = gzip.compress(body, compresslevel=6, mtime=0)
    tmp = path.with_name(f".{path.name}.tmp")
    with naming_full_disk(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        tmp.replace(path)
    return {"file": path.name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "format": FORMAT}


def read_predictions(record_path: str | Path, record: dict) -> dict:
    """The predictions a record names, checked against its digest.

    Raises:
        ValueError: the record names no predictions, the file is missing, its digest differs, or it is not
            the format (the message names the file).
    """
    meta = record.get("predictions")
    if not isinstance(meta, dict) or "file" not in meta:
        raise ValueError(f"{record_path}: no saved predictions (a record written before they were saved: rerun "
                         "its fine-tune job)")
    path = Path(record_path).with_name(meta["file"])
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ValueError(f"{path}: the predictions the record names cannot be read ({e.strerror or e})") from e
    digest = hashlib.sha256(data).hexdigest()
    if digest != meta.get("sha256"):
        raise ValueError(f"{path}: sha256 {digest[:12]}... is not the record's {str(meta.get('sha256'))[:12]}...: "
                         "the file changed after the run")
    try:
        saved = json.loads(gzip.decompress(data))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a gzip JSON predictions file ({e})") from e
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        raise ValueError(f"{path}: format {saved.get('format') if isinstance(saved, dict) else None!r}, "
                         f"expected {FORMAT!r}")
    return saved


def rescore_splits(task_type, labels: list[str], saved: dict) -> dict[str, dict[str, float]]:
    """``{"dev": metrics, "test": metrics}`` recomputed from the saved rows alone.

    Raises:
        ValueError: a split or its rows missing, or rows the type cannot score (names the split).
    """
    out = {}
    for split in SPLITS:
        part = saved.get(split)
        if not isinstance(part, dict) or not isinstance(part.get("rows"), list) or not part["rows"]:
            raise ValueError(f"{split}: no predicted rows")
        try:
            out[split] = task_type.rescore(labels, part["rows"], part.get("fitted") or {})
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{split}: rows that cannot be scored ({type(e).__name__}: {e})") from e
    return out


def _differs(a, b) -> bool:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a != b
    if math.isnan(a) or math.isnan(b):
        return not (math.isnan(a) and math.isnan(b))
    return abs(a - b) > TOLERANCE


def metric_differences(recorded: dict[str, dict], recomputed: dict[str, dict]) -> list[str]:
    """One line per metric whose recorded value differs from the recomputed one (``split metric: a != b``)."""
    lines = []
    for split in SPLITS:
        for name, value in recomputed[split].items():
            have = (recorded.get(split) or {}).get(name)
            if have is None or _differs(have, value):
                lines.append(f"{split} {name}: recorded {have!r}, recomputed {value!r}")
    return lines


def gold_differences(task_type, saved: dict, splits: dict[str, list[dict]], limit: int = 5) -> list[str]:
    """Where the saved gold is not the task's: a document id missing on either side, or another gold
    (:meth:`clmdetour.tasktypes.TaskType.gold_of_row`); at most ``limit`` lines per split."""
    lines = []
    for split in SPLITS:
        task_gold = {str(r["id"]): task_type.gold_of_row(r) for r in splits.get(split, [])}
        saved_gold = {str(r.get("id")): r.get("gold") for r in saved[split]["rows"]}
        problems = [f"{split} {i}: in the task, not in the predictions" for i in task_gold if i not in saved_gold]
        problems += [f"{split} {i}: predicted, not in the task" for i in saved_gold if i not in task_gold]
        problems += [f"{split} {i}: saved gold {g!r}, the task's {task_gold[i]!r}" for i, g in saved_gold.items()
                     if i in task_gold and g != task_gold[i]]
        lines += problems[:limit] + ([f"{split}: {len(problems) - limit} more"] if len(problems) > limit else [])
    return lines


def prediction_problems(task_type, labels: list[str], saved: dict, recorded: dict[str, dict],
                        splits: dict[str, list[dict]] | None = None) -> tuple[dict, list[str]]:
    """Recompute a run's metrics from its saved predictions and say where they are not the record's.

    Args:
        saved: the predictions (:func:`read_predictions`, or a result's ``predictions``).
        recorded: ``{"dev": dev_metrics, "test": metrics}`` of the record.
        splits: the task's rows per split (``TaskData.splits``), to compare the gold; None: not compared.

    Returns:
        ``(recomputed metrics per split, problems)``; no problem means the record is what its predictions give.
    """
    try:
        recomputed = rescore_splits(task_type, labels, saved)
    except ValueError as e:
        return {}, [str(e)]
    problems = metric_differences(recorded, recomputed)
    if splits is not None:
        problems += gold_differences(task_type, saved, splits)
    return recomputed, problems
