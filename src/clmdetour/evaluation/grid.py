"""The evaluation grid from the config: models x tasks x seeds, and each job's settings.

Used by ``workflow/rules/evaluate.smk`` (input functions, params) and by the
fine-tuning entry point, so the grid is defined in one place and testable
without Snakemake. Errors are :class:`clmdetour.config.ConfigError` with one
line naming the config key and the allowed values.
"""

from __future__ import annotations

import copy

from clmdetour.config import ConfigError
from clmdetour.settings import FINETUNE_KEYS
from clmdetour.tasks.settings import TaskSettings


def task_names(config: dict) -> list[str]:
    """Tasks of the grid: ``evaluation.tasks``, or every configured task in config order,
    less the user-provided tasks whose files are missing
    (:func:`clmdetour.tasks.spec.left_out_tasks`).

    Raises:
        ConfigError: a listed task is not configured (the message lists the tasks).
    """
    from clmdetour.tasks.spec import left_out_tasks

    tasks = list(config.get("tasks") or {})
    chosen = (config.get("evaluation") or {}).get("tasks")
    if chosen is not None:
        for t in chosen:
            if t not in tasks:
                raise ConfigError(f"evaluation.tasks: {t!r} is not a configured task; tasks: {tasks}")
        tasks = list(chosen)
    left_out = left_out_tasks(config)
    return [t for t in tasks if t not in left_out]


def task_section(config: dict, task: str) -> dict:
    """A deep copy of ``config["tasks"][task]`` (the fine-tune rule's only task params).

    Raises:
        ConfigError: ``task`` is not a configured task (the message lists the tasks).
    """
    tasks = config.get("tasks") or {}
    if task not in tasks:
        raise ConfigError(f"tasks.{task}: no such task in the config; configured tasks: {sorted(tasks)}")
    return copy.deepcopy(tasks[task])


def finetune_task_params(config: dict, task: str) -> dict:
    """The keys of a task's config entry that change its fine-tuning (the rule's task params).

    ``type``, ``metric`` (null resolved: ``f1_micro`` for ner, ``f1_macro``
    otherwise), ``max_length`` (tokens), ``seeds`` and ``finetune``, whose
    ``lr_grid`` is resolved: the task's own ``finetune.lr_grid``, else
    ``evaluation.lr_grid`` (:mod:`clmdetour.finetune.sweep`). Keys that
    shape the data (source, split, label set) reach the fine-tune through the
    prepared task folder instead, so they are not repeated here.

    Raises:
        ConfigError: unknown task, or a missing key.
    """
    spec = task_section(config, task)
    for key in ("type", "max_length", "seeds", "finetune"):
        if key not in spec:
            raise ConfigError(f"tasks.{task}.{key}: missing")
    finetune = dict(spec["finetune"])
    key = f"tasks.{task}.finetune.lr_grid"
    if finetune.get("lr_grid") is None:
        finetune["lr_grid"] = copy.deepcopy(config["evaluation"]["lr_grid"])
        key = "evaluation.lr_grid"
    # the grid's rule (clmdetour.settings.check_lr_grid: not empty, increasing) is checked by the typed block,
    # naming ``key``
    # the type is resolved by the typed settings (the one place), and with it a null metric (the type's default)
    return TaskSettings.from_dict({"type": spec["type"], "metric": spec.get("metric"), "max_length": spec["max_length"],
                                   "seeds": spec["seeds"], "finetune": finetune}, f"tasks.{task}",
                                  lr_grid_key=key).as_dict()


def task_seeds(config: dict, task: str) -> list[int]:
    """Fine-tuning seeds of a task: ``first_seed .. first_seed + seeds - 1``.

    Raises:
        ConfigError: unknown task, or a seed count below 1.
    """
    n = task_section(config, task).get("seeds")
    if not isinstance(n, int) or n < 1:
        raise ConfigError(f"tasks.{task}.seeds: expected a seed count >= 1, got {n!r}")
    first = config["evaluation"]["first_seed"]  # the schema fills it (default 0)
    return list(range(first, first + n))


def finetune_settings(config: dict) -> dict:
    """The ``evaluation`` keys that change fine-tuning results (:data:`clmdetour.settings.FINETUNE_KEYS`,
    the fields of :class:`clmdetour.settings.FinetuneSettings`); the others (table layout, which models
    enter the grid) do not reschedule fine-tunes."""
    ev = config.get("evaluation") or {}
    return {k: copy.deepcopy(ev[k]) for k in FINETUNE_KEYS if k in ev}


def candidate_models(config: dict) -> list[str]:
    """Every evaluable model key: variants, then the base model, then reference models."""
    variants = list(config["pretraining"]["variants"])
    base = config["base_model"]["key"]
    refs = list(config.get("reference_models") or {})
    return variants + [base] + refs


def eval_models(config: dict) -> list[str]:
    """Models entering the grid: ``evaluation.models``, or every candidate when null.

    Raises:
        ConfigError: a listed model is not a variant, the base model or a
            reference model; a reference key shadows a variant or the base
            model; or ``evaluation.baseline`` is not in the grid.
    """
    variants = set(config["pretraining"]["variants"])
    base = config["base_model"]["key"]
    for ref in config.get("reference_models") or {}:
        if ref in variants or ref == base:
            raise ConfigError(f"reference_models.{ref}: the key is already a variant or the base model; rename it")
    known = candidate_models(config)
    ev = config.get("evaluation") or {}
    models = ev.get("models")
    if models is None:
        models = known
    for i, m in enumerate(models):
        if m not in known:
            raise ConfigError(f"evaluation.models[{i}]: {m!r} is not a variant, the base model or a reference model; known: {known}")
    baseline = ev.get("baseline")  # its default lives in the schema (evaluation.baseline)
    if baseline is not None and baseline not in models:
        raise ConfigError(f"evaluation.baseline: {baseline!r} is not among the evaluated models {list(models)}")
    return list(models)


def reference_max_length(config: dict, model: str) -> int | None:
    """``reference_models.{model}.max_length`` (tokens) or None for other models."""
    spec = (config.get("reference_models") or {}).get(model) or {}
    return spec.get("max_length")


def grid_runs(models: list[str], tasks: list[str], seeds: dict[str, list[int]]) -> list[tuple[str, str, int]]:
    """Every (model, task, seed) of the grid, in table order: models x tasks x each task's seeds.

    The one definition of the grid's run list (:attr:`clmdetour.pipeline.Pipeline.grid_runs` calls it
    once per config; the targets, the seed records and the table's expected runs derive from it).

    Raises:
        KeyError: a task without a seed list in ``seeds``.
    """
    return [(m, t, s) for m in models for t in tasks for s in seeds[t]]
