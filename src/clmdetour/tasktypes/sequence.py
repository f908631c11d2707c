"""What the sequence-level task types (one answer per document) share: encoding and the head."""

from __future__ import annotations

from abc import abstractmethod

from .base import Encoded, TaskType, single_sequence_budget
from .heads import sequence_classifier
from .records import MISSING, FormatError, get_field, text_of


class SequenceTaskType(TaskType):
    """A type with one target per document: the text is truncated to the token budget."""

    hub_task = "text-classification"
    problem_type: str  # transformers' problem_type of the sequence-classification head

    def read_record(self, rec, fields, where, row):
        label_field = fields.get("label_field") or "label"
        value = get_field(rec, label_field)
        if value is MISSING:
            raise FormatError(f"{where}: label field {label_field!r} (label_field) missing; fields: {sorted(rec)}")
        row["text"] = text_of(rec, fields, where)
        row["raw_label"] = value
        return self.parse_label(value, label_field, fields, where, row)

    @abstractmethod
    def parse_label(self, value, label_field: str, fields: dict, where: str, row: dict) -> dict:
        """``row`` with the type's label column(s) from the raw label value."""
        ...  # abstract: every registered type defines it

    @abstractmethod
    def target(self, row: dict, index: dict[str, int], n_labels: int):
        """The model's target for one row (``index``: label -> id)."""
        ...  # abstract: every registered type defines it

    def encode(self, rows, labels, tokenizer, max_length, settings, task) -> Encoded:
        """One example per row: ``prefix + body + suffix``, the body truncated to the budget
        (:func:`single_sequence_budget`); ``truncated`` counts the rows cut."""
        prefix, suffix, budget = single_sequence_budget(tokenizer, max_length)
        bodies = tokenizer([r["text"] for r in rows], add_special_tokens=False, verbose=False)["input_ids"]
        index = {l: i for i, l in enumerate(labels)}
        enc = Encoded(examples=[], gold=[])
        for row, body in zip(rows, bodies):
            enc.truncated += len(body) > budget
            target = self.target(row, index, len(labels))
            enc.examples.append({"input_ids": prefix + body[:budget] + suffix, "labels": target})
            enc.gold.append(target)
        return enc

    def load_model(self, model_dir, kw):
        """``AutoModelForSequenceClassification`` with the type's ``problem_type``; a ModernBERT
        encoder gets its pooled features standardised (:func:`clmdetour.tasktypes.heads.sequence_classifier`)."""
        return sequence_classifier(model_dir, dict(kw, problem_type=self.problem_type))
