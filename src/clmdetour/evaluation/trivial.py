"""The trivial baseline of a task: the best constant predictor, chosen on train, scored on test.

A constant predictor ignores its input and gives every document the same
answer. Its score is the floor a fine-tuned model must clear to have learned
anything from the text (a task "at its label prior" scores it). Per task type,
scored with the task's metric and the project's own metric functions
(:mod:`clmdetour.tasktypes.metrics`); each rule is its task type's ``trivial``
(:mod:`clmdetour.tasktypes`):

- ``multiclass``: one class for every document; the class with the best train
  score (ties: the more frequent class on train, then the name);
- ``multilabel``: the same label set for every document, the ``k`` most
  frequent train labels (document frequency, ties by name, the order the task
  preparation uses), ``k = 0 .. K`` with ``K`` the size of the label set;
  ``k`` with the best train score (ties: the smaller ``k``);
- ``ner``: no entities (all ``O``): strict seqeval entity F1 is 0 whatever
  the metric, since nothing is predicted.
"""

from __future__ import annotations

from pathlib import Path

from clmdetour.tasks.contract import load_task_data
from clmdetour.tasktypes import Trivial
from clmdetour.tasktypes.multiclass import best_constant_class
from clmdetour.tasktypes.multilabel import best_constant_label_set
from clmdetour.tasktypes.ner import no_entities

__all__ = ["Trivial", "best_constant_class", "best_constant_label_set", "no_entities", "trivial_baseline",
           "trivial_baselines"]


def trivial_baseline(task_dir: str | Path, task: str, metric: str | None = None) -> Trivial:
    """The best constant predictor of a prepared task (``results/tasks/{task}``).

    Args:
        task_dir: the task folder (``labels.json``, ``train/``, ``test/``).
        task: the task name (checked against ``labels.json``).
        metric: the metric the table reports (``tasks.{task}.metric``); None = ``labels.json``'s.

    Raises:
        clmdetour.tasks.contract.TaskDataError: a missing or inconsistent task folder (names the file).
        ValueError: an unknown metric.
    """
    data = load_task_data(task_dir, task)
    return data.task_type.trivial(data.splits["train"], data.splits["test"], data.labels, metric or data.metric)


def trivial_baselines(task_dir: str | Path, task: str, metrics: list[str]) -> list[tuple[str, str, float]]:
    """Every trivial baseline of a prepared task for every metric of ``metrics`` (the table's): the best
    constant predictor chosen on train for each metric (:meth:`clmdetour.tasktypes.TaskType.trivial`), then the
    type's own extra rules (:meth:`clmdetour.tasktypes.TaskType.extra_trivial`, e.g. multiple choice's
    "every option").

    Returns:
        ``[(metric, rule in words, test score)]``, fractions (NaN where undefined).

    Raises:
        clmdetour.tasks.contract.TaskDataError: a missing or inconsistent task folder (names the file).
        ValueError: a metric the type does not score.
    """
    data = load_task_data(task_dir, task)
    train, test, labels = data.splits["train"], data.splits["test"], data.labels
    out = []
    for metric in metrics:
        best = data.task_type.trivial(train, test, labels, metric)
        words = best.prediction if len(best.prediction) <= 70 else best.prediction[:67] + "..."
        out.append((metric, f"best constant on train: {words}", best.score))
    for rule, scores in data.task_type.extra_trivial(train, test, labels):
        out += [(metric, rule, scores[metric]) for metric in metrics if metric in scores]
    return out
