"""``multiclass``: one label per document (cross-entropy head, macro F1 over classes)."""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

import numpy as np

from clmdetour.textio import nfc

from .base import Predictions, Trivial
from .markers import EntityMarkers
from .metrics import multiclass_scores
from .records import FormatError
from .sequence import SequenceTaskType


class Multiclass(EntityMarkers, SequenceTaskType):
    name = "multiclass"
    trivial_rule = "one class for every document, the best on train"
    profile_name = "share of each class"
    min_labels = 2
    default_metric = "f1_macro"
    description = "document classification (one label)"
    averaging = ("macro F1 averages the per-class F1 over the classes present in gold or predictions "
                 "(sklearn f1_score, average='macro')")
    other_averaging: ClassVar[dict[str, str]] = {
        "f1_micro": ("micro F1 pools the decisions over every class (sklearn f1_score, "
                     "average='micro'; with one label per document it equals accuracy)"),
    }
    formats = ("jsonl", "tsv", "csv", "hub", "bigbio_text")
    problem_type = "single_label_classification"
    unlabelled_key = "rows_dropped_unseen"
    class_labels = True

    def profile_key(self, row):
        """The row's class."""
        return row["label"]

    def label_columns(self):
        import datasets

        return {"label": datasets.Value("string")}

    def parse_label(self, value, label_field, fields, where, row):
        if isinstance(value, (list, dict)) or value is None or str(value).strip() == "":
            raise FormatError(f"{where}: multiclass label {label_field!r} must be one value, got {value!r}")
        row["label"] = nfc(str(value)).strip()
        row["label_form"] = repr(value)  # 1 and "1", "a " and "a" merge: counted (tasks.labels.merged_label_forms)
        return row

    def row_values(self, row, where):
        return [row["label"]]

    def remove_labels(self, row, drop):
        return None if row["label"] in drop else row

    def target(self, row, index, n_labels):
        return index[row["label"]]

    def collate_labels(self, examples, length):
        import torch

        return torch.tensor([e["labels"] for e in examples], dtype=torch.long)

    def predictions(self, labels, metric, enc, outputs, fitted=None, settings=None):
        """Per document its class and the predicted one (argmax), with the softmax probabilities (6 decimals)."""
        rows = []
        for g, logits in zip(enc.gold, outputs):
            z = np.asarray(logits, dtype=np.float64)
            probs = np.exp(z - z.max())
            probs /= probs.sum()
            rows.append({"gold": labels[int(g)], "predicted": labels[int(z.argmax())],
                         "scores": [round(float(x), 6) for x in probs]})
        return Predictions(rows)

    def rescore(self, labels, rows, fitted):
        index = {x: i for i, x in enumerate(labels)}
        return multiclass_scores([index[r["gold"]] for r in rows], [index[r["predicted"]] for r in rows])

    def gold_of_row(self, row):
        return row["label"]

    def trivial(self, train, test, labels, metric):
        return best_constant_class([r["label"] for r in train], [r["label"] for r in test], labels, metric)


def best_constant_class(train, test, labels, metric: str) -> Trivial:
    """The single class whose constant prediction scores best on ``train`` (ties: the more frequent
    class on train, then the name), scored on ``test``.

    Args:
        train, test: gold class names per document.
        labels: the task's classes (candidates).
        metric: ``f1_macro`` or ``f1_micro`` (:func:`clmdetour.tasktypes.metrics.multiclass_scores`).

    Raises:
        ValueError: an unknown metric, empty ``labels`` or an empty split.
    """
    Multiclass().check_metric(metric)
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
