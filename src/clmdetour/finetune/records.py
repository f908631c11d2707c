"""A fine-tuning job's records: one JSON file per seed, its predictions beside it, and the job's exit status.

Record keys: ``model``, ``task``, ``seed``, ``status`` (``ok``, ``failed``, or ``diverged`` when every
learning rate of the grid diverged), ``metric`` (the name the table reports), ``task_type``, ``metrics``
(test), ``dev_metric``, ``dev_metrics``, ``best_epoch``, ``dev_history``, ``train_loss``
(:func:`clmdetour.finetune.loop.train_loss_summary`), ``attention`` (the back-end used and why:
:func:`clmdetour.runtime.attention.settle_attention`), ``hyperparameters``, ``lr_sweep``, ``data`` (examples,
model inputs, truncated inputs, and per split the task type's own counts:
:meth:`clmdetour.tasktypes.TaskType.split_counts`), ``versions``, ``device``, ``model_revision``,
``predictions`` (file name and sha256), ``wall_time_s``, and ``error`` for a seed without a score.
"""

from __future__ import annotations

import logging
from pathlib import Path

from clmdetour.io import atomic_write_json
from clmdetour.tasks.contract import TaskData
from clmdetour.tasktypes.rescoring import write_predictions

log = logging.getLogger("clmdetour.finetune")


def diverged(result: dict) -> bool:
    """Whether a (seed, lr) run's training loss diverged (:func:`clmdetour.finetune.loop.train_loss_summary`)."""
    return bool((result.get("train_loss") or {}).get("diverged"))


def sweep_record(grid: list[float], tolerance: float, seed_results: list[dict], metric: str, choice,
                 seeds_in_mean: list[int]) -> dict:
    """A seed record's ``lr_sweep``: the grid, this seed's dev and test score at each point and,
    when a choice was made (:func:`clmdetour.finetune.sweep.choose_lr`), the mean dev curve and the chosen point."""
    sweep = {"grid": grid, "tie_tolerance": tolerance,
             "selection": "mean dev score over the job's seeds; ties within tie_tolerance go toward the grid's middle",
             "seed_dev": [r["dev_metric"] for r in seed_results],
             "seed_test": [r["metrics"][metric] for r in seed_results]}
    if choice is not None:
        sweep.update(dev_mean=choice.dev_mean, seeds_in_mean=seeds_in_mean, chosen_lr=choice.lr, chosen_index=choice.index,
                     ties=[grid[i] for i in choice.ties], flat=choice.flat)
    return sweep


def seed_error(seed: int, errors: dict[int, str], results: dict[int, list[dict]]) -> str:
    """Why a seed has no score: its error, every grid point diverged, or no seed finishing the sweep."""
    if seed in errors:
        return errors[seed]
    rs = results.get(seed) or []
    if rs and all(diverged(r) for r in rs):
        return "diverged at every learning rate of the grid: " + "; ".join(r["train_loss"]["diverged"] for r in rs)
    return "no seed finished the sweep"


def seed_record(model: str, task: str, seed: int, data: TaskData, hyper: dict, base: dict, lr_sweep: dict,
                result: dict | None, error: str) -> dict:
    """One seed's record: the job's fields (``base``: data, versions, device, model revision), its
    ``hyperparameters`` and ``lr_sweep``, then the chosen run's ``result`` (``status: ok``) or, when None,
    ``status: failed`` with ``error``."""
    record = {"model": model, "task": task, "seed": seed, "metric": data.metric, "task_type": data.task_type.name,
              "hyperparameters": hyper, **base, "lr_sweep": lr_sweep}
    if result is None:
        status = "diverged" if error.startswith("diverged") else "failed"
        record.update(status=status, metrics=None, dev_metric=None, error=error)
    else:
        record.update(result)
        record["status"] = "ok"
        log.info("%s / %s seed %d: test %s %.4f (dev %.4f, epoch %d, lr %g)", model, task, seed, data.metric,
                 record["metrics"][data.metric], record["dev_metric"], record["best_epoch"], hyper["lr"])
    return record


def write_seed_record(out: str | Path, record: dict, data: TaskData) -> dict:
    """Write a seed's record, after its predictions beside it (:func:`clmdetour.tasktypes.rescoring.write_predictions`;
    the record keeps their file name and sha256 in ``predictions``), each atomically, as standard JSON (a
    diverged grid point's non-finite score is written as null); returns the record written."""
    saved = record.pop("predictions", None)
    if saved is not None:
        header = {k: record[k] for k in ("model", "task", "seed", "task_type", "metric")}
        record["predictions"] = write_predictions(out, dict(header, labels=list(data.labels)), saved)
    atomic_write_json(out, record, strict=True)
    return record


def exit_status(records: list[dict]) -> int:
    """Exit status of a fine-tuning job (rule ``finetune``): 0 when at least one seed succeeded or diverged
    (a diverged seed is a result: ``status: diverged``, named in the table's notes), 1 when every seed failed
    (an error). Logs the failed and the diverged seeds."""
    failed = [r["seed"] for r in records if r["status"] == "failed"]
    gone = [r["seed"] for r in records if r["status"] == "diverged"]
    if failed:
        log.warning("seeds %s failed; their records say status=failed and the table shows them as missing", failed)
    if gone:
        log.warning("seeds %s diverged at every learning rate; their records say status=diverged", gone)
    return 1 if failed and len(failed) == len(records) else 0
