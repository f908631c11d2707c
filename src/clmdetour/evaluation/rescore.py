"""Recompute every metric of fine-tuning runs from their saved predictions and the task's gold.

::

    python -m clmdetour.evaluation.rescore results/eval/clm-detour/emea/seed0.json
    python -m clmdetour.evaluation.rescore results/eval            # every seed record under the folder
    python -m clmdetour.evaluation.rescore results/eval/x/t --tasks-root results/tasks

For each seed record (``seed{N}.json`` with ``status: ok``): its predictions file is read and checked against
the record's sha256 (:func:`clmdetour.tasktypes.rescoring.read_predictions`), the dev and test metrics are
recomputed from the rows (:meth:`clmdetour.tasktypes.TaskType.rescore`) and compared with the record's
``dev_metrics`` and ``metrics``, and the saved gold with the gold of the prepared task
(``{tasks_root}/{task}``, default ``results/tasks``). One line per record: ``ok`` or each difference.
Exit status 0 when every record is what its predictions give, 1 otherwise (a record that cannot be read, is not
a seed record, or is missing beside its saved predictions counts), 2 on a bad command line.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from clmdetour.io import read_json
from clmdetour.tasktypes.rescoring import prediction_problems, read_predictions

SEED_RECORD = re.compile(r"^seed\d+\.json$")
#: The saved predictions beside a seed record (``seed{N}.predictions.json.gz``).
PREDICTIONS_SUFFIX = ".predictions.json.gz"


@dataclass
class Rescored:
    """One record rescored: ``recomputed`` metrics per split (empty when they could not be), ``problems``."""

    path: Path
    status: str
    recomputed: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The record is what its predictions give (a failed seed has nothing to rescore: ok)."""
        return not self.problems


def seed_records(path: str | Path) -> list[Path]:
    """The seed records of ``path``: itself when it is a file, else every ``seed{N}.json`` under it, sorted,
    and the record that should stand beside each saved predictions file (``seed{N}.predictions.json.gz``) whose
    record is missing (:func:`rescore_record` then reports it unreadable).

    Raises:
        FileNotFoundError: ``path`` does not exist, or a folder holds no seed record and no predictions.
    """
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such record or folder")
    found = {p for p in path.rglob("seed*.json") if SEED_RECORD.match(p.name)}
    found |= {p.with_name(p.name.removesuffix(PREDICTIONS_SUFFIX) + ".json") for p in path.rglob(f"seed*{PREDICTIONS_SUFFIX}")
              if SEED_RECORD.match(p.name.removesuffix(PREDICTIONS_SUFFIX) + ".json")}
    if not found:
        raise FileNotFoundError(f"{path}: no seed record (seed<N>.json) under it")
    return sorted(found)


def rescore_record(path: str | Path, tasks_root: str | Path | None = "results/tasks", task_data=None) -> Rescored:
    """Rescore one seed record (see the module doc).

    Args:
        tasks_root: the folder of prepared tasks (``{tasks_root}/{task}``); None: the gold is not compared.
        task_data: the task already loaded (:func:`clmdetour.tasks.contract.load_task_data`), used instead of
            ``tasks_root``.
    """
    from clmdetour.tasks.contract import TaskDataError, load_task_data
    from clmdetour.tasktypes import get_task_type

    path = Path(path)
    try:
        record = read_json(path)
    except (OSError, ValueError) as e:
        return Rescored(path, "unreadable", problems=[f"record unreadable: {e}"])
    if not isinstance(record, dict) or not isinstance(record.get("status"), str):
        what = type(record).__name__ if not isinstance(record, dict) else "an object without a 'status'"
        return Rescored(path, "unreadable", problems=[f"not a seed record: {what}"])
    if record.get("status") != "ok":
        return Rescored(path, str(record.get("status")))
    try:
        saved = read_predictions(path, record)
        task_type = get_task_type(saved.get("task_type"), f"{path}: task_type")
    except ValueError as e:
        return Rescored(path, "ok", problems=[str(e)])
    splits = None
    if task_data is None and tasks_root is not None:
        try:
            task_data = load_task_data(Path(tasks_root) / record["task"], record["task"])
        except (OSError, TaskDataError, ValueError) as e:
            return Rescored(path, "ok", problems=[f"the task's gold cannot be read: {e}"])
    if task_data is not None:
        splits = task_data.splits
    recomputed, problems = prediction_problems(task_type, saved.get("labels") or [], saved,
                                               {"dev": record.get("dev_metrics") or {},
                                                "test": record.get("metrics") or {}}, splits)
    return Rescored(path, "ok", recomputed, problems)


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module doc); returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m clmdetour.evaluation.rescore", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", help="seed records (seed<N>.json) or folders holding them")
    p.add_argument("--tasks-root", default="results/tasks", help="the prepared tasks' folder (default results/tasks)")
    p.add_argument("--no-gold", action="store_true", help="do not compare the saved gold with the task's")
    a = p.parse_args(argv)
    records = []
    try:
        for x in a.paths:
            records += seed_records(x)
    except FileNotFoundError as e:
        print(f"rescore: {e}", file=sys.stderr)
        return 1
    bad = 0
    for path in records:
        r = rescore_record(path, None if a.no_gold else a.tasks_root)
        if r.status == "unreadable":
            bad += 1
            print(f"{path}: UNREADABLE: {'; '.join(r.problems)}")
        elif r.status != "ok":
            print(f"{path}: {r.status} (nothing to rescore)")
        elif r.ok:
            test = ", ".join(f"{k} {v:.6g}" for k, v in r.recomputed["test"].items())
            print(f"{path}: ok, the record is what its predictions give (test {test})")
        else:
            bad += 1
            print(f"{path}: DIFFERS")
            for line in r.problems:
                print(f"  {line}")
    print(f"{len(records)} record(s) rescored, {bad} differ or cannot be read")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
