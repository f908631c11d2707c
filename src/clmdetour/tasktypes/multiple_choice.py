"""``multiple_choice``: a question with N options, one or more of them correct (FrenchMedMCQA's kind).

FrenchMedMCQA (Labrak et al., 2022; DrBenchmark, Labrak et al., 2024) asks
pharmacy-exam questions with five options ``a``-``e``, of which one to five
are correct. Each (question, option) pair is encoded with the tokenizer's
pair template (``[CLS] question [SEP] option [SEP]``), truncated
longest-first to the token budget, and scored by a one-output head
(``AutoModelForSequenceClassification``, ``num_labels=1``,
``problem_type="multi_label_classification"``: binary cross-entropy on
"this option is correct"). A question's predicted answer set is every option
whose probability is at least 0.5, or its single most probable option when
none is (every question has at least one correct answer).

Scores, as DrBenchmark reports FrenchMedMCQA (fractions in [0, 1]):

- ``hamming`` (the default metric): the Hamming score, the mean over questions
  of ``|predicted ∩ gold| / |predicted ∪ gold|``;
- ``emr``: the exact match ratio, the fraction of questions whose predicted
  set equals the gold set.

The trivial baseline answers every question with the same set of option keys,
the one that scores best on train.

Rows are compared (split overlap, identical records under different ids,
conflicting labels) as the question with its options in a canonical order and
the texts of the correct options (:meth:`MultipleChoice.compared_texts`), so
an exam question re-used with its options shuffled is found.

Contract columns: ``id``, ``text`` (the question), ``options`` (option texts),
``option_keys`` (their keys, in the same order), ``answers`` (the correct
keys). ``labels.json``'s ``labels`` are the option keys seen.

Reader keys (``tasks.{task}``): ``text_field`` (the question),
``options_field`` (a mapping ``{key: text}``, a list of texts, or a list of
field names holding one option each), ``option_keys`` (the keys of list
options, in order; default ``a``, ``b``, ``c`` ...), ``label_field`` (the
correct keys: a list, or one string split at ``label_separator``).
"""

from __future__ import annotations

import itertools
import re
import string
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from clmdetour.textio import nfc

from .base import Encoded, Predictions, TaskType, Trivial
from .heads import sequence_classifier
from .records import MISSING, FormatError, as_label_list, get_field, text_of

DECISION_THRESHOLD = 0.5  # an option is answered when its probability reaches it
_WORD = re.compile(r"\w+")  # a word of option_order (the overlap check's \w+ runs)
MAX_CONSTANT_KEYS = 12  # the trivial baseline tries every key subset up to this many keys (2^12 - 1 sets)


@dataclass
class ChoiceEncoded(Encoded):
    """A split of (question, option) pairs: ``question_of[i]`` is the row of example ``i``;
    ``option_keys[r]`` the keys of row ``r``'s options in example order; ``gold[r]`` its correct keys."""

    question_of: list[int] = field(default_factory=list)
    option_keys: list[list[str]] = field(default_factory=list)


def answer_set_scores(gold: list[set], pred: list[set]) -> dict[str, float]:
    """The Hamming score and the exact match ratio of predicted answer sets (DrBenchmark's FrenchMedMCQA metrics).

    Args:
        gold, pred: per question, the set of correct and of predicted option keys (same length, N >= 1).

    Returns:
        ``{"hamming": mean |P ∩ G| / |P ∪ G|, "emr": fraction with P == G}`` (two empty sets count 1).

    Raises:
        ValueError: lengths differ or no question.
    """
    if len(gold) != len(pred) or not gold:
        raise ValueError(f"answer sets: {len(gold)} gold and {len(pred)} predicted questions (need equal, >= 1)")
    hamming = [len(g & p) / len(g | p) if g | p else 1.0 for g, p in zip(gold, pred)]
    return {"hamming": float(np.mean(hamming)), "emr": float(np.mean([g == p for g, p in zip(gold, pred)]))}


_DECIMAL_COMMA = re.compile(r"(?<=\d),(?=\d)")


def answer_form(text: str) -> str:
    """An answer text compared as a reader would: NFKC, case-folded, runs of whitespace as one space, and a
    decimal comma between digits as a point (``Anémie`` = ``anémie``, ``0,75`` = ``0.75``)."""
    return _DECIMAL_COMMA.sub(".", " ".join(unicodedata.normalize("NFKC", text).casefold().split()))


def option_order(option: str) -> tuple[tuple[str, ...], str]:
    """The sort key of an option text in :meth:`MultipleChoice.compared_texts`: its words (NFKC,
    lower-case, ``\\w+`` runs: the split-overlap check's near-exact rule), then its NFC text without
    surrounding whitespace, so options equal under either comparison sort alike."""
    return tuple(_WORD.findall(unicodedata.normalize("NFKC", option).lower())), nfc(option).strip()


def _options(rec: dict, fields: dict, where: str) -> tuple[list[str], list[str]]:
    """``(keys, texts)`` of a record's options (see the module docstring for ``options_field``)."""
    spec = fields.get("options_field") or "options"
    if isinstance(spec, list):  # one field per option
        values = []
        for name in spec:
            v = get_field(rec, name)
            if v is MISSING:
                raise FormatError(f"{where}: option field {name!r} (options_field) missing; fields: {sorted(rec)}")
            values.append(v)
    else:
        values = get_field(rec, spec)
        if values is MISSING:
            raise FormatError(f"{where}: options field {spec!r} (options_field) missing; fields: {sorted(rec)}")
    if isinstance(values, dict):
        keys = [nfc(str(k)).strip() for k in values]
    elif isinstance(values, list):
        keys = list(fields.get("option_keys") or string.ascii_lowercase[:len(values)])
        if len(keys) < len(values):
            raise FormatError(f"{where}: {len(values)} options but option_keys names {len(keys)}: {keys}")
        keys = [str(k) for k in keys[:len(values)]]
    else:
        raise FormatError(f"{where}: options {spec!r} must be a mapping {{key: text}} or a list, got {values!r}")
    texts = list(values.values()) if isinstance(values, dict) else list(values)
    if len(texts) < 2:
        raise FormatError(f"{where}: a multiple-choice question needs at least 2 options, got {len(texts)}")
    if len(set(keys)) != len(keys):
        raise FormatError(f"{where}: option keys repeat: {keys}")
    for k, v in zip(keys, texts):
        if not isinstance(v, str) or not v.strip():
            raise FormatError(f"{where}: option {k!r} is not a non-empty string: {v!r}")
    return keys, [nfc(v) for v in texts]


class MultipleChoice(TaskType):
    name = "multiple_choice"
    input_description = "question and options"
    truncated_unit = "question-option pairs"
    profile_name = "share of questions per number of correct options"
    trivial_rule = ("the one set of option keys, best on train, answered to every question (e.g. every option, "
                    "or the most frequent answer set)")
    metrics = ("hamming", "emr")
    default_metric = "hamming"
    hub_task = "multiple-choice"
    description = "multiple-choice question answering (one or more correct options)"
    averaging = ("no F1: the Hamming score, the mean over questions of |predicted ∩ gold| / |predicted ∪ gold| "
                 "of the option sets (DrBenchmark's FrenchMedMCQA metric), averaged like any F1 in the macro "
                 "average and the sign test")
    other_averaging: ClassVar[dict[str, str]] = {"emr": ("no F1: the exact match ratio, the fraction of questions whose predicted option set "
                               "equals the gold set (DrBenchmark's FrenchMedMCQA EMR)")}
    formats = ("jsonl", "hub")
    label_separator = True

    def label_columns(self):
        import datasets

        strings = datasets.Sequence(datasets.Value("string"))
        return {"options": strings, "option_keys": strings, "answers": strings}

    def read_record(self, rec, fields, where, row):
        label_field = fields.get("label_field") or "label"
        value = get_field(rec, label_field)
        if value is MISSING:
            raise FormatError(f"{where}: answers field {label_field!r} (label_field) missing; fields: {sorted(rec)}")
        keys, texts = _options(rec, fields, where)
        answers = as_label_list(value if not isinstance(value, (int, float)) else str(value),
                                fields.get("label_separator") or "|", where)
        if not answers:
            raise FormatError(f"{where}: no correct option in {label_field!r}: {value!r}")
        unknown = [a for a in answers if a not in keys]
        if unknown:
            raise FormatError(f"{where}: correct option(s) {unknown} are not among the option keys {keys}")
        row.update(text=text_of(rec, fields, where), options=texts, option_keys=keys,
                   answers=sorted(set(answers)))
        return row

    def check_reader_keys(self, spec, where):
        """``option_keys`` distinct, and as many as the option fields when ``options_field`` lists fields."""
        keys, fields = spec.get("option_keys"), spec.get("options_field")
        if keys is not None and len(set(map(str, keys))) != len(keys):
            raise ValueError(f"{where}.option_keys: keys repeat: {keys}")
        if keys is not None and isinstance(fields, list) and len(keys) != len(fields):
            raise ValueError(f"{where}.option_keys: {len(keys)} keys for the {len(fields)} option fields of "
                             f"{where}.options_field; give one key per field, in order")

    def jsonl_description(self, spec):
        return (f"JSON lines or one JSON array of objects, with a question {spec['text_field']!r}, options {spec.get('options_field') or 'options'!r} "
                f"and the correct option keys {spec['label_field']!r}")

    def label_source(self, fields):
        return f"label_field {fields.get('label_field')!r} (the correct option keys)"

    def row_values(self, row, where):
        if len(row["options"]) != len(row["option_keys"]):
            raise ValueError(f"{where}: row {row['id']!r} has {len(row['options'])} options but "
                             f"{len(row['option_keys'])} option keys")
        missing = [a for a in row["answers"] if a not in row["option_keys"]]
        if missing or not row["answers"]:
            raise ValueError(f"{where}: row {row['id']!r} has answers {list(row['answers'])} outside its options "
                             f"{list(row['option_keys'])}")
        return list(row["option_keys"])

    def row_labels(self, row):
        """The question's option keys: what the model can answer. The keys are positions, not classes:
        a key never correct in train is still answered (the model scores each (question, option) pair),
        so the unseen-label policy reads the options a row offers, not its answers."""
        return sorted(set(row["option_keys"]))

    def label_key(self, row):
        """The correct option keys (repeated records and conflicting labels compare them)."""
        return tuple(sorted(set(row["answers"])))

    def label_counts(self, rows):
        """Questions per correct key, sorted by key (how often each position is right)."""
        return dict(sorted(Counter(a for row in rows for a in set(row["answers"])).items()))

    def example_texts(self, row):
        """The question and its options: the same question with other options is another example."""
        return (row["text"], *row["options"])

    def compared_texts(self, row):
        """The question, then its options sorted by :func:`option_order`: a question whose options are
        shuffled (a re-used exam question, keys permuted) compares equal to the original in the
        split-overlap check, the identical-records report and the conflicting-labels count."""
        return (row["text"], *sorted(row["options"], key=option_order))

    def compared_label_key(self, row):
        """The texts of the correct options in :func:`answer_form` (one answer written two ways is one answer),
        sorted: the same answer whatever keys the shuffled options carry."""
        text_of_key = dict(zip(row["option_keys"], row["options"]))
        return tuple(sorted(answer_form(text_of_key[a]) for a in set(row["answers"])))

    def shown_label_key(self, row):
        """The correct options' texts as written (NFC, surrounding whitespace removed), sorted."""
        text_of_key = dict(zip(row["option_keys"], row["options"]))
        return tuple(sorted(nfc(text_of_key[a]).strip() for a in set(row["answers"])))

    def profile_key(self, row):
        """How many options are correct (single- vs multi-answer questions)."""
        return len(set(row["answers"]))

    def record_problems(self, row):
        """``identical options within a question``: two option texts equal after NFC, case folding and
        whitespace collapsing (the model cannot tell them apart)."""
        texts = [" ".join(nfc(o).casefold().split()) for o in row["options"]]
        return ["identical options within a question"] if len(set(texts)) < len(texts) else []

    def remove_labels(self, row, drop):
        """A question offering a dropped key is dropped (its options and answer set would change)."""
        return None if set(row["option_keys"]) & set(drop) else row

    def encode(self, rows, labels, tokenizer, max_length, settings, task) -> ChoiceEncoded:
        """One example per (question, option) pair, the pair template truncated longest-first to
        ``max_length`` tokens; target 1.0 for a correct option. ``truncated`` counts the pairs cut."""
        pair_specials = tokenizer.num_special_tokens_to_add(pair=True)
        if max_length <= pair_specials:
            raise ValueError(f"task {task}: max_length {max_length} leaves no room beside {pair_specials} special tokens")
        questions = [r["text"] for r in rows for _ in r["options"]]
        options = [o for r in rows for o in r["options"]]
        full = tokenizer(questions, options, add_special_tokens=False, verbose=False)["input_ids"]
        ids = tokenizer(questions, options, truncation="longest_first", max_length=max_length, verbose=False)["input_ids"]
        enc = ChoiceEncoded(examples=[], gold=[])
        k = 0
        for r, row in enumerate(rows):
            correct = set(row["answers"])
            for key in row["option_keys"]:
                enc.truncated += len(full[k]) + pair_specials > max_length
                enc.examples.append({"input_ids": list(ids[k]), "labels": [float(key in correct)]})
                enc.question_of.append(r)
                k += 1
            enc.option_keys.append(list(row["option_keys"]))
            enc.gold.append(correct)
        return enc

    def collate_labels(self, examples, length):
        import torch

        return torch.tensor([e["labels"] for e in examples], dtype=torch.float32)  # [B, 1]

    def load_model(self, model_dir, kw):
        """A one-output sequence head (:func:`clmdetour.tasktypes.heads.sequence_classifier`), binary
        cross-entropy on "this option is correct"."""
        kw = dict(kw, num_labels=1, problem_type="multi_label_classification", id2label={0: "correct"},
                  label2id={"correct": 0})
        return sequence_classifier(model_dir, kw)

    def predicted_sets(self, enc: ChoiceEncoded, outputs: list) -> list[set]:
        """Per question, the options whose probability reaches :data:`DECISION_THRESHOLD`, else its most
        probable option (``outputs``: one ``[1]`` logit per pair, in ``enc.examples`` order)."""
        logits: list[list[float]] = [[] for _ in enc.option_keys]
        for q, out in zip(enc.question_of, outputs):
            logits[q].append(float(np.asarray(out).reshape(-1)[0]))
        sets = []
        for keys, z in zip(enc.option_keys, logits):
            probs = 1.0 / (1.0 + np.exp(-np.asarray(z)))
            chosen = {k for k, p in zip(keys, probs) if p >= DECISION_THRESHOLD}
            sets.append(chosen or {keys[int(np.argmax(probs))]})
        return sets

    def predictions(self, labels, metric, enc, outputs, fitted=None, settings=None):
        """Per question its correct option keys and the predicted ones (:meth:`predicted_sets`), sorted."""
        return Predictions([{"gold": sorted(g), "predicted": sorted(p)}
                            for g, p in zip(enc.gold, self.predicted_sets(enc, outputs))])

    def rescore(self, labels, rows, fitted):
        return answer_set_scores([set(r["gold"]) for r in rows], [set(r["predicted"]) for r in rows])

    def gold_of_row(self, row):
        return sorted(row["answers"])

    def extra_trivial(self, train, test, labels):
        """Two rules a reader of an exam benchmark computes by hand: every option of each question, and the
        answer set most frequent on train given to every question (ties: the smaller set, then the keys)."""
        gold = [set(r["answers"]) for r in test]
        every = answer_set_scores(gold, [set(r["option_keys"]) for r in test])
        counts = Counter(tuple(sorted(r["answers"])) for r in train)
        top = min(counts, key=lambda a: (-counts[a], len(a), a))
        frequent = answer_set_scores(gold, [set(top)] * len(test))
        return [("every option of each question", every),
                (f"the most frequent answer set of train, {list(top)} ({counts[top]} of {len(train)})", frequent)]

    def trivial(self, train, test, labels, metric):
        return best_constant_answer_set([r["answers"] for r in train], [r["answers"] for r in test], labels, metric)


def best_constant_answer_set(train, test, keys, metric: str) -> Trivial:
    """The one set of option keys that, answered to every question, scores best on ``train`` (ties: the
    smaller set, then the keys in order), scored on ``test``.

    Every non-empty subset of ``keys`` is tried when there are at most :data:`MAX_CONSTANT_KEYS`;
    beyond, the sets of the ``k`` most frequent correct keys on train (``k = 1 .. K``).

    Args:
        train, test: per question, its correct option keys.
        keys: the task's option keys (``labels.json`` ``labels``).
        metric: ``hamming`` or ``emr`` (:func:`answer_set_scores`).

    Raises:
        ValueError: an unknown metric, no keys, or an empty split.
    """
    MultipleChoice().check_metric(metric)
    if not keys or not train or not test:
        raise ValueError("multiple-choice trivial baseline needs option keys and non-empty train and test splits")
    gold_train, gold_test = [set(a) for a in train], [set(a) for a in test]
    if len(keys) <= MAX_CONSTANT_KEYS:
        candidates = [set(c) for k in range(1, len(keys) + 1) for c in itertools.combinations(sorted(keys), k)]
    else:
        freq = Counter(a for row in train for a in set(row))
        ranked = sorted(keys, key=lambda x: (-freq[x], x))
        candidates = [set(ranked[:k]) for k in range(1, len(keys) + 1)]
    best = None
    for cand in candidates:  # in order of size, then keys: the first best wins ties
        s = answer_set_scores(gold_train, [cand] * len(gold_train))[metric]
        if best is None or s > best[0]:
            best = (s, cand)
    s_train, cand = best
    return Trivial(answer_set_scores(gold_test, [cand] * len(gold_test))[metric], s_train, metric,
                   f"options {sorted(cand)}")
