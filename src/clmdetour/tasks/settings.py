"""A task's fine-tuning settings as one typed object: the fine-tune rule's ``task`` params, with the task type
resolved once (:class:`TaskSettings`).

The params are JSON (:func:`clmdetour.evaluation.grid.finetune_task_params` writes them with
:meth:`TaskSettings.as_dict`); every module after that holds the :class:`clmdetour.tasktypes.TaskType` itself
(``TaskSettings.type``), never its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clmdetour.config import ConfigError
from clmdetour.settings import TaskFinetuneSettings, check_keys
from clmdetour.tasktypes import TASK_TYPES, TaskType


@dataclass(frozen=True)
class TaskSettings:
    """A task's keys that change its fine-tuning (the fine-tune rule's ``task`` params), checked once.

    ``type`` the registered task type (:data:`clmdetour.tasktypes.TASK_TYPES`: the object, resolved from its name
    once, by :meth:`from_dict`); ``max_length`` in tokens per model input (special tokens included; the job lowers
    it to the model's own limit); ``metric`` resolved (never null: the type's default when the config gives none);
    ``finetune`` the task's ``finetune`` block with ``lr_grid`` resolved (:class:`clmdetour.settings.TaskFinetuneSettings`);
    ``seeds`` the seed count (None where a caller trains given seeds).

    Raises:
        ConfigError: ``type`` is not a registered :class:`clmdetour.tasktypes.TaskType`, ``metric`` is not one the
            type scores, or ``max_length`` is not a whole number >= 1.
    """

    type: TaskType
    metric: str
    max_length: int
    finetune: TaskFinetuneSettings
    seeds: int | None = None

    def __post_init__(self):
        if not isinstance(self.type, TaskType):
            raise ConfigError(f"type: {self.type!r} is not a task type object (TaskSettings.from_dict resolves a name)")
        if self.metric not in self.type.metrics:
            raise ConfigError(f"metric: {self.metric!r} is not a metric of a {self.type.name} task; one of "
                              f"{self.type.metrics}")
        if isinstance(self.max_length, bool) or not isinstance(self.max_length, int) or self.max_length < 1:
            raise ConfigError(f"max_length: {self.max_length!r} is not a whole number of tokens >= 1")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "task", lr_grid_key: str | None = None) -> TaskSettings:
        """The settings from the rule's params: ``type`` a registered name (resolved here, the one place), ``metric``
        a name or null (the type's ``default_metric``); ``lr_grid_key``: the config key that set
        ``finetune.lr_grid`` (default ``{where}.finetune.lr_grid``).

        Raises: ConfigError (a missing or unknown key, an unknown type, a metric the type does not score, a
        ``max_length`` that is not a positive integer, or a learning-rate grid that is empty or not strictly
        increasing; names ``where`` or the key)."""
        try:
            check_keys(cls, data, where)
            if data["type"] not in TASK_TYPES:
                raise ConfigError(f"{where}.type: {data['type']!r} is not one of {tuple(TASK_TYPES)}")
            ttype = TASK_TYPES[data["type"]]
            finetune = data["finetune"]
            if not isinstance(finetune, TaskFinetuneSettings):
                finetune = TaskFinetuneSettings.from_dict(finetune, f"{where}.finetune", lr_grid_key)
            return cls(**dict(data, type=ttype, metric=data["metric"] or ttype.default_metric, finetune=finetune))
        except ConfigError as e:
            raise ConfigError(str(e) if str(e).startswith(where) or lr_grid_key and str(e).startswith(lr_grid_key)
                              else f"{where}.{e}") from None

    def as_dict(self) -> dict:
        """The task params as plain JSON types, in the rule's key order (the type by name; ``seeds`` left out
        when None)."""
        out = {"type": self.type.name, "metric": self.metric, "max_length": self.max_length, "seeds": self.seeds,
               "finetune": self.finetune.as_dict()}
        if self.seeds is None:
            out.pop("seeds")
        return out
