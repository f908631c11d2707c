"""The finished (seed, learning rate) runs of a fine-tuning job, kept in scratch until its records are written.

A job writes its records only at the end of its sweep; :class:`FinishedRuns` stores each run as it finishes,
keyed by what its result depends on (:func:`finished_runs_key`), so a killed job's rerun trains only the rest.
A stored run is reused only when :func:`stored_run_problem` finds nothing wrong with it and its saved
predictions give its scores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
from pathlib import Path

from clmdetour.io import atomic_write_json
from clmdetour.settings import FinetuneSettings
from clmdetour.tasks.contract import TaskData
from clmdetour.tasks.settings import TaskSettings
from clmdetour.tasktypes.rescoring import prediction_problems

log = logging.getLogger("clmdetour.finetune")


#: The fields of a stored (seed, lr) run that the job reads back: :func:`clmdetour.finetune.loop.train_one_seed`'s result and ``wall_s``.
RESULT_FIELDS = ("metrics", "dev_metric", "dev_metrics", "best_epoch", "dev_history", "attention", "train_loss",
                 "predictions", "wall_s")
#: Correlation metrics (similarity tasks) lie in [-1, 1] and are NaN when a side is constant; other scores in [0, 1].
_CORRELATIONS = ("spearman", "pearson")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _score_problem(name: str, value, where: str) -> str | None:
    """Why ``value`` is not a score of metric ``name`` (``where`` names the field), or None."""
    low = -1.0 if name in _CORRELATIONS else 0.0
    if not _number(value):
        return f"{where} is {value!r}, not a number"
    if math.isnan(value) and name in _CORRELATIONS:
        return None
    if not (math.isfinite(value) and low <= value <= 1.0):
        return f"{where} is {value!r}, not a finite score in [{low:g}, 1]"
    return None


def stored_run_problem(stored, binding: dict, metric: str) -> str | None:
    """Why a stored (seed, lr) run may not be reused, or None when it may (:class:`FinishedRuns`).

    It must be a JSON object whose binding (``task``, ``model``, ``seed``, ``lr``, ``run_key``,
    ``model_digest``) equals ``binding`` and which holds every field of :data:`RESULT_FIELDS` with its
    type: ``metrics`` and ``dev_metrics`` maps of scores holding ``metric``, ``dev_metric`` equal to
    ``dev_metrics[metric]``, ``dev_history`` a non-empty list of scores, ``best_epoch`` an epoch of it,
    ``attention`` a map, ``wall_s`` finite seconds >= 0 (scores: finite numbers in [0, 1]; correlations
    in [-1, 1] or NaN).
    """
    if not isinstance(stored, dict):
        return f"holds {type(stored).__name__}, not a JSON object"
    for key, want in binding.items():
        if key not in stored:
            return f"no {key!r} binding it to its run (expected {want!r})"
        if stored[key] != want or type(stored[key]) is bool:
            return f"{key} is {stored[key]!r}, this run's is {want!r}"
    missing = [k for k in RESULT_FIELDS if k not in stored]
    if missing:
        return f"missing field(s) {missing}"
    for field_name in ("metrics", "dev_metrics"):
        scores = stored[field_name]
        if not isinstance(scores, dict) or metric not in scores:
            return f"{field_name} is not a map holding {metric!r}"
        bad = next((p for p in (_score_problem(k, v, f"{field_name}.{k}") for k, v in scores.items()) if p), None)
        if bad:
            return bad
    history = stored["dev_history"]
    if not isinstance(history, list) or not history:
        return "dev_history is not a non-empty list"
    bad = next((p for p in (_score_problem(metric, v, "dev_history") for v in [stored["dev_metric"], *history]) if p), None)
    if bad:
        return bad
    if stored["dev_metric"] != stored["dev_metrics"][metric] and not math.isnan(stored["dev_metric"]):
        return f"dev_metric {stored['dev_metric']!r} is not dev_metrics.{metric} {stored['dev_metrics'][metric]!r}"
    epoch = stored["best_epoch"]
    if not (isinstance(epoch, int) and not isinstance(epoch, bool) and 1 <= epoch <= len(history)):
        return f"best_epoch {epoch!r} is not an epoch of dev_history (1..{len(history)})"
    if not isinstance(stored["attention"], dict):
        return "attention is not a map"
    wall = stored["wall_s"]
    if not (_number(wall) and math.isfinite(wall) and wall >= 0):
        return f"wall_s is {wall!r}, not seconds >= 0"
    return None


class FinishedRuns:
    """The finished (seed, learning rate) runs of one fine-tuning job, kept in scratch as they finish.

    A job runs every seed at every grid point and writes its records only at the end; a job killed
    before (``kill -9``, a lost node, a time limit) would lose every finished run. Each run's result is
    written here atomically (``seed{seed}-lr{lr}.json``) as soon as it finishes, in a folder keyed by
    what determines the result (the model's files, the prepared task, the task's fine-tuning keys and
    the job's settings), so a rerun of the same job reuses the finished runs and trains only the rest;
    each run seeds itself (``reproducibility.seed_all(seed)``), so the records come out the same.
    The folder is removed once the job has written its records.

    The scratch folder is not trusted: each file is bound to its run (``task``, ``model``, ``seed``,
    ``lr``, ``run_key``: the folder's hash, ``model_digest``: sha256 of the model folder's file hashes)
    and is reused only when :func:`stored_run_problem` finds nothing wrong; any other file (foreign,
    forged, empty, cut short) is moved aside to ``{name}.rejected`` with a warning naming it and why,
    and the run is trained again.

    Args:
        root: ``{checkpoint_root}/finetune/{model}/{task}`` (scratch; never a declared output).
        key: the hash of the inputs (:func:`finished_runs_key`).
        model, task: the job's config keys; model_digest: :func:`model_folder_digest` of its model folder.
        metric: the task's metric (the name the table reports), which every stored score map must hold.
    """

    def __init__(self, root: str | Path, key: str, *, model: str, task: str, model_digest: str, metric: str,
                 data: TaskData | None = None):
        self.folder = Path(root) / key
        self.binding = {"task": task, "model": model, "run_key": key, "model_digest": model_digest}
        self.metric = metric
        self.data = data  # with it, a stored run's predictions must give its scores and carry the task's gold

    @classmethod
    def for_job(cls, root: str | Path, *, model: str, task: str, model_dir: str | Path, task_dir: str | Path,
                task_settings: TaskSettings, settings: FinetuneSettings, model_max_length: int | None,
                metric: str, data: TaskData | None = None) -> FinishedRuns:
        """The job's store: the model folder's files are hashed once, for both the key and the digest."""
        files = model_folder_files(model_dir)
        key = finished_runs_key(model_dir, task_dir, task_settings, settings, model_max_length, model_files=files)
        return cls(root, key, model=model, task=task, model_digest=model_folder_digest(files), metric=metric,
                   data=data)

    def _path(self, seed: int, lr: float) -> Path:
        return self.folder / f"seed{seed}-lr{lr!r}.json"

    def _binding(self, seed: int, lr: float) -> dict:
        return dict(self.binding, seed=seed, lr=lr)

    def get(self, seed: int, lr: float) -> dict | None:
        """The stored result of ``(seed, lr)`` (the :data:`RESULT_FIELDS`), or None: never stored, or refused
        (:func:`stored_run_problem`; unreadable, not JSON), in which case it is moved aside and trained again."""
        path = self._path(seed, lr)
        if not path.is_file():
            return None
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            problem = f"unreadable ({type(e).__name__}: {str(e)[:200]})"
        else:
            problem = stored_run_problem(stored, self._binding(seed, lr), self.metric)
            if problem is None and self.data is not None:
                problem = self._predictions_problem(stored)
        if problem is None:
            return {k: stored[k] for k in RESULT_FIELDS}
        aside = path.with_name(path.name + ".rejected")
        try:
            os.replace(path, aside)
        except OSError as e:
            aside = f"not moved aside ({e.strerror or e})"
        log.warning("%s: stored fine-tuning run not reused: %s; moved to %s; the run is trained again", path, problem,
                    aside.name if isinstance(aside, Path) else aside)
        return None

    def _predictions_problem(self, stored: dict) -> str | None:
        """Why a stored run's scores are not what its saved predictions give (or their gold not the task's)."""
        if not isinstance(stored["predictions"], dict):
            return "predictions is not a map"
        _, problems = prediction_problems(self.data.task_type, self.data.labels, stored["predictions"],
                                          {"dev": stored["dev_metrics"], "test": stored["metrics"]}, self.data.splits)
        return f"its scores are not what its saved predictions give ({'; '.join(problems[:3])})" if problems else None

    def put(self, seed: int, lr: float, result: dict) -> None:
        """Store the result of ``(seed, lr)`` atomically, with its binding (``result`` is not modified).

        Raises:
            DiskSpaceError: the scratch disk filled up (names the file and the bytes free).
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self._path(seed, lr), dict(result, **self._binding(seed, lr)))

    def clear(self) -> None:
        """Remove the stored runs (the job's records are written) and the folder, unless it holds files set
        aside as ``*.rejected``: those stay for a look."""
        if not self.folder.is_dir():
            return
        for p in self.folder.iterdir():
            if p.name.endswith(".rejected"):
                continue
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.folder.rmdir()


def model_folder_files(model_dir: str | Path) -> dict[str, str]:
    """sha256 of each weight, config and tokenizer file of a model folder (``.safetensors``, ``.bin``,
    ``.json``), by file name."""
    from clmdetour.io import sha256_file

    return {p.name: sha256_file(p) for p in sorted(Path(model_dir).iterdir())
            if p.is_file() and p.suffix in (".safetensors", ".bin", ".json")}


def model_folder_digest(files: dict[str, str]) -> str:
    """sha256 (hex) of a model folder's :func:`model_folder_files`: what a stored run was trained from."""
    from clmdetour.io import sha256_json

    return sha256_json(files)


def finished_runs_key(model_dir: str | Path, task_dir: str | Path, task_settings: TaskSettings, settings: FinetuneSettings,
                      model_max_length: int | None, model_files: dict[str, str] | None = None) -> str:
    """sha256 (16 hex digits) of what a fine-tuning run's result depends on: the model folder's weight,
    config and tokenizer files (``model_files``: :func:`model_folder_files`, computed here when None),
    the prepared task's ``manifest.json`` and ``labels.json``, the task's fine-tuning keys (the rule's
    ``task`` params, :meth:`clmdetour.tasks.settings.TaskSettings.as_dict`) and the job's settings."""
    from clmdetour.io import sha256_file, sha256_json

    task_files = [p for p in (Path(task_dir) / "manifest.json", Path(task_dir) / "labels.json") if p.is_file()]
    return sha256_json({"model": model_folder_files(model_dir) if model_files is None else model_files,
                        "task": {p.name: sha256_file(p) for p in task_files}, "task_config": task_settings.as_dict(),
                        "settings": dataclasses.asdict(settings), "model_max_length": model_max_length})[:16]
