"""One fine-tuning job's settings, typed once: what the rule ``finetune`` passes, as one object.

The rule's params are JSON strings (the task's fine-tuning keys, the evaluation settings, the seeds:
:func:`clmdetour.evaluation.grid.finetune_task_params`); :meth:`FinetuneJob.from_rule` reads them once in the
workflow script and :func:`clmdetour.finetune.run.run_task` takes the object as it is: no dict form, no field
cast or overwritten after construction. Tests and benchmarks build it with :meth:`FinetuneJob.from_params`
(the params as mappings) or field by field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clmdetour.config import ConfigError
from clmdetour.finetune.memory import DEFAULT_MEMORY_LIMIT_GIB
from clmdetour.settings import FinetuneSettings
from clmdetour.tasks.settings import TaskSettings

#: Where a job's settings come from, named when the evaluation settings are refused.
SETTINGS_WHERE = "evaluation (the fine-tune job's settings)"


@dataclass(frozen=True)
class FinetuneJob:
    """One model fine-tuned on one task, every seed, in one process.

    Attributes:
        model, task: the config keys (recorded in every record).
        model_dir: the Hugging Face model folder; task_dir: ``results/tasks/{task}``.
        task_settings: the task's fine-tuning keys (:class:`clmdetour.tasks.settings.TaskSettings`).
        settings: the ``evaluation`` keys that change fine-tuning (:class:`clmdetour.settings.FinetuneSettings`).
        outputs: ``{seed: path of its JSON record}``; seeds run in increasing order.
        gpus: GPUs of the job (0: CPU); threads: torch CPU threads (None: torch's default).
        model_max_length: a reference model's declared limit in tokens (None: none).
        scratch_dir: where each finished (seed, lr) run is kept until the records are written
            (:class:`clmdetour.finetune.finished.FinishedRuns`; the rule passes
            ``{checkpoint_root}/finetune/{model}/{task}``); None keeps nothing.
        memory_limit_gib: GiB per device a step is planned under (``pretraining.memory_limit_gib``: the
            micro-batch of :func:`clmdetour.finetune.memory.plan_finetune_micro_batch`; it splits a batch, never
            changes it).

    Raises:
        TypeError: ``task_settings`` or ``settings`` is not the typed object (a dict goes through
            :meth:`from_params`).
        ConfigError: no output, a seed that is not an integer, ``gpus`` below 0, or a limit that is not positive.
    """

    model: str
    task: str
    model_dir: Path
    task_dir: Path
    task_settings: TaskSettings
    settings: FinetuneSettings
    outputs: Mapping[int, Path]
    gpus: int = 0
    threads: int | None = None
    model_max_length: int | None = None
    scratch_dir: Path | None = None
    memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB

    def __post_init__(self):
        if not isinstance(self.task_settings, TaskSettings):
            raise TypeError(f"task_settings: a TaskSettings, not {type(self.task_settings).__name__} "
                            "(build the job with FinetuneJob.from_params)")
        if not isinstance(self.settings, FinetuneSettings):
            raise TypeError(f"settings: a FinetuneSettings, not {type(self.settings).__name__} "
                            "(build the job with FinetuneJob.from_params)")
        if not self.outputs:
            raise ConfigError(f"fine-tuning {self.model} on {self.task}: no seed to run (no output)")
        bad = [s for s in self.outputs if isinstance(s, bool) or not isinstance(s, int)]
        if bad:
            raise ConfigError(f"fine-tuning {self.model} on {self.task}: seed(s) {bad} are not integers")
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 0:
            raise ConfigError(f"fine-tuning {self.model} on {self.task}: gpus {self.gpus!r} is not a count >= 0")
        if not self.memory_limit_gib > 0:
            raise ConfigError(f"pretraining.memory_limit_gib: {self.memory_limit_gib!r} is not a positive GiB count")
        for name in ("model_dir", "task_dir"):
            object.__setattr__(self, name, Path(getattr(self, name)))
        object.__setattr__(self, "outputs", {s: Path(p) for s, p in sorted(self.outputs.items())})
        if self.scratch_dir is not None:
            object.__setattr__(self, "scratch_dir", Path(self.scratch_dir))

    @property
    def seeds(self) -> list[int]:
        """The job's seeds, in increasing order."""
        return list(self.outputs)

    @classmethod
    def from_params(cls, *, task_config: Mapping[str, Any], settings: Mapping[str, Any], **fields) -> FinetuneJob:
        """The job from the rule's params as mappings: ``task_config`` (the task's fine-tuning keys: ``type``,
        ``metric``, ``max_length``, ``seeds``, ``finetune``) and ``settings`` (the ``evaluation`` keys of
        :data:`clmdetour.settings.FINETUNE_KEYS`); ``fields``: the other attributes.

        Raises:
            ConfigError: a key of either missing or unknown, a ``max_length`` that is not a positive integer, a
                ``finetune`` value of the wrong kind, or a learning-rate grid that is empty or not strictly
                increasing (naming the key).
        """
        task = fields["task"]
        return cls(task_settings=TaskSettings.from_dict(task_config, f"tasks.{task}"),
                   settings=FinetuneSettings.from_dict(settings, SETTINGS_WHERE), **fields)

    @classmethod
    def from_rule(cls, smk) -> FinetuneJob:
        """The job of a running ``finetune`` rule (Snakemake's ``snakemake`` object): its wildcards ``model``
        and ``task``, inputs ``model`` and ``task``, params ``task``, ``settings``, ``seeds`` (JSON) and
        ``model_max_length`` (0: none), one output per seed, ``resources.gpu``, ``threads``, and the config's
        ``pretraining.checkpoint_root`` (scratch) and ``pretraining.memory_limit_gib``.

        Raises:
            ConfigError: as :meth:`from_params`, or seeds that do not match the outputs one for one.
        """
        model, task = smk.wildcards.model, smk.wildcards.task
        seeds = json.loads(smk.params.seeds)
        if len(seeds) != len(smk.output):
            raise ConfigError(f"rule finetune {model}/{task}: {len(seeds)} seeds for {len(smk.output)} outputs")
        pretraining = smk.config["pretraining"]
        return cls.from_params(
            task_config=json.loads(smk.params.task), settings=json.loads(smk.params.settings),
            model=model, task=task, model_dir=smk.input.model, task_dir=smk.input.task,
            outputs=dict(zip(seeds, smk.output)), gpus=int(smk.resources.gpu), threads=smk.threads,
            model_max_length=int(smk.params.model_max_length) or None,
            # each finished (seed, lr) run is kept here until the records are written: a killed rerun trains the rest
            scratch_dir=Path(pretraining["checkpoint_root"]) / "finetune" / model / task,
            # the cap pretraining plans under; read here, not a param: it splits a batch, never changes results
            memory_limit_gib=float(pretraining["memory_limit_gib"]))
