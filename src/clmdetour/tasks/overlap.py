"""Text overlap between the train, dev and test splits of a task (leakage check), and conflicting labels.

What is compared is what the model sees of an example: its task type's
:meth:`~clmdetour.tasktypes.base.TaskType.compared_texts` (the text; both
texts of a similarity pair; a multiple-choice question with its options in a
canonical order, so shuffled options are still a copy),
each part normalised as below and compared part by part, so two exam
questions sharing a stem ("Parmi les affirmations suivantes, laquelle est
exacte ?") but not their options are not a leak. Such examples, whose first
part (question, stem, template) occurs in the other split while the whole
input does not, are counted apart, as ``shared_first_text`` (never in the check).

An id check cannot see the same text under two ids (a file copied to
``train.conll`` and ``dev.conll``, generated ids, a sentence repeated across
documents), so texts are compared:

- **exact**: the same text (after Unicode NFC, surrounding whitespace removed);
- **near-exact**: the same word sequence after the decontamination
  normalisation (:func:`clmdetour.corpus.decontaminate.words`: NFKC,
  lower-case, the language's word rule: ``\\w+`` runs), so case, punctuation and
  spacing differences do not hide a copy; a text without any word (``--``)
  is compared exactly.

Overlaps are counted for every length, in two bands: examples of at least
``min_words`` normalised words (the task's ``overlap_min_words``, default 5)
and shorter ones. Only the first band enters the check: fragments such as
``4 ).`` or a heading repeat legitimately in long-text tasks, while on a
short-text task (one or two terms per example) the lower band is where the
repeats are, and the manifest shows them. The *test overlap fraction* is the
number of test examples of at least ``min_words`` words whose near-exact text
occurs in train (what a fine-tuned model may have memorised), divided by the
number of test examples; dev-test overlaps are counted and reported beside it.

**Conflicting labels**: rows whose near-exact texts are the same but whose
labels differ (the task type's ``compared_label_key``: a class, a label set, a
tag sequence, a score, the correct options' texts), within one split or across
two; counted for every length.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Hashable

from clmdetour.corpus.decontaminate import words

MIN_WORDS = 5
PAIRS = (("train", "dev"), ("train", "test"), ("dev", "test"))
BANDS = ("below_floor", "at_or_above_floor")


def _exact(text: str) -> str:
    return unicodedata.normalize("NFC", text).strip()


def _near(text: str) -> tuple[str, ...]:
    """The near-exact key: the normalised words, or the exact text when there is no word."""
    return _features(text)[1]


def _features(text: str) -> tuple[str, tuple[str, ...], int]:
    """``(exact text, near-exact key, length in normalised words)``."""
    w = tuple(words(text))
    exact = _exact(text)
    return exact, w or ("", exact), len(w)


def _input_features(parts: tuple[str, ...]) -> tuple[tuple, tuple, int, tuple]:
    """``(exact key, near-exact key, length in words, near-exact key of the first part)`` of an input
    made of ``parts`` (the task type's ``compared_texts``); the length sums the parts'."""
    feats = [_features(t) for t in parts]
    return tuple(f[0] for f in feats), tuple(f[1] for f in feats), sum(f[2] for f in feats), feats[0][1]


def _single_text(row: dict) -> tuple[str, ...]:
    return (row["text"],)


LEAK_IDS = 20  # test ids listed in the report (test_overlapping_ids): the exact leak, to check or remove


def split_overlap(splits: dict[str, list[dict]], min_words: int = MIN_WORDS, examples: int = 3,
                  texts: Callable[[dict], tuple[str, ...]] = _single_text) -> dict:
    """Count exact and near-exact input overlaps between splits (rules in the module doc).

    Args:
        splits: rows per split (``id``, the text columns).
        min_words: the check's floor, in normalised words of the whole input (0 or 1: every example counts).
        examples: how many overlapping test ids to list in ``test_example_ids`` (the message's).
        texts: a row's input texts, what the model sees (the task type's ``compared_texts``; default ``text``).

    Returns:
        ``{"min_words", "normalisation", "pairs": {"train-dev": {"exact", "near_exact"}, ...},
        "by_length": {"train-dev": {"below_floor": {"exact", "near_exact"},
        "at_or_above_floor": {...}}, ...}, "test_overlapping", "test_overlapping_below_floor",
        "test_examples", "test_fraction", "test_example_ids"}``: per pair, the examples of the
        second split whose text occurs in the first (``near_exact`` includes ``exact``);
        ``pairs`` counts examples of at least ``min_words`` words (what the check uses),
        ``by_length`` both bands; for test, the examples of at least ``min_words`` words whose
        near-exact text occurs in train, their fraction of all test examples, the first ids,
        and the shorter test examples whose near-exact text occurs in train; ``test_overlapping_ids``
        the first :data:`LEAK_IDS` of those test ids (the leak itself); ``shared_first_text``, per pair,
        the examples of the second split whose first part (a question, a stem, a template) occurs in
        the first split while their whole input does not (shared templates, not copies; 0 for a
        one-text input).
    """
    # per split, each row's (exact key, near-exact key, length in words, first part's key), computed once
    feats = {k: [_input_features(texts(r)) for r in v] for k, v in splits.items()}
    exact_keys = {k: {f[0] for f in v} for k, v in feats.items()}
    near_keys = {k: {f[1] for f in v} for k, v in feats.items()}
    first_keys = {k: {f[3] for f in v if len(f[1]) > 1} for k, v in feats.items()}
    by_length, shared_first = {}, {}
    for a, b in PAIRS:
        counts = {band: {"exact": 0, "near_exact": 0} for band in BANDS}
        shared_first[f"{a}-{b}"] = 0
        for exact, near, length, first in feats[b]:
            band = counts[BANDS[length >= min_words]]
            band["exact"] += exact in exact_keys[a]
            band["near_exact"] += near in near_keys[a]
            shared_first[f"{a}-{b}"] += len(near) > 1 and near not in near_keys[a] and first in first_keys[a]
        by_length[f"{a}-{b}"] = counts
    pairs = {pair: dict(counts["at_or_above_floor"]) for pair, counts in by_length.items()}
    hits, short = [], 0
    for r, (_, near, length, _first) in zip(splits["test"], feats["test"]):
        if near in near_keys["train"]:
            if length >= min_words:
                hits.append(r["id"])
            else:
                short += 1
    n = len(splits["test"])
    return {"min_words": min_words, "normalisation": "NFKC, lower-case, \\w+ runs (near-exact); NFC (exact)",
            "pairs": pairs, "by_length": by_length, "test_overlapping": len(hits),
            "test_overlapping_below_floor": short, "test_examples": n,
            "test_fraction": round(len(hits) / n, 6) if n else 0.0, "test_example_ids": hits[:examples],
            "test_overlapping_ids": hits[:LEAK_IDS], "shared_first_text": shared_first}


def _json_label(value):
    return [_json_label(v) for v in value] if isinstance(value, tuple) else value


def _spelled(written: list):
    """One label of a conflict: as JSON when written one way, else its spellings joined (``"Anémie / anémie"``)."""
    if len(written) == 1:
        return _json_label(written[0])
    return " / ".join(", ".join(map(str, w)) if isinstance(w, tuple) else str(w) for w in written)


def conflicting_labels(splits: dict[str, list[dict]], label_key: Callable[[dict], Hashable],
                       texts: Callable[[dict], tuple[str, ...]] = lambda row: (row["text"],),
                       examples: int = 3, spelling: Callable[[dict], Hashable] | None = None) -> dict:
    """Count texts that carry different labels (module doc), for every length.

    Args:
        splits: rows per split (``id``, the text columns, the label columns).
        label_key: a row's answer in a hashable form (the task type's ``compared_label_key``).
        texts: a row's input texts (the task type's ``compared_texts``), compared near-exactly.
        examples: how many conflicting texts to show.
        spelling: a row's answer as written (the task type's ``shown_label_key``), shown in the examples beside
            the other spellings of the same normalised answer (``"Anémie / anémie"``); None: ``label_key``'s.

    Returns:
        ``{"texts", "rows", "within": {split: n}, "across": {"train-dev": n, ...}, "examples"}``:
        ``texts``, the distinct near-exact texts carrying at least two different labels over
        all splits, and ``rows`` the rows holding them; ``within``, per split, the texts with
        two different labels inside it; ``across``, per split pair, the texts found in both
        splits whose rows there do not all carry the same labels; ``examples``, up to
        ``examples`` of them as ``{"text", "labels", "ids"}`` (``text`` cut at 80 characters,
        ``labels`` the first 3 distinct values, ``ids`` per split, the first 3).
    """
    seen: dict[tuple, dict[str, dict]] = {}  # text key -> split -> {"labels": set, "ids": list}
    spellings: dict[tuple, dict] = {}  # text key -> normalised label -> its spellings, in order of appearance
    shown: dict[tuple, str] = {}
    for split, rows in splits.items():
        for row in rows:
            key = tuple(_near(t) for t in texts(row))
            entry = seen.setdefault(key, {}).setdefault(split, {"labels": [], "ids": []})
            value = label_key(row)
            if value not in entry["labels"]:
                entry["labels"].append(value)
            written = spellings.setdefault(key, {}).setdefault(value, [])
            as_written = spelling(row) if spelling else value
            if as_written not in written:
                written.append(as_written)
            entry["ids"].append(row["id"])
            shown.setdefault(key, " | ".join(texts(row)))

    def distinct(by_split: dict[str, dict], names) -> list:
        out = []
        for name in names:
            for value in by_split.get(name, {}).get("labels", []):
                if value not in out:
                    out.append(value)
        return out

    within = {split: 0 for split in splits}
    across = {f"{a}-{b}": 0 for a, b in PAIRS if a in splits and b in splits}
    total = rows_in = 0
    shown_examples = []
    for key, by_split in seen.items():
        for split, entry in by_split.items():
            within[split] += len(entry["labels"]) > 1
        for a, b in PAIRS:
            if a in by_split and b in by_split and len(distinct(by_split, (a, b))) > 1:
                across[f"{a}-{b}"] += 1
        values = distinct(by_split, list(splits))
        if len(values) > 1:
            total += 1
            rows_in += sum(len(e["ids"]) for e in by_split.values())
            if len(shown_examples) < examples:
                text = shown[key]
                shown_examples.append({"text": text if len(text) <= 80 else text[:80] + "...",
                                       "labels": [_spelled(spellings[key][v]) for v in values[:3]],
                                       "ids": {s: e["ids"][:3] for s, e in by_split.items()}})
    return {"normalisation": "near-exact text (NFKC, lower-case, \\w+ runs), every length", "texts": total,
            "rows": rows_in, "within": within, "across": across, "examples": shown_examples}
