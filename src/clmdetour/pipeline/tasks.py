"""Task data (``tasks.smk``): the datasets to fetch, and each ``prepare_task`` job's input and params."""

from __future__ import annotations

from pathlib import Path

# Snakemake's own error class (snakemake.exceptions re-exports it): input functions raise it so that
# Snakemake reports the message with the rule and wildcards, and nothing runs.
from snakemake_interface_common.exceptions import WorkflowError

from clmdetour.config import ConfigError
from clmdetour.pipeline.paths import DEMO_TASKS_ROOT, dataset_dir


class TaskStage:
    """Task data (``tasks.smk``): the datasets to fetch, and each ``prepare_task`` job's input and params.

    One part of :class:`clmdetour.pipeline.Pipeline`, whose constructor sets the attributes used here.
    """

    def _fetched_datasets(self, kind: str) -> dict[str, dict]:
        """Dataset name -> spec of the tasks fetched by ``kind`` (``url`` / ``hub``).

        Raises:
            ConfigError: two tasks share a dataset but not its url / sha256 (hub id / config / revision).
        """
        out: dict[str, dict] = {}
        keys = ("url", "sha256") if kind == "url" else ("hub_id", "hub_config", "revision")
        for name, spec in self.task_specs.items():
            if spec["source"] != kind or not spec["fetch"]:
                continue  # a hub task with a local path is read there: no fetch
            ds = spec["dataset"]
            if ds in out and any(out[ds][k] != spec[k] for k in keys):
                raise ConfigError(f"tasks.{name}: dataset {ds!r} is fetched by another task with a different {keys}")
            out[ds] = spec
        return out

    @staticmethod
    def task_target(task: str) -> str:
        """The named target preparing one task: ``prepare_task_{task}`` with ``-`` written ``_``."""
        return "prepare_task_" + task.replace("-", "_")

    def misspelt_task_targets(self) -> dict[str, str]:
        """``{target typed with -: the target's name}`` for every task whose name holds ``-``
        (``prepare_task_fracco-30`` -> ``prepare_task_fracco_30``)."""
        return {f"prepare_task_{t}": self.task_target(t) for t in self.task_specs if "-" in t}

    @staticmethod
    def did_you_mean(typed: str, target: str):
        """An input function that stops planning with one line naming the target to type (rule
        ``misspelt_target``: Snakemake's own error for an unknown target names no rule).

        Raises:
            clmdetour.config.ConfigError: always, when Snakemake asks for the rule's input.
        """
        from clmdetour.config import ConfigError

        def refuse(wildcards):
            raise ConfigError(f"no target {typed!r}: named targets write '-' as '_'; did you mean {target}?")

        return refuse

    def task_data_params(self, wildcards) -> dict:
        """prepare_task's only params: the part of a task's spec that shapes its data (editing
        ``finetune``, ``seeds``, ``max_length``, ``instructions`` or ``table_metrics`` never reruns it)."""
        training_keys = ("finetune", "seeds", "max_length", "instructions", "table_metrics")
        return {k: v for k, v in self.task_specs[wildcards.task].items() if k not in training_keys}

    def _demo_source_dir(self, path: str) -> str | None:
        from clmdetour.demo.tasks import DEMO_SOURCES

        parts, root = Path(path).parts, Path(DEMO_TASKS_ROOT).parts
        if self.builds_base and parts[: len(root)] == root and len(parts) > len(root) and parts[len(root)] in DEMO_SOURCES:
            return str(Path(*parts[: len(root) + 1]))
        return None

    def task_source_input(self, wildcards) -> dict:
        """prepare_task's input: the fetched folder, the demo source folder, or the task's local files.

        Raises:
            WorkflowError: an unknown task, or missing source files (for a ``user`` task, naming the
                task, the files and their format), so that only the targets needing it fail, before any job.
        """
        from clmdetour.tasks.spec import (
            expected_files,
            files_hint,
            format_description,
            missing_files,
            user_task_message,
        )

        task = wildcards.task
        if task not in self.task_specs:
            raise WorkflowError(f"task {task!r} is not in config tasks; tasks: {sorted(self.task_specs)}")
        spec = self.task_specs[task]
        if spec["source"] in ("url", "hub") and spec["fetch"]:
            return {"source": dataset_dir(spec["dataset"])}
        demo_dir = self._demo_source_dir(spec["path"])
        if demo_dir:
            return {"source": demo_dir}
        missing = missing_files(spec)
        if missing:
            if spec["source"] == "user":
                raise WorkflowError(user_task_message(task, spec, missing))
            raise WorkflowError(f"task {task!r}: source files missing: {missing}; expected: {format_description(spec)}; "
                                f"{files_hint(task, spec)}")
        return {"source": expected_files(spec)}
