"""``multilabel``: a set of labels per document (BCE head, threshold chosen on dev, macro F1 over labels)."""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

import numpy as np

from .base import Predictions, Trivial
from .markers import EntityMarkers
from .metrics import choose_threshold, multilabel_scores
from .records import as_label_list
from .sequence import SequenceTaskType


class Multilabel(EntityMarkers, SequenceTaskType):
    name = "multilabel"
    trivial_rule = "the k most frequent train labels for every document, k best on train"
    profile_name = "share of texts per number of labels"
    default_metric = "f1_macro"
    description = "document classification (several labels)"
    averaging = ("macro F1 averages the per-label F1 at one threshold chosen on dev; a label absent from both "
                 "the gold and the predictions of a split is left out of the average")
    other_averaging: ClassVar[dict[str, str]] = {
        "f1_micro": ("micro F1 pools the true positives, false positives and false "
                     "negatives of every label at one threshold chosen on dev"),
    }
    formats = ("fracco", "jsonl", "tsv", "csv", "hub", "bigbio_text")
    unseen_default = "drop"
    problem_type = "multi_label_classification"
    unlabelled_key = "rows_without_seen_labels"
    label_separator = True
    class_labels = True

    def profile_key(self, row):
        """How many labels the row carries."""
        return len(set(row["labels"]))

    def label_columns(self):
        import datasets

        return {"labels": datasets.Sequence(datasets.Value("string"))}

    def parse_label(self, value, label_field, fields, where, row):
        sep = fields.get("label_separator") or "|"
        row["labels"] = as_label_list(value, sep, where)
        parts = value if isinstance(value, list) else value.split(sep) if isinstance(value, str) else []
        row["label_forms"] = [repr(v) for v in parts if str(v).strip()]  # parallel to labels (merged_label_forms)
        return row

    def row_values(self, row, where):
        return list(row["labels"])

    def remove_labels(self, row, drop):
        return {**row, "labels": [x for x in row["labels"] if x not in drop]}

    def target(self, row, index, n_labels):
        target = [0] * n_labels
        for l in row["labels"]:
            target[index[l]] = 1
        return target

    def collate_labels(self, examples, length):
        import torch

        return torch.tensor([e["labels"] for e in examples], dtype=torch.float32)

    def predictions(self, labels, metric, enc, outputs, fitted=None, settings=None):
        """Per document its labels and those whose probability reaches the threshold, with the sigmoid
        probabilities (6 decimals). Without ``fitted`` (dev), the threshold is chosen on this split for ``metric``
        over ``settings.threshold_grid`` (:func:`clmdetour.tasktypes.metrics.choose_threshold`); test passes dev's."""
        probs = 1.0 / (1.0 + np.exp(-np.stack(outputs)))
        gold = np.asarray(enc.gold)
        threshold = (fitted or {}).get("threshold")
        if threshold is None:
            threshold, _ = choose_threshold(gold, probs, metric, getattr(settings, "threshold_grid", None))
        rows = [{"gold": sorted(x for x, g in zip(labels, gold[i]) if g),
                 "predicted": sorted(x for x, p in zip(labels, probs[i]) if p >= threshold),
                 "scores": [round(float(p), 6) for p in probs[i]]} for i in range(len(gold))]
        return Predictions(rows, {"threshold": float(threshold)})

    def rescore(self, labels, rows, fitted):
        gold = _indicator([r["gold"] for r in rows], labels)
        pred = _indicator([r["predicted"] for r in rows], labels).astype(np.float64)
        return dict(multilabel_scores(gold, pred, 0.5), threshold=float(fitted["threshold"]))

    def gold_of_row(self, row):
        return sorted(row["labels"])

    def fitted_on_dev(self, dev_metrics):
        """The decision threshold chosen on dev (``dev_metrics["threshold"]``)."""
        return {"threshold": dev_metrics.get("threshold")}

    def trivial(self, train, test, labels, metric):
        return best_constant_label_set([r["labels"] for r in train], [r["labels"] for r in test], labels, metric)


def _indicator(rows, labels) -> np.ndarray:
    index = {x: i for i, x in enumerate(labels)}
    out = np.zeros((len(rows), len(labels)), dtype=np.int64)
    for r, row in enumerate(rows):
        for x in row:
            out[r, index[x]] = 1
    return out


def best_constant_label_set(train, test, labels, metric: str) -> Trivial:
    """The ``k`` most frequent train labels (document frequency, ties by name) for every document,
    ``k = 0 .. K`` chosen on train (ties: the smaller ``k``), scored on ``test``.

    Args:
        train, test: gold label lists per document.
        labels: the task's label set (K labels).
        metric: ``f1_macro`` or ``f1_micro`` (:func:`clmdetour.tasktypes.metrics.multilabel_scores`).

    Raises:
        ValueError: an unknown metric, a gold label outside ``labels``, or an empty split.
    """
    Multilabel().check_metric(metric)
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
