"""One fine-tuning job: one model on one task, every seed at every grid learning rate, in one process.

:func:`run_task` takes a :class:`clmdetour.finetune.job.FinetuneJob` (built once from the rule's params) and
runs, in order: :func:`clmdetour.finetune.inputs.prepare_task_inputs` (the task read and tokenised once, shared by
the seeds), :func:`sweep_seeds` (each seed at each grid point: :func:`clmdetour.finetune.loop.train_one_seed`,
a finished run kept in scratch by :class:`clmdetour.finetune.finished.FinishedRuns`), :func:`job_lr_choice`
(:func:`clmdetour.finetune.sweep.choose_lr` on the mean dev score), then one record per seed at the chosen
learning rate (:mod:`clmdetour.finetune.records`, which lists the record keys). Each seed's record is written
atomically; a seed that fails leaves the others' records (its own says ``status: failed`` and has no metrics).
Nothing a seed does depends on the seeds run before it, so a seed gives the same metrics alone or among others.
"""

from __future__ import annotations

import json
import logging
import math
import time
import traceback
from pathlib import Path

from clmdetour.finetune.finished import FinishedRuns
from clmdetour.finetune.inputs import PreparedTask, hyperparameters_record, job_memory_plan, prepare_task_inputs
from clmdetour.finetune.job import FinetuneJob
from clmdetour.finetune.loop import device_and_precision, train_one_seed
from clmdetour.finetune.records import diverged, seed_error, seed_record, sweep_record, write_seed_record
from clmdetour.finetune.sweep import choose_lr
from clmdetour.io import versions
from clmdetour.settings import FinetuneSettings
from clmdetour.tasks.settings import TaskSettings

log = logging.getLogger("clmdetour.finetune")


def sweep_seeds(*, model: str, task: str, model_dir: str | Path, prepared: PreparedTask, task_settings: TaskSettings,
                settings: FinetuneSettings, seeds: list[int], device: str, precision: str,
                finished: FinishedRuns | None = None, micro_batch: int | None = None) -> tuple[dict[int, list[dict]], dict[int, str], dict[int, float]]:
    """Train every seed at every grid learning rate (seeds in the order given, ``task_settings.finetune``'s
    :attr:`clmdetour.settings.TaskFinetuneSettings.lr_points` in order).

    A seed stops at its first failed grid point; the other seeds go on. With ``finished``, a run
    already stored there is read instead of trained, and each new result is stored as it finishes.
    ``micro_batch``: sequences per forward pass (:func:`train_one_seed`).

    Returns:
        ``(results, errors, walls)``: per seed, one :func:`train_one_seed` result per
        grid point finished; the error of each failed seed; wall time (seconds; a reused run counts
        the seconds it took when it ran).
    """
    data = prepared.data
    results: dict[int, list[dict]] = {}
    errors: dict[int, str] = {}
    walls: dict[int, float] = {}
    for seed in seeds:
        results[seed], walls[seed] = [], 0.0
        for lr in task_settings.finetune.lr_points:
            start = time.perf_counter()
            res = finished.get(seed, lr) if finished else None
            if res is not None:
                log.info("%s / %s seed %d lr %g: finished before (%s), reused", model, task, seed, lr, finished.folder)
            else:
                try:
                    res = train_one_seed(seed, model_dir=str(model_dir), tokenizer=prepared.tokenizer, task=data,
                                         data=prepared.encoded, finetune=task_settings.finetune, lr=lr,
                                         settings=settings, device=device, precision=precision,
                                         additions=prepared.additions, micro_batch=micro_batch)
                except Exception as e:  # noqa: BLE001 (one failed seed must not lose the others' records)
                    log.error("%s / %s seed %d lr %g failed:\n%s", model, task, seed, lr, traceback.format_exc())
                    errors[seed] = f"{type(e).__name__} at lr {lr:g}: {e}"
                    walls[seed] += time.perf_counter() - start
                    break
                res = json.loads(json.dumps(res, default=str))  # the values the records hold, stored or not
                res["wall_s"] = time.perf_counter() - start
                if finished:
                    finished.put(seed, lr, res)
            walls[seed] += res.pop("wall_s")
            log.info("%s / %s seed %d lr %g: dev %s %.4f, test %.4f", model, task, seed, lr, data.metric,
                     res["dev_metric"], res["metrics"][data.metric])
            results[seed].append(res)
    return results, errors, walls


def job_lr_choice(model: str, task: str, grid: list[float], results: dict[int, list[dict]], errors: dict[int, str],
                  tolerance: float):
    """The job's learning-rate choice (:func:`choose_lr` on the mean dev score of the seeds that finished the
    sweep: ``results`` and ``errors`` of :func:`sweep_seeds`), logged. A diverged grid point
    (``train_loss.diverged``) is left out of the choice (its dev score counts as -inf, with a line); a seed whose
    every point diverged is left out (its record says ``diverged``).

    Returns:
        ``(ok, choice)``: ``{seed: dev score at each grid point}`` of those seeds, and the
        :class:`clmdetour.finetune.sweep.SweepChoice` (None when no seed finished).
    """
    ok = {}
    for s, rs in results.items():
        if s in errors:
            continue
        for g, r in zip(grid, rs):
            if diverged(r):
                log.warning("%s / %s seed %d lr %g diverged (%s): left out of the learning-rate choice", model, task,
                            s, g, r["train_loss"]["diverged"])
        if rs and all(diverged(r) for r in rs):
            continue
        ok[s] = [-math.inf if diverged(r) else r["dev_metric"] for r in rs]
    choice = choose_lr(grid, ok, tolerance) if ok else None
    if choice is not None:
        log.info("%s / %s: lr %g chosen (mean dev over %d seeds: %s; ties %s%s)", model, task, choice.lr, len(ok),
                 ", ".join(f"{g:g}: {m:.4f}" for g, m in zip(grid, choice.dev_mean)), [grid[i] for i in choice.ties],
                 "; flat curve" if choice.flat else "")
    return ok, choice


def run_task(job: FinetuneJob) -> list[dict]:
    """Fine-tune ``job.model`` on ``job.task`` for every seed and write one record per seed.

    Steps: :func:`clmdetour.finetune.inputs.prepare_task_inputs` (once), :func:`sweep_seeds` (every seed x grid
    point), :func:`job_lr_choice` (:func:`choose_lr` on the mean dev score), then one record per seed at the
    chosen learning rate (:func:`clmdetour.finetune.records.write_seed_record`, with its predictions).

    Returns:
        The records written (failed and diverged seeds included, with their ``status``).

    Raises:
        TaskDataError, ValueError: before any seed runs, when the task data or its config do not agree
            (nothing is written then).
        clmdetour.runtime.driver.DriverError: ``job.gpus`` > 0 and the NVIDIA driver cannot run the installed torch.
    """
    import torch

    check_gpu_driver(job.gpus, f"fine-tuning {job.model} on {job.task} on {job.gpus} GPU(s)")
    if job.threads:
        torch.set_num_threads(job.threads)
    task_settings, settings = job.task_settings, job.settings
    prepared = prepare_task_inputs(job.task, job.task_dir, task_settings, job.model_dir, settings, job.model_max_length)
    data = prepared.data
    device, precision = device_and_precision(job.gpus, settings.precision)
    hyper = hyperparameters_record(task_settings, prepared, settings, precision)
    memory = job_memory_plan(job.model_dir, prepared, task_settings, job.memory_limit_gib, precision)
    hyper["memory"] = memory.as_dict()
    revision = job.model_dir / "revision.txt"
    grid = task_settings.finetune.lr_points
    tolerance = settings.tie_tolerance
    finished = (FinishedRuns.for_job(job.scratch_dir, model=job.model, task=job.task, model_dir=job.model_dir,
                                     task_dir=job.task_dir, task_settings=task_settings, settings=settings,
                                     model_max_length=job.model_max_length, metric=data.metric, data=data)
                if job.scratch_dir else None)
    results, errors, walls = sweep_seeds(model=job.model, task=job.task, model_dir=job.model_dir, prepared=prepared,
                                         task_settings=task_settings, settings=settings, seeds=job.seeds,
                                         device=device, precision=precision, finished=finished,
                                         micro_batch=memory.micro_batch_sequences)
    ok, choice = job_lr_choice(job.model, job.task, grid, results, errors, tolerance)
    base = {"data": prepared.info, "versions": versions(), "device": device,
            "model_revision": revision.read_text().strip() if revision.exists() else None}
    records = []
    for seed, out in job.outputs.items():
        chosen = results[seed][choice.index] if seed not in errors and seed in ok and choice else None
        record = seed_record(job.model, job.task, seed, data, dict(hyper, lr=choice.lr if choice else None), base,
                             sweep_record(grid, tolerance, results[seed], data.metric, choice, sorted(ok)),
                             None if chosen is None or diverged(chosen) else chosen, seed_error(seed, errors, results))
        records.append(write_seed_record(out, dict(record, wall_time_s=round(walls[seed], 3)), data))
    if finished:
        finished.clear()
    return records


def check_gpu_driver(gpus: int, where: str) -> None:
    """Before any work of a GPU job: the NVIDIA driver against the installed torch build
    (:func:`clmdetour.runtime.driver.check_driver`; a driver too old for the build would leave the job on the CPU).

    Raises:
        clmdetour.runtime.driver.DriverError: one line naming both and the build to install.
    """
    if gpus > 0:
        from clmdetour.runtime.driver import check_driver

        warning = check_driver(where)
        if warning:
            log.warning(warning)
