"""Text overlap between the train, dev and test splits of a task (leakage check).

An id check cannot see the same text under two ids (a file copied to
``train.conll`` and ``dev.conll``, generated ids, a sentence repeated across
documents), so texts are compared:

- **exact**: the same text (after Unicode NFC, surrounding whitespace removed);
- **near-exact**: the same word sequence after the decontamination
  normalisation (:func:`clmdetour.corpus.decontaminate.words`: NFKC,
  lower-case, ``\\w+`` runs), so case, punctuation and
  spacing differences do not hide a copy.

Only examples of at least ``min_words`` (5) normalised words count:
fragments such as ``4 ).`` or a heading repeat legitimately. The *test
overlap fraction* is the number of test examples whose near-exact text occurs
in train (what a fine-tuned model may have memorised), divided by the number
of test examples; dev-test overlaps are counted and reported beside it.
"""

from __future__ import annotations

import unicodedata

from clmdetour.corpus.decontaminate import words

MIN_WORDS = 5
PAIRS = (("train", "dev"), ("train", "test"), ("dev", "test"))


def _keys(rows: list[dict], min_words: int) -> tuple[set[str], set[tuple[str, ...]]]:
    exact, near = set(), set()
    for row in rows:
        w = tuple(words(row["text"]))
        if len(w) >= min_words:
            exact.add(unicodedata.normalize("NFC", row["text"]).strip())
            near.add(w)
    return exact, near


def split_overlap(splits: dict[str, list[dict]], min_words: int = MIN_WORDS, examples: int = 3) -> dict:
    """Count exact and near-exact text overlaps between splits (rules in the module doc).

    Args:
        splits: rows per split (``id``, ``text``).
        min_words: shortest example counted, in normalised words.
        examples: how many overlapping test ids to list.

    Returns:
        ``{"min_words", "normalisation", "pairs": {"train-dev": {"exact", "near_exact"}, ...},
        "test_overlapping", "test_examples", "test_fraction", "test_example_ids"}``: per
        pair, the examples of the second split whose text occurs in the first
        (``near_exact`` includes ``exact``); for test, the examples whose near-exact
        text occurs in train, their fraction of all test examples, and the first ids.
    """
    keys = {k: _keys(v, min_words) for k, v in splits.items()}
    pairs = {}
    for a, b in PAIRS:
        ea, na = keys[a]
        exact = near = 0
        for row in splits[b]:
            w = tuple(words(row["text"]))
            if len(w) < min_words:
                continue
            exact += unicodedata.normalize("NFC", row["text"]).strip() in ea
            near += w in na
        pairs[f"{a}-{b}"] = {"exact": exact, "near_exact": near}
    seen = keys["train"][1]
    hits = [r["id"] for r in splits["test"] if len(w := tuple(words(r["text"]))) >= min_words and w in seen]
    n = len(splits["test"])
    return {"min_words": min_words, "normalisation": "NFKC, lower-case, \\w+ runs (near-exact); NFC (exact)",
            "pairs": pairs, "test_overlapping": len(hits), "test_examples": n,
            "test_fraction": round(len(hits) / n, 6) if n else 0.0, "test_example_ids": hits[:examples]}
