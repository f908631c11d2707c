"""The evaluation grid (``evaluate.smk``): models, fine-tune jobs, their priority and the table's inputs."""

from __future__ import annotations

import functools
from pathlib import Path

# Snakemake's own error class (snakemake.exceptions re-exports it): input functions raise it so that
# Snakemake reports the message with the rule and wildcards, and nothing runs.
from snakemake_interface_common.exceptions import WorkflowError

from clmdetour.config import ConfigError
from clmdetour.pipeline.paths import (
    EVAL_TABLE_FILES,
    PRETRAIN_PRIORITY,
    RANDOM_INIT_DIR,
    fetched_model_dir,
    final_model_dir,
    seed_json,
    task_dir,
)


class EvaluationStage:
    """The evaluation grid (``evaluate.smk``): models, fine-tune jobs, their priority and the table's inputs.

    One part of :class:`clmdetour.pipeline.Pipeline`, whose constructor sets the attributes used here.
    """

    def reference_model_dir(self, model: str) -> str:
        """Folder of a reference model key: its local path, the random-init build, or the Hub copy.

        Raises:
            ConfigError: ``model`` is not a variant, the base model or a reference model.
        """
        refs = self.config.get("reference_models") or {}
        if model not in refs:
            raise ConfigError(f"model {model!r} is neither a variant ({self.variants}), the base model "
                              f"({self.base_key!r}) nor a reference model ({sorted(refs)})")
        spec = refs[model]
        if spec.get("path"):
            return spec["path"]
        if spec.get("build") == "random-init":
            return RANDOM_INIT_DIR
        return fetched_model_dir(model)

    def model_dir(self, model: str) -> str:
        """Folder of any evaluated model key (variant, base model or reference model)."""
        if model in self.variants:
            return final_model_dir(model)
        if model == self.base_key:
            return self.base_model_dir()
        return self.reference_model_dir(model)

    def empty_grid_error(self) -> str:
        """The planning error when ``evaluation.tasks`` or ``evaluation.models`` lists nothing ('' otherwise):
        ``all`` would build no evaluation table, plots or release, which no run is for; a pretraining-only
        run is the ``pretrain_all`` target of a config with a grid. (A grid emptied by user tasks whose files
        are missing is a warning: :meth:`empty_grid_warning`.)"""
        evaluation = self.config.get("evaluation") or {}
        key = next((f"evaluation.{k}" for k in ("tasks", "models") if evaluation.get(k) == []), None)
        if key is None:
            return ""
        return (f"the evaluation grid is empty ({key} lists nothing): `all` would build no evaluation table, plots "
                f"or release; list what to evaluate in {key}, or null for every configured one. For a "
                "pretraining-only run keep the grid and ask for the target pretrain_all (snakemake ... "
                "pretrain_all: the variants' pretraining and nothing of the grid)")

    def empty_grid_warning(self) -> str:
        """One line for planning when the evaluation grid has no task or no model ('' otherwise): ``all`` then
        pretrains and analyses but builds no evaluation table, plots or release."""
        if self.eval_tasks and self.eval_models:
            return ""
        key = "evaluation.tasks" if not self.eval_tasks else "evaluation.models"
        return (f"the evaluation grid is empty ({key} lists nothing, or every listed task is left out): `all` "
                "pretrains and analyses the variants but builds no evaluation table, plots or release; list "
                f"what to evaluate in {key}, or null for every configured one")

    @functools.cached_property
    def grid_runs(self) -> list[tuple[str, str, int]]:
        """Every (model, task, seed) of the grid, in table order (models x tasks x seeds), computed once:
        the seed records, the targets and the table's expected runs all derive from it."""
        from clmdetour.evaluation.grid import grid_runs

        return grid_runs(self.eval_models, self.eval_tasks, self.task_seeds)

    def model_eval_outputs(self, model: str) -> list[str]:
        """Every seed record of one model over the grid's tasks ([] outside ``evaluation.models``)."""
        return [seed_json(*run) for run in self.grid_runs if run[0] == model]

    def eval_grid_outputs(self) -> list[str]:
        """Every seed record of the grid (models x tasks x seeds)."""
        return [seed_json(*run) for run in self.grid_runs]

    def eval_table_runs(self) -> list[list]:
        """eval_table's expected runs: ``[model, task, seed, seed record]`` for every run of the grid."""
        return [[m, t, s, seed_json(m, t, s)] for m, t, s in self.grid_runs]

    def eval_table_outputs(self) -> list[str]:
        """The three table files; [] when the grid has no task."""
        return list(EVAL_TABLE_FILES.values()) if self.eval_tasks else []

    def model_input(self, wildcards) -> str:
        """A fine-tune job's model folder (:meth:`model_dir` of ``wildcards.model``).

        Raises:
            WorkflowError: the model key is unknown.
        """
        try:
            return self.model_dir(wildcards.model)
        except ConfigError as e:
            raise WorkflowError(str(e)) from None

    def finetune_task_input(self, wildcards) -> str:
        """A fine-tune job's prepared task folder.

        Raises:
            WorkflowError: the task is not configured (naming the configured ones).
        """
        from clmdetour.evaluation.grid import finetune_task_params

        try:
            finetune_task_params(self.config, wildcards.task)
        except ConfigError as e:
            raise WorkflowError(str(e)) from None
        return task_dir(wildcards.task)

    def finetune_work(self, task: str) -> float:
        """A fine-tune job's work estimate: epochs x learning-rate grid points x seeds x ``max_length``.

        Units: token positions per training example, summed over every run of the job (an upper
        bound: inputs may be shorter than ``max_length``); it orders jobs, nothing more.

        Raises:
            ConfigError: unknown task, or a missing key (:func:`clmdetour.evaluation.grid.finetune_task_params`).
        """
        from clmdetour.evaluation.grid import finetune_task_params

        params = finetune_task_params(self.config, task)
        ft = params["finetune"]
        return float(ft["epochs"]) * len(ft["lr_grid"]) * int(params["seeds"]) * int(params["max_length"])

    def finetune_priority(self, wildcards) -> float:
        """Scheduling priority of a fine-tune job (the rule's ``priority``): longest first.

        Jobs with more work (:meth:`finetune_work`) start first, so that the grid does not end on one
        long job with the other cores idle (longest-processing-time-first list scheduling, Graham
        1969); every fine-tune stays below the pretraining chain (``PRETRAIN_PRIORITY``): the job of
        most work in the evaluation grid gets ``PRETRAIN_PRIORITY - 1``, the others proportionally less.

        Returns:
            A float in ``[0, PRETRAIN_PRIORITY - 1]``; 0 for a task that is not configured (its
            input function names the error).
        """
        try:
            work = self.finetune_work(wildcards.task)
        except ConfigError:
            return 0.0
        most = max(self._grid_finetune_work, work)
        return (PRETRAIN_PRIORITY - 1) * work / most if most > 0 else 0.0

    @functools.cached_property
    def _grid_finetune_work(self) -> float:
        """The largest :meth:`finetune_work` in the evaluation grid (0 without tasks), computed once."""
        return max((self.finetune_work(t) for t in self.eval_tasks), default=0.0)

    def hub_spec(self, wildcards) -> dict:
        """fetch_model's params: Hub id and revision of a fetchable model (a Hub reference model, or
        the base model when it is not built or local).

        Raises:
            WorkflowError: the key names no Hub model of the config (listing the fetchable ones).
        """
        model = wildcards.model
        refs = self.config.get("reference_models") or {}
        base = self.config["base_model"]
        base_fetched = bool(base.get("hub_id")) and not self.builds_base and not base.get("path")
        if model in refs and refs[model].get("hub_id"):
            return {"hub_id": refs[model]["hub_id"], "revision": refs[model]["revision"]}
        if model == self.base_key and base_fetched:
            return {"hub_id": base["hub_id"], "revision": base["revision"]}
        fetchable = [k for k, v in refs.items() if v.get("hub_id")] + ([self.base_key] if base.get("hub_id") and not self.builds_base else [])
        raise WorkflowError(f"{fetched_model_dir(model)}: {model!r} is not a Hub model of the config; fetchable: {fetchable}")

    def _random_init_models(self) -> dict[str, dict]:
        """Reference models built untrained (``build: random-init``), key -> spec."""
        refs = self.config.get("reference_models") or {}
        return {k: v for k, v in refs.items() if v.get("build") == "random-init"}

    def random_init_seed(self) -> int:
        """Seed of the ``random-init`` reference model (0 when none sets one)."""
        return next((v.get("seed", 0) for v in self._random_init_models().values()), 0)

    def control_model(self) -> str | None:
        """The evaluated ``random-init`` reference model (the table's positive control), or None."""
        return next((k for k in self._random_init_models() if k in self.eval_models), None)

    def eval_task_dirs(self) -> dict[str, str]:
        """Grid task -> its prepared folder, in sorted task order."""
        return {t: task_dir(t) for t in sorted(self.eval_tasks)}

    def eval_table_records(self, wildcards) -> list[str]:
        """eval_table's seed records: every expected one; with ``evaluation.allow_missing`` those that
        exist, so that the table never waits for (or fails on) a missing run."""
        if self.config["evaluation"]["allow_missing"]:
            return [p for p in self.eval_grid_outputs() if Path(p).exists()]
        return self.eval_grid_outputs()

    def eval_table_task_dirs(self, wildcards) -> list[str]:
        """eval_table's task folders (trivial baseline, document groups); with allow_missing those that exist."""
        dirs = list(self.eval_task_dirs().values())
        return [d for d in dirs if Path(d).exists()] if self.config["evaluation"]["allow_missing"] else dirs

    def task_table_metrics(self, wildcards) -> dict[str, list[str]]:
        """Grid task -> the metrics its ``tasks.{task}.table_metrics`` adds to the results table (tasks without
        the key left out: an empty mapping leaves the tables as they were)."""
        return {t: list(self.config["tasks"][t]["table_metrics"]) for t in sorted(self.eval_tasks)
                if (self.config["tasks"][t].get("table_metrics") or [])}

    def task_metrics(self, wildcards) -> dict[str, str]:
        """Grid task -> its metric (``finetune.grid.finetune_task_params``)."""
        from clmdetour.evaluation.grid import finetune_task_params

        return {t: finetune_task_params(self.config, t)["metric"] for t in sorted(self.eval_tasks)}
