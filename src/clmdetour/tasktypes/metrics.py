"""Task metrics: seqeval strict IOB2 for NER, macro F1 for classification.

- NER: entity-level precision / recall / F1 from ``seqeval`` in strict mode
  with the IOB2 scheme passed explicitly (``mode="strict", scheme=IOB2``): an
  entity counts only if its type and both boundaries match and its tags form
  a well-formed IOB2 chunk (an ``I-X`` after ``O`` starts no entity, unlike
  the lenient conlleval default). Micro F1 (pooled over entities) and macro F1
  (mean over entity types) are both recorded.
- Multiclass: macro F1 over classes (``sklearn.metrics.f1_score``).
- Multilabel: macro F1 over labels at one probability threshold chosen on
  dev (grid search) and reused on test. A label absent from both the gold
  and the predictions of a split has an undefined F1 and is left out of the
  average (``zero_division=np.nan``), rather than counted as 0 or 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def ner_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict[str, float]:
    """Entity-level scores, seqeval strict mode, IOB2.

    Args:
        gold: per document, the gold IOB2 tag of each word.
        pred: per document, the predicted tag of each word (same lengths).

    Returns:
        ``{"f1_micro", "precision_micro", "recall_micro", "f1_macro"}`` as fractions in [0, 1].

    Raises:
        ValueError: a document's gold and predicted lengths differ.
    """
    from seqeval.metrics.v1 import precision_recall_fscore_support
    from seqeval.scheme import IOB2

    for i, (g, p) in enumerate(zip(gold, pred, strict=True)):
        if len(g) != len(p):
            raise ValueError(f"document {i}: {len(g)} gold tags but {len(p)} predicted tags")
    gold, pred = [list(g) for g in gold], [list(p) for p in pred]
    # seqeval's strict-mode f1_score / precision_score / recall_score each call this function (v1) and keep
    # one of its values: one call per average gives the same numbers with the entities parsed twice, not 4 times.
    kw = {"scheme": IOB2, "zero_division": 0, "beta": 1.0}
    precision, recall, f1_micro, _ = precision_recall_fscore_support(gold, pred, average="micro", **kw)
    f1_macro = precision_recall_fscore_support(gold, pred, average="macro", **kw)[2]
    return {"f1_micro": float(f1_micro), "precision_micro": float(precision), "recall_micro": float(recall),
            "f1_macro": float(f1_macro)}


def multiclass_scores(gold: Sequence[int], pred: Sequence[int]) -> dict[str, float]:
    """Macro and micro F1 and accuracy of single-label predictions (class ids).

    Returns:
        ``{"f1_macro", "f1_micro", "accuracy"}``; macro F1 averages over the
        classes present in gold or predictions.
    """
    from sklearn.metrics import accuracy_score, f1_score

    return {
        "f1_macro": float(f1_score(gold, pred, average="macro", zero_division=0)),
        "f1_micro": float(f1_score(gold, pred, average="micro", zero_division=0)),
        "accuracy": float(accuracy_score(gold, pred)),
    }


def multilabel_scores(gold: np.ndarray, probs: np.ndarray, threshold: float) -> dict[str, float]:
    """Macro and micro F1 of multilabel predictions ``probs >= threshold``.

    Args:
        gold: ``[N, C]`` 0/1 targets.
        probs: ``[N, C]`` sigmoid probabilities.
        threshold: decision threshold in (0, 1).

    Returns:
        ``{"f1_macro", "f1_micro", "threshold"}``; a label with no gold and no
        predicted positive is left out of the macro average (0.0 if none is left).
    """
    from sklearn.metrics import f1_score

    gold = np.asarray(gold, dtype=np.int64)
    pred = (np.asarray(probs) >= threshold).astype(np.int64)
    per_label = f1_score(gold, pred, average=None, zero_division=np.nan)
    per_label = np.atleast_1d(per_label)
    defined = per_label[~np.isnan(per_label)]
    macro = float(defined.mean()) if defined.size else 0.0
    micro = float(f1_score(gold, pred, average="micro", zero_division=0))
    return {"f1_macro": macro, "f1_micro": micro, "threshold": float(threshold)}


def f1_over_thresholds(gold: np.ndarray, probs: np.ndarray, thresholds: Sequence[float]) -> dict[str, np.ndarray]:
    """Macro and micro F1 of ``probs >= t`` for every threshold ``t`` at once.

    The same definitions as :func:`multilabel_scores` (per-label F1 =
    2 TP / (2 TP + FP + FN); a label with no gold and no predicted positive is
    left out of the macro mean; micro F1 pools the counts over labels), counted
    for all thresholds in one vectorised pass instead of one
    ``sklearn.metrics.f1_score`` call per threshold: the dev-threshold search
    runs after every epoch, and its per-call input checks dominated it.

    Args:
        gold: ``[N, C]`` 0/1 targets.
        probs: ``[N, C]`` probabilities.
        thresholds: ``T`` candidate thresholds.

    Returns:
        ``{"f1_macro": float64[T], "f1_micro": float64[T]}``.

    Raises:
        ValueError: ``gold`` and ``probs`` differ in shape or are not 2-D.
    """
    gold = np.asarray(gold).astype(bool)
    probs = np.asarray(probs, dtype=np.float64)
    if gold.shape != probs.shape or gold.ndim != 2:
        raise ValueError(f"gold {gold.shape} and probs {probs.shape} must both be [N, C]")
    t = np.asarray(list(thresholds), dtype=np.float64)
    pred = probs[None, :, :] >= t[:, None, None]                       # [T, N, C]
    tp = (pred & gold[None]).sum(axis=1)                               # [T, C]
    fp = pred.sum(axis=1) - tp
    fn = gold.sum(axis=0)[None, :] - tp
    denom = 2 * tp + fp + fn
    per_label = np.where(denom > 0, 2 * tp / np.maximum(denom, 1), np.nan)   # NaN: no gold, no prediction
    defined = ~np.isnan(per_label)
    macro = np.where(defined.any(axis=1), np.nansum(per_label, axis=1) / np.maximum(defined.sum(axis=1), 1), 0.0)
    tp_all, denom_all = tp.sum(axis=1), denom.sum(axis=1)
    micro = np.where(denom_all > 0, 2 * tp_all / np.maximum(denom_all, 1), 0.0)
    return {"f1_macro": macro, "f1_micro": micro}


def choose_threshold(gold: np.ndarray, probs: np.ndarray, metric: str = "f1_macro",
                     grid: Sequence[float] | None = None) -> tuple[float, float]:
    """The threshold maximising ``metric`` on dev (ties: the one nearest 0.5, then the lower).

    Scores every candidate with :func:`f1_over_thresholds`; the returned dev
    score is recomputed with :func:`multilabel_scores` (sklearn).

    Args:
        gold: ``[N, C]`` dev targets; probs: ``[N, C]`` dev probabilities.
        metric: ``f1_macro`` or ``f1_micro``.
        grid: candidate thresholds (default 0.05, 0.10, ..., 0.95).

    Returns:
        ``(threshold, dev score at that threshold)``.

    Raises:
        ValueError: unknown ``metric``, an empty grid, or shapes as in :func:`f1_over_thresholds`.
    """
    if metric not in ("f1_macro", "f1_micro"):
        raise ValueError(f"multilabel metric must be f1_macro or f1_micro, got {metric!r}")
    grid = sorted(grid if grid is not None else [round(0.05 * k, 2) for k in range(1, 20)], key=lambda t: (abs(t - 0.5), t))
    if not grid:
        raise ValueError("the multilabel threshold grid is empty")
    scores = f1_over_thresholds(gold, probs, grid)[metric]
    best = grid[int(np.argmax(scores))]   # argmax returns the first maximum: the preferred one among ties
    return best, multilabel_scores(gold, probs, best)[metric]
