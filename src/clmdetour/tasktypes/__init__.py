"""The task types, one module each, and the registry that maps the config's ``type`` string to one.

``tasks.{task}.type`` names an entry of :data:`TASK_TYPES`; :func:`get_task_type`
returns it. Adding a task type is one module here (a :class:`TaskType`
subclass) and one line in :data:`TASK_TYPES` (docs/extending.md, "Adding a
task type"); the config schema's enum is checked against this registry by the
test suite.
"""

from __future__ import annotations

from clmdetour.errors import InputError

from .base import METRICS, Encoded, Predictions, TaskType, TokenizerAdditions, Trivial
from .multiclass import Multiclass
from .multilabel import Multilabel
from .multiple_choice import MultipleChoice
from .ner import NER
from .similarity import Similarity

TASK_TYPES: dict[str, TaskType] = {t.name: t for t in (NER(), Multiclass(), Multilabel(), Similarity(), MultipleChoice())}


def get_task_type(name: str, where: str = "type") -> TaskType:
    """The registered task type of a ``type`` string.

    Raises:
        InputError: an unknown name (a ``ValueError``; the message starts with ``where``).
    """
    try:
        return TASK_TYPES[name]
    except (KeyError, TypeError):
        raise InputError(f"{where}: {name!r} is not one of {tuple(TASK_TYPES)}") from None


__all__ = ["METRICS", "TASK_TYPES", "Encoded", "Predictions", "TaskType", "TokenizerAdditions", "Trivial", "get_task_type"]
