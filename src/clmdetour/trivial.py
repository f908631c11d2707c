"""The trivial baseline of a task: the best constant predictor, chosen on train, scored on test.

A constant predictor ignores its input and gives every document the same
answer. Its score is the floor a fine-tuned model must clear to have learned
anything from the text (a task "at its label prior" scores it). Per task type,
scored with the task's metric and the project's own metric functions
(:mod:`clmdetour.finetune.metrics`):

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

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Trivial:
    """A task's best constant predictor.

    Attributes:
        score: test score with the task's metric (fraction in [0, 1]).
        train_score: its train score (what chose it).
        metric: the metric name (``f1_macro`` / ``f1_micro``).
        prediction: what it predicts, in words (``class 'x'``, ``labels ['a', 'b']``, ``no entities``).
    """

    score: float
    train_score: float
    metric: str
    prediction: str


def _check_metric(metric: str) -> None:
    from clmdetour.finetune.run import METRICS

    if metric not in METRICS:
        raise ValueError(f"metric {metric!r} is not one of {METRICS}")


def best_constant_class(train: Sequence[str], test: Sequence[str], labels: Sequence[str], metric: str) -> Trivial:
    """Multiclass: the single class whose constant prediction scores best on ``train``.

    Args:
        train, test: gold class names per document.
        labels: the task's classes (candidates).
        metric: ``f1_macro`` or ``f1_micro`` (:func:`clmdetour.finetune.metrics.multiclass_scores`).

    Raises:
        ValueError: an unknown metric, empty ``labels`` or an empty split.
    """
    from clmdetour.finetune.metrics import multiclass_scores

    _check_metric(metric)
    if not labels or not train or not test:
        raise ValueError("multiclass trivial baseline needs labels and non-empty train and test splits")
    freq = Counter(train)
    best = None
    for c in sorted(labels, key=lambda x: (-freq[x], x)):
        s = multiclass_scores(list(train), [c] * len(train))[metric]
        if best is None or s > best[0]:
            best = (s, c)
    s_train, c = best
    return Trivial(multiclass_scores(list(test), [c] * len(test))[metric], s_train, metric, f"class {c!r}")


def _indicator(rows: Sequence[Sequence[str]], labels: Sequence[str]) -> np.ndarray:
    index = {x: i for i, x in enumerate(labels)}
    out = np.zeros((len(rows), len(labels)), dtype=np.int64)
    for r, row in enumerate(rows):
        for x in row:
            out[r, index[x]] = 1
    return out


def best_constant_label_set(train: Sequence[Sequence[str]], test: Sequence[Sequence[str]], labels: Sequence[str],
                            metric: str) -> Trivial:
    """Multilabel: the ``k`` most frequent train labels for every document, ``k`` chosen on train.

    Args:
        train, test: gold label lists per document.
        labels: the task's label set (K labels).
        metric: ``f1_macro`` or ``f1_micro`` (:func:`clmdetour.finetune.metrics.multilabel_scores`).

    Raises:
        ValueError: an unknown metric, a gold label outside ``labels``, or an empty split.
    """
    from clmdetour.finetune.metrics import multilabel_scores

    _check_metric(metric)
    if not train or not test:
        raise ValueError("multilabel trivial baseline needs non-empty train and test splits")
    labels = list(labels)
    for split, rows in (("train", train), ("test", test)):
        bad = sorted({x for row in rows for x in row} - set(labels))
        if bad:
            raise ValueError(f"{split}: labels {bad[:5]} are not in the label set")
    df = Counter(x for row in train for x in set(row))
    ranked = sorted(labels, key=lambda x: (-df[x], x))
    gold_train, gold_test = _indicator(train, labels), _indicator(test, labels)

    def score(gold: np.ndarray, k: int) -> float:
        pred = np.zeros(gold.shape, dtype=np.float64)
        pred[:, [labels.index(x) for x in ranked[:k]]] = 1.0
        return multilabel_scores(gold, pred, 0.5)[metric]

    best = None
    for k in range(len(labels) + 1):
        s = score(gold_train, k)
        if best is None or s > best[0]:
            best = (s, k)
    s_train, k = best
    return Trivial(score(gold_test, k), s_train, metric, f"labels {ranked[:k]}")


def no_entities(train_tags: Sequence[Sequence[str]], test_tags: Sequence[Sequence[str]], metric: str) -> Trivial:
    """NER: predict ``O`` for every word; strict seqeval entity scores (:func:`clmdetour.finetune.metrics.ner_scores`).

    Raises:
        ValueError: an unknown metric.
    """
    from clmdetour.finetune.metrics import ner_scores

    _check_metric(metric)

    def score(tags):
        return ner_scores(tags, [["O"] * len(t) for t in tags])[metric]

    return Trivial(score(test_tags), score(train_tags), metric, "no entities")


def trivial_baseline(task_dir: str | Path, task: str, metric: str | None = None) -> Trivial:
    """The best constant predictor of a prepared task (``results/tasks/{task}``).

    Args:
        task_dir: the task folder (``labels.json``, ``train/``, ``test/``).
        task: the task name (checked against ``labels.json``).
        metric: the metric the table reports (``tasks.{task}.metric``); None = ``labels.json``'s.

    Raises:
        clmdetour.finetune.run.TaskDataError: a missing or inconsistent task folder (names the file).
        ValueError: an unknown metric.
    """
    from clmdetour.finetune.run import load_task_data

    data = load_task_data(task_dir, task)
    metric = metric or data.metric
    train, test = data.splits["train"], data.splits["test"]
    if data.type == "multiclass":
        return best_constant_class([r["label"] for r in train], [r["label"] for r in test], data.labels, metric)
    if data.type == "multilabel":
        return best_constant_label_set([r["labels"] for r in train], [r["labels"] for r in test], data.labels, metric)
    return no_entities([r["tags"] for r in train], [r["tags"] for r in test], metric)
