"""The shape of a task type: everything that differs between NER, classification, similarity and
multiple-choice tasks.

A task type is one :class:`TaskType` subclass in its own module of this
package, registered in :data:`clmdetour.tasktypes.TASK_TYPES` under the
config's ``tasks.{task}.type`` string. Every other module (task preparation,
the trainer, the trivial baseline, the table, the card) asks the registry for
what it needs and never compares a task type's name. The type owns its model
contract: the head it builds, the batch keys of its targets, how the model's
outputs become per-example predictions, and how they are scored.

What a type defines, by stage:

- the task contract (``results/tasks/{task}``): :meth:`TaskType.features`
  (the columns of each split's rows), :meth:`TaskType.labels_record` /
  :meth:`TaskType.model_labels` (``labels.json`` and the label set the model
  predicts), :meth:`TaskType.row_values` (the labels a row carries, checked
  against ``labels.json``);
- preparation: :meth:`TaskType.row_labels` (the label counts and label-set
  policy), :meth:`TaskType.remove_labels`, ``unseen_default``,
  :meth:`TaskType.example_texts` and :meth:`TaskType.label_key` (repeated
  records under one id), :meth:`TaskType.compared_texts` and
  :meth:`TaskType.compared_label_key` (the split-overlap check, identical records
  under different ids and conflicting labels, which compare what the model sees,
  worded by ``input_description``, in an order-free form: by default
  ``example_texts`` and ``label_key``),
  ``profile_name`` / :meth:`TaskType.profile_key` and
  :meth:`TaskType.record_problems` (the traps reported, :mod:`clmdetour.tasks.traps`);
- fine-tuning (the model contract): :meth:`TaskType.prepare_tokenizer`
  (special tokens a task's inputs need, e.g. entity markers, added to the
  job's tokenizer before encoding), :meth:`TaskType.encode` (rows -> model
  examples and gold), :meth:`TaskType.split_counts` and
  :meth:`TaskType.check_encoded` (what the job records and warns about a
  split), :meth:`TaskType.collate_targets` (the batch's target keys),
  :meth:`TaskType.load_model` (the head), :meth:`TaskType.init_head` (what
  the head or the embeddings need after loading, e.g. the new markers' rows),
  :meth:`TaskType.example_outputs`
  (a batch's outputs -> one array per example), :meth:`TaskType.predictions`
  (one split's per-document gold and prediction, the saved predictions' rows),
  :meth:`TaskType.rescore` (every metric from those rows alone), :meth:`TaskType.gold_of_row`
  (a task row's gold in the rows' form), :meth:`TaskType.score` (``rescore`` of ``predictions``)
  and :meth:`TaskType.fitted_on_dev` (what test scoring reuses from dev, e.g. a decision threshold);
- results: :meth:`TaskType.trivial` (the best constant predictor) and
  ``trivial_rule`` (its rule in words, for the table notes), ``hub_task``, ``description`` and ``averaging`` (the card's and the
  table notes' wording, including the F1 averaging convention).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

METRICS = ("f1_micro", "f1_macro")


@dataclass
class Predictions:
    """One split's predictions, one row per document in split order (docs/tasks.md, "Saved predictions").

    Attributes:
        rows: per document ``{"gold": ..., "predicted": ...}`` (plus ``"scores"`` where the type keeps its
            per-label probabilities), labels by name: NER the word tags, multiclass a class, multilabel and
            multiple choice sorted lists, similarity numbers.
        fitted: what the scoring fixed on dev and reused on test (multilabel: ``{"threshold": t}``), else {}.
    """

    rows: list[dict]
    fitted: dict = field(default_factory=dict)


@dataclass
class Encoded:
    """One split, tokenised: model examples plus what is needed to score documents.

    A type that needs more to score (NER's windows, multiple choice's option groups) subclasses it.
    """

    examples: list[dict]  # {"input_ids": list[int], <target_key>: ...}
    gold: list  # per document, in the type's own form (tags, class id, 0/1 list, score)
    truncated: int = 0  # documents (classification) or words (ner) cut by the token limit


def special_tokens(tokenizer) -> tuple[list[int], list[int]]:
    """The special token ids a tokenizer puts before and after a single sequence.

    Read from the tokenizer's own template (``[CLS] x [SEP]``, ``<s> x </s>``, ...)
    by encoding a probe text with and without special tokens.

    Raises:
        ValueError: the probe text is not found inside the template.
    """
    probe = "a"
    bare = tokenizer(probe, add_special_tokens=False)["input_ids"]
    full = tokenizer(probe, add_special_tokens=True)["input_ids"]
    for i in range(len(full) - len(bare) + 1):
        if full[i:i + len(bare)] == bare:
            return full[:i], full[i + len(bare):]
    raise ValueError("cannot locate the text inside the tokenizer's special-token template")


def single_sequence_budget(tokenizer, max_length: int) -> tuple[list[int], list[int], int]:
    """``(prefix, suffix, budget)`` of one-sequence inputs of at most ``max_length`` tokens (specials
    included): the template's special ids (:func:`special_tokens`) and the body tokens left between them.

    Raises:
        InputError: ``max_length`` leaves no body token.
    """
    from clmdetour.errors import InputError

    prefix, suffix = special_tokens(tokenizer)
    budget = max_length - len(prefix) - len(suffix)
    if budget < 1:
        raise InputError(f"max_length {max_length} leaves no room beside {len(prefix) + len(suffix)} special tokens")
    return prefix, suffix, budget


@dataclass(frozen=True)
class TokenizerAdditions:
    """What a type added to a fine-tuning job's tokenizer (:meth:`TaskType.prepare_tokenizer`).

    Attributes:
        tokens: each added string -> the one id it encodes to, in the order given (none: nothing added).
        new_ids: the ids new to the vocabulary, whose input-embedding rows :meth:`TaskType.init_head` sets.
        record_key: the key of the job record's ``data`` section that lists ``tokens`` (when there are any).
    """

    tokens: dict[str, int] = field(default_factory=dict)
    new_ids: tuple[int, ...] = ()
    record_key: str = "added_tokens"


@dataclass(frozen=True)
class Trivial:
    """A task's best constant predictor.

    Attributes:
        score: test score with the task's metric (fraction in [0, 1]; NaN where undefined).
        train_score: its train score (what chose it).
        metric: the metric name (``f1_macro`` / ``f1_micro`` / ...).
        prediction: what it predicts, in words (``class 'x'``, ``labels ['a', 'b']``, ``no entities``).
    """

    score: float
    train_score: float
    metric: str
    prediction: str


class TaskType(ABC):
    """Base class of a task type (see the module docstring for what each member serves)."""

    name: ClassVar[str]
    metrics: ClassVar[tuple[str, ...]] = METRICS  # metric names the type scores and a task may report
    default_metric: ClassVar[str]
    hub_task: ClassVar[str]  # the Hub's pipeline tag of a model fine-tuned on the type
    description: ClassVar[str]  # the card's words for the type
    averaging: ClassVar[str]  # how F1 is averaged, stated in the table notes and the card
    trivial_rule: ClassVar[str]  # what trivial() predicts, in words (the eval_table.md note on the trivial row)
    # what example_texts holds, in words: the input the split-overlap check compares (its messages)
    input_description: ClassVar[str] = "text"
    # what profile_key measures, in words (the split-shift report); None: the type has no profile
    profile_name: ClassVar[str | None] = None
    truncated_unit: ClassVar[str] = "documents"  # what Encoded.truncated counts (the job's truncation warning)
    # how a metric other than default_metric is averaged, for a task that reports it (tasks.{task}.metric)
    other_averaging: ClassVar[dict[str, str]] = {}
    formats: ClassVar[tuple[str, ...]]  # task file formats (tasks.{task}.format) that can hold the type
    unseen_default: ClassVar[str] = "error"  # label_set.unseen when the config leaves it null
    # the fewest labels a task of the type can be scored on (a multiclass task with one class scores 1.0)
    min_labels: ClassVar[int] = 0
    # the test-split report key counting rows left without a label seen in train (None: not checked)
    unlabelled_key: ClassVar[str | None] = None
    label_separator: ClassVar[bool] = False  # whether a row's label field holds several labels (label_separator)
    class_labels: ClassVar[bool] = False  # whether labels are class names a label_map may rename (relation keys)

    @abstractmethod
    def read_record(self, rec: dict, fields: dict, where: str, row: dict) -> dict:
        """A raw row from one JSONL/TSV/CSV record: ``row`` (``id``, ``where``, ``doc``) completed with
        the text and the type's label columns.

        Raises:
            clmdetour.tasktypes.records.FormatError: a missing field or a malformed label (names ``where``).
        """
        ...  # abstract: every registered type defines it

    def averaging_for(self, metric: str | None) -> str:
        """How a task of this type that reports ``metric`` is averaged: ``averaging``, plus the
        ``other_averaging`` sentence when ``metric`` is not the type's default (e.g. ChemProt's micro-F1
        over a multiclass task). ``None`` means the default."""
        if metric is None or metric == self.default_metric or metric not in self.other_averaging:
            return self.averaging
        return self.other_averaging[metric]

    def check_reader_keys(self, spec: dict, where: str) -> None:
        """Check the type's own reader keys of a task entry at planning (none by default).

        Raises:
            ValueError: keys that cannot work together (the message starts with ``where.<key>``).
        """

    def jsonl_description(self, spec: dict) -> str:
        """The JSON-lines fields a task of this type reads (user-task messages)."""
        ids = f"{spec['id_field']!r}, " if spec.get("id_field") else ""
        return (f"JSON lines or one JSON array of objects, with fields {ids}{spec['text_field']!r}, {spec['label_field']!r}"
                + (" (a list of labels)" if self.label_separator else " (one label)"))

    def label_source(self, fields: dict) -> str:
        """Where a row's labels come from, in the config's words (unseen-label messages)."""
        return (f"label_field {fields.get('label_field')!r}"
                + (f" and label_separator {fields.get('label_separator')!r}" if self.label_separator else ""))

    # -- the task contract -------------------------------------------------------------
    @abstractmethod
    def label_columns(self) -> dict[str, Any]:
        """``{column: datasets feature}`` of the columns beside ``id`` and ``text``."""
        ...  # abstract: every registered type defines it

    def features(self):
        """The ``datasets.Features`` of a prepared split's rows (``id``, ``text``, then the type's columns)."""
        import datasets

        return datasets.Features({"id": datasets.Value("string"), "text": datasets.Value("string"),
                                  **self.label_columns()})

    def labels_record(self, task: str, labels: list[str], metric: str | None) -> dict:
        """``labels.json`` of the contract: task, type, sorted labels, metric (null: the type's default)."""
        return {"task": task, "type": self.name, "labels": labels, "metric": metric or self.default_metric}

    def model_labels(self, spec: dict, where: str) -> list[str]:
        """The label names the model predicts, in id order, from a ``labels.json`` record.

        Raises:
            ValueError: the record lacks what the type needs (the message starts with ``where``).
        """
        return list(spec["labels"])

    @abstractmethod
    def row_values(self, row: dict, where: str) -> list[str]:
        """Every label value a prepared row carries (checked against :meth:`model_labels`).

        Raises:
            ValueError: the row is inconsistent (the message starts with ``where``).
        """
        ...  # abstract: every registered type defines it

    # -- preparation -------------------------------------------------------------------
    def row_labels(self, row: dict) -> list[str]:
        """The labels a row counts for (label counts, label-set policy): sorted, unique."""
        return sorted(set(self.row_values(row, "")))

    def example_texts(self, row: dict) -> tuple[str, ...]:
        """The texts that make a row's input (``(text,)``; a pair task: both texts).

        Two rows are the same example when these and :meth:`label_key` are equal
        (repeated records, ``tasks.{task}.duplicates``); the same normalised texts
        with different :meth:`label_key` values are conflicting labels.
        """
        return (row["text"],)

    def compared_texts(self, row: dict) -> tuple[str, ...]:
        """The input compared between rows: the split-overlap check, identical records under
        different ids and conflicting labels (:mod:`clmdetour.tasks.overlap`, :mod:`clmdetour.tasks.traps`).

        :meth:`example_texts` (the default), with parts whose order carries nothing put in a
        canonical order, so a copy with its parts shuffled compares equal; the first part stays
        first (shared stems are counted apart by it). Never the texts given to the model or to
        decontamination: those are :meth:`example_texts` and the rows themselves.
        """
        return self.example_texts(row)

    def compared_label_key(self, row: dict) -> tuple:
        """The answer compared beside :meth:`compared_texts` (identical records, conflicting labels):
        :meth:`label_key` (the default), or, for a type whose :meth:`compared_texts` reorders parts, an
        answer that does not depend on that order. Repeated ids compare :meth:`label_key` itself."""
        return self.label_key(row)

    def shown_label_key(self, row: dict) -> tuple:
        """The answer as written, shown beside the other spellings of one normalised answer (conflicting labels);
        by default :meth:`compared_label_key`."""
        return self.compared_label_key(row)

    def profile_key(self, row: dict):
        """A row's answer profile, compared between splits (:func:`clmdetour.tasks.traps.profile_shift`):
        e.g. its class, or how many labels it carries; only called when ``profile_name`` is set."""
        raise NotImplementedError(f"task type {self.name!r} has no answer profile (profile_name is None)")

    def record_problems(self, row: dict) -> list[str]:
        """What is wrong inside one record without stopping the task, in words (reported, never refused;
        :func:`clmdetour.tasks.traps.record_problems`); none by default."""
        return []

    def label_key(self, row: dict) -> tuple:
        """A row's answer in a comparable, hashable form: its :meth:`row_labels` (sorted,
        unique), so a label list's order does not matter."""
        return tuple(self.row_labels(row))

    @abstractmethod
    def remove_labels(self, row: dict, drop: set[str]) -> dict | None:
        """The row without the dropped labels (``None``: the row itself is dropped)."""
        ...  # abstract: every registered type defines it

    def label_counts(self, rows: list[dict]) -> dict[str, int]:
        """Rows per label (token tasks: entities per type), sorted by label."""
        from collections import Counter

        c: Counter = Counter()
        for row in rows:
            c.update(self.row_labels(row))
        return dict(sorted(c.items()))

    # -- fine-tuning: the model contract ------------------------------------------------
    target_key: ClassVar[str] = "labels"  # the batch key of the targets (the head's loss reads it)

    def prepare_tokenizer(self, tokenizer, task) -> TokenizerAdditions:
        """Add what the task's inputs need to the job's own tokenizer, before any split is encoded (nothing
        by default; :class:`clmdetour.tasktypes.markers.EntityMarkers` adds a relation task's markers).

        Only the in-memory tokenizer changes, never the model folder's files.

        Args:
            tokenizer: the job's transformers tokenizer (modified in place).
            task: the job's prepared task (:class:`clmdetour.tasks.contract.TaskData`: ``labels``,
                ``marker_tokens``, ...).

        Returns:
            What was added (:class:`TokenizerAdditions`; empty by default), handed to :meth:`init_head`.
        """
        return TokenizerAdditions()

    def init_head(self, model, tokenizer, additions: TokenizerAdditions) -> None:
        """Prepare a freshly loaded task model (:meth:`load_model`) for the job's tokenizer and this task:
        e.g. the input-embedding rows of tokens :meth:`prepare_tokenizer` added, or a head that reads them.
        Called after the seed's RNG is seeded and before training; nothing by default.

        Args:
            model: the transformers model :meth:`load_model` built (modified in place).
            tokenizer: the job's tokenizer (after :meth:`prepare_tokenizer`).
            additions: what :meth:`prepare_tokenizer` returned.
        """

    @abstractmethod
    def encode(self, rows: list[dict], labels: list[str], tokenizer, max_length: int, settings, task: str) -> Encoded:
        """Tokenise one split: model examples (``input_ids`` of at most ``max_length`` tokens, special
        tokens included, and the target under :attr:`target_key`) and the gold answers the scorer
        compares with.

        Args:
            settings: the job's fine-tuning settings (:class:`clmdetour.settings.FinetuneSettings`; a type
                reads its own keys, e.g. ``ner_context_tokens``), or None for the defaults.

        Raises:
            InputError: ``max_length`` leaves no room for text.
        """
        ...  # abstract: every registered type defines it

    def split_counts(self, enc: Encoded) -> dict[str, int]:
        """Counts of one encoded split the job records beside ``truncated`` (``{key: count}``; none by default)."""
        return {}

    def check_encoded(self, task: str, split: str, enc: Encoded) -> bool:
        """Warn (one log line) about what an encoded split cannot score; returns whether it warned."""
        return False

    @abstractmethod
    def collate_labels(self, examples: list[dict], length: int):
        """The target tensor of a padded batch (``length``: padded tokens per example)."""
        ...  # abstract: every registered type defines it

    def collate_targets(self, examples: list[dict], length: int) -> dict:
        """The batch's target tensors, ``{target_key: collate_labels(...)}`` (none for examples without targets)."""
        if self.target_key not in examples[0]:
            return {}
        return {self.target_key: self.collate_labels(examples, length)}

    @abstractmethod
    def load_model(self, model_dir: str, kw: dict):
        """A transformers model with a fresh head for the type (``kw``: ``from_pretrained`` keywords:
        ``num_labels``, ``id2label``, ``label2id``, ``attn_implementation``)."""
        ...  # abstract: every registered type defines it

    def example_outputs(self, output, lengths: Sequence[int]) -> list:
        """A batch's model output -> one fp32 numpy array per example, in batch order.

        The default reads ``output.logits`` ``[B, C]`` and gives each example its ``[C]`` row.

        Args:
            output: the model's forward output; lengths: tokens of each example (unpadded).
        """
        logits = output.logits.float().cpu().numpy()
        return [logits[j] for j in range(len(lengths))]

    @abstractmethod
    def predictions(self, labels: list[str], metric: str, enc: Encoded, outputs: list, fitted: dict | None = None,
                    settings=None) -> Predictions:
        """One split's per-document gold and prediction (:class:`Predictions`), from its per-example outputs.

        Args:
            outputs: :meth:`example_outputs` of every example of ``enc``, in order.
            fitted: what :meth:`fitted_on_dev` kept from dev (test scoring); None on dev (fitted here).
            settings: the job's fine-tuning settings (as :meth:`encode`), or None.
        """
        ...  # abstract: every registered type defines it

    @abstractmethod
    def rescore(self, labels: list[str], rows: list[dict], fitted: dict) -> dict[str, float]:
        """Every metric of the type from :class:`Predictions` rows alone (``gold`` and ``predicted``), fractions.

        Raises:
            ValueError: a row whose labels the task does not have, or too few rows for the metric.
        """
        ...  # abstract: every registered type defines it

    @abstractmethod
    def gold_of_row(self, row: dict):
        """A prepared task row's gold in the form of :class:`Predictions` rows (compared with the saved gold)."""
        ...  # abstract: every registered type defines it

    def score(self, labels: list[str], metric: str, enc: Encoded, outputs: list, fitted: dict | None = None,
              settings=None) -> dict[str, float]:
        """Metrics of one split (``{metric: value}``, fractions): :meth:`rescore` of :meth:`predictions`, so a
        saved prediction file always reproduces them."""
        p = self.predictions(labels, metric, enc, outputs, fitted, settings)
        return self.rescore(labels, p.rows, p.fitted)

    def fitted_on_dev(self, dev_metrics: dict) -> dict:
        """What test scoring reuses from the best dev scoring (``fitted`` of :meth:`score`); none by default."""
        return {}

    # -- results -----------------------------------------------------------------------
    @abstractmethod
    def trivial(self, train: list[dict], test: list[dict], labels: list[str], metric: str) -> Trivial:
        """The best constant predictor, chosen on ``train`` rows, scored on ``test`` rows."""
        ...  # abstract: every registered type defines it

    def extra_trivial(self, train: list[dict], test: list[dict], labels: list[str]) -> list[tuple[str, dict[str, float]]]:
        """Trivial rules the type declares beside :meth:`trivial` (which is chosen per metric on train): each
        ``(rule in words, {metric: test score})`` over every metric of the type. None by default."""
        return []

    def check_metric(self, metric: str) -> None:
        """Raises ValueError: ``metric`` is not one the type scores."""
        if metric not in self.metrics:
            raise ValueError(f"metric {metric!r} is not one of {self.metrics}")
