"""``similarity``: a pair of texts -> a real-valued score (sentence similarity, as DrBenchmark's tasks).

The pair is encoded as the tokenizer's own pair template (``tokenizer(a, b)``:
``[CLS] a [SEP] b [SEP]`` for a BERT-style tokenizer), truncated longest-first
to the token budget; the head is a one-output regression head
(``AutoModelForSequenceClassification``, ``num_labels=1``,
``problem_type="regression"``: mean squared error on the float score).
Scores are Pearson's and Spearman's correlation of predictions with gold
(``scipy.stats``), Spearman the default metric; both lie in [-1, 1] and enter
the table's macro average and the sign test like any F1. The trivial baseline
predicts the train mean for every pair: a constant has no defined
correlation, so its cell is NaN.

Contract columns: ``id``, ``text`` (first text), ``text_pair`` (second text),
``score`` (float). ``labels.json``'s ``labels`` is empty; the model predicts
one value, named ``score``.
"""

from __future__ import annotations

import math

import numpy as np

from clmdetour.textio import nfc

from .base import Encoded, Predictions, TaskType, Trivial
from .heads import sequence_classifier
from .records import MISSING, FormatError, get_field, text_of


class Similarity(TaskType):
    name = "similarity"
    input_description = "text pair"
    truncated_unit = "text pairs"
    trivial_rule = "the train mean score for every pair (a constant: correlation undefined, an empty cell)"
    metrics = ("spearman", "pearson")
    default_metric = "spearman"
    hub_task = "sentence-similarity"
    description = "sentence-pair similarity (a real-valued score)"
    averaging = ("no F1: Spearman's (default) or Pearson's correlation of the predicted and gold scores over "
                 "the test pairs, in [-1, 1], averaged like any F1 in the macro average and the sign test")
    formats = ("jsonl", "tsv", "csv")

    def label_columns(self):
        import datasets

        return {"text_pair": datasets.Value("string"), "score": datasets.Value("float64")}

    def model_labels(self, spec, where):
        return ["score"]

    def row_values(self, row, where):
        value = row["score"]
        if value is None or not math.isfinite(float(value)):
            raise ValueError(f"{where}: row {row['id']!r} has score {value!r}, not a finite number")
        return []

    def row_labels(self, row):
        return []

    def example_texts(self, row):
        """Both texts of the pair: the same first text with another second text is another example."""
        return (row["text"], row["text_pair"])

    def label_key(self, row):
        """The gold score."""
        return (float(row["score"]),)

    def remove_labels(self, row, drop):
        return row

    def read_record(self, rec, fields, where, row):
        pair_field = fields.get("text_pair_field") or "text_pair"
        score_field = fields.get("label_field") or "label"
        pair, value = get_field(rec, pair_field), get_field(rec, score_field)
        for key, name, v in (("text_pair_field", pair_field, pair), ("label_field", score_field, value)):
            if v is MISSING:
                raise FormatError(f"{where}: field {name!r} ({key}) missing; fields: {sorted(rec)}")
        try:
            score = float(value)
        except (TypeError, ValueError):
            score = math.nan
        if not math.isfinite(score):
            raise FormatError(f"{where}: similarity score {score_field!r} must be a finite number, got {value!r}")
        if pair is None or str(pair).strip() == "":
            raise FormatError(f"{where}: second text {pair_field!r} (text_pair_field) is empty")
        row.update(text=text_of(rec, fields, where), text_pair=nfc(str(pair)), score=score, raw_label=value)
        return row

    def jsonl_description(self, spec):
        ids = f"{spec['id_field']!r}, " if spec.get("id_field") else ""
        return (f"JSON lines or one JSON array of objects, with fields {ids}{spec['text_field']!r}, "
                f"{spec.get('text_pair_field') or 'text_pair'!r} and a numeric {spec['label_field']!r}")

    def label_source(self, fields):
        return f"label_field {fields.get('label_field')!r} (the score)"

    def encode(self, rows, labels, tokenizer, max_length, settings, task) -> Encoded:
        """One example per pair, the tokenizer's pair template truncated longest-first to ``max_length``."""
        pair_specials = tokenizer.num_special_tokens_to_add(pair=True)
        if max_length <= pair_specials:
            raise ValueError(f"task {task}: max_length {max_length} leaves no room beside {pair_specials} special tokens")
        firsts, seconds = [r["text"] for r in rows], [r["text_pair"] for r in rows]
        full = tokenizer(firsts, seconds, add_special_tokens=False, verbose=False)["input_ids"]
        ids = tokenizer(firsts, seconds, truncation="longest_first", max_length=max_length, verbose=False)["input_ids"]
        enc = Encoded(examples=[], gold=[])
        for row, body, inputs in zip(rows, full, ids):
            enc.truncated += len(body) + pair_specials > max_length
            enc.examples.append({"input_ids": list(inputs), "labels": float(row["score"])})
            enc.gold.append(float(row["score"]))
        return enc

    def collate_labels(self, examples, length):
        import torch

        return torch.tensor([e["labels"] for e in examples], dtype=torch.float32)

    def load_model(self, model_dir, kw):
        return sequence_classifier(model_dir, dict(kw, num_labels=1, problem_type="regression"))

    def predictions(self, labels, metric, enc, outputs, fitted=None, settings=None):
        """Per pair its gold score and the regression head's output."""
        return Predictions([{"gold": float(g), "predicted": float(np.asarray(o).reshape(-1)[0])}
                            for g, o in zip(enc.gold, outputs)])

    def rescore(self, labels, rows, fitted):
        return correlation_scores([r["gold"] for r in rows], [r["predicted"] for r in rows])

    def gold_of_row(self, row):
        return float(row["score"])

    def trivial(self, train, test, labels, metric):
        self.check_metric(metric)
        mean = float(np.mean([r["score"] for r in train]))
        return Trivial(math.nan, math.nan, metric, f"the train mean {mean:.4g} (a constant: correlation undefined)")


def correlation_scores(gold, pred) -> dict[str, float]:
    """Pearson's and Spearman's correlation of ``pred`` with ``gold`` (``scipy.stats``).

    Args:
        gold, pred: per pair, the gold and the predicted score (same length, N >= 2).

    Returns:
        ``{"spearman", "pearson"}`` in [-1, 1]; NaN where either side is constant (undefined).

    Raises:
        ValueError: lengths differ or fewer than 2 pairs.
    """
    from scipy.stats import pearsonr, spearmanr

    gold, pred = np.asarray(gold, dtype=np.float64), np.asarray(pred, dtype=np.float64)
    if gold.shape != pred.shape or gold.size < 2:
        raise ValueError(f"correlation needs two equal-length score lists of >= 2 pairs, got {gold.size} and {pred.size}")
    if np.ptp(gold) == 0 or np.ptp(pred) == 0:
        return {"spearman": math.nan, "pearson": math.nan}
    return {"spearman": float(spearmanr(gold, pred).statistic), "pearson": float(pearsonr(gold, pred).statistic)}
