"""The corpus step's per-document rules: cleaning, hashing, the length filter, the held-apart draw,
exact deduplication, the held-out split by hash, and the weighted mix (issue 40: used by the shard
jobs, :mod:`clmdetour.corpus.shards`, and the merge, :mod:`clmdetour.corpus.merge`).

Mixing: with ``corpus.train_tokens`` set, each source gets
``weight / sum(weights) x train_tokens`` tokens: a source with fewer tokens
repeats (whole epochs plus a seeded random subset), capped at its
``max_epochs``; a larger source is subsampled. Without it every source
appears once. Documents of all sources are shuffled together (seeded) before
packing.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import re
import unicodedata

import numpy as np

from clmdetour.corpus.decontaminate import Decontaminator
from clmdetour.errors import ExpectedError, InputError

log = logging.getLogger(__name__)
# runs of two or more spaces, and any tab or no-break space (a lone space is left: same text, far fewer substitutions)
_SPACES = re.compile(r"[ \t\u00a0]{2,}|[\t\u00a0]")
_BLANK_LINES = re.compile(r"\n\s*\n+")


class DecontaminationError(ExpectedError, ValueError):
    """A source lost more than ``corpus.max_drop_fraction`` of its documents."""


#: Characters of a run without spaces above which a short document is counted as a blob (``overlong_word``):
#: French's longest dictionary words have about 25 letters, and URLs rarely exceed 1,000 characters.
MAX_WORD_CHARS = 1000


def clean_text(text: str | None, form: str = "NFC") -> str:
    """Strip a leading byte-order mark, Unicode-normalise, collapse runs of spaces and blank lines, strip."""
    if not text:
        return ""
    text = unicodedata.normalize(form, text.lstrip("\ufeff"))
    text = _SPACES.sub(" ", text)
    text = _BLANK_LINES.sub("\n", text)
    return text.strip()


def doc_hash(text: str) -> str:
    """SHA-256 hex digest of a cleaned document's UTF-8 bytes (deduplication, the split, the held-apart draw)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def in_valid(h: str, fraction: float) -> bool:
    """Whether a document (by its hex hash, digits 0-7) falls in the validation split."""
    return int(h[:8], 16) / 0xFFFFFFFF < fraction


def held_apart(h: str, fraction: float) -> bool:
    """Whether a document (by its text hash) is reserved for building the base model.

    Uses hash digits 8-15, independent of the validation split (digits 0-7).
    """
    return fraction > 0 and int(h[8:16], 16) / 0xFFFFFFFF < fraction


def decontaminator(cfg: dict, eval_texts: dict[str, list[str]] | None) -> Decontaminator:
    """The decontamination index of ``corpus.decontamination`` over ``{task: dev+test texts}``."""
    dcfg = cfg["decontamination"]
    return Decontaminator(eval_texts or {}, dcfg["ngram_words"], dcfg["short_text_min_words"],
                          dcfg["short_text_max_words"])


def _subsample_to_tokens(rng: np.random.Generator, lengths: np.ndarray, tokens: float) -> np.ndarray:
    """Documents drawn without replacement, in a seeded random order, until they hold ``tokens`` tokens.

    The sample is the shortest prefix of a random permutation whose lengths sum
    to at least ``tokens`` (so it overshoots by less than one document), returned
    sorted. Counting documents instead undershoots badly when lengths are skewed:
    a quarter of real-small's scientific articles held 77 % of a quarter of
    their tokens, and phase 1 read 1.24 passes.

    Args:
        rng: the corpus's seeded generator.
        lengths: tokens per document.
        tokens: tokens wanted (>= 0).

    Returns:
        ``[K]`` int64 sorted document indices (all of them when ``tokens`` exceeds the total).
    """
    if tokens <= 0 or len(lengths) == 0:
        return np.zeros(0, dtype=np.int64)
    perm = rng.permutation(len(lengths))
    k = int(np.searchsorted(np.cumsum(lengths[perm]), tokens)) + 1
    return np.sort(perm[:k]).astype(np.int64)


def clean_batch(texts: list[str | None], form: str, words_up_to: int) -> dict[str, list]:
    """Step *clean* on a batch of documents: each text normalised (:func:`clean_text`), with its hash and counts.

    Args:
        texts: raw documents (None: a null text field).
        form: ``corpus.unicode_normalization``.
        words_up_to: count words only up to ``words_up_to + 1`` (``corpus.min_words``: all the length filter
            needs; a long document is then not split into all its words).

    Returns:
        ``{"text", "hash" (hex SHA-256), "n_words", "null", "longest_word"}``, a list each; ``longest_word``
        (characters) is measured on documents with fewer than ``words_up_to`` words (what the length filter
        drops) and is 0 for the others.
    """
    cleaned = [clean_text(t, form) for t in texts]
    n_words = [len(t.split(None, words_up_to)) for t in cleaned]
    words = [t.split() if n < words_up_to else () for t, n in zip(cleaned, n_words)]
    return {"text": cleaned, "hash": [doc_hash(t) for t in cleaned], "n_words": n_words,
            "null": [t is None for t in texts], "longest_word": [max(map(len, w), default=0) for w in words]}


def long_enough(batch: dict[str, list], cfg: dict) -> list[bool]:
    """The length filter (``corpus.min_chars`` characters and ``corpus.min_words`` words) over a cleaned batch."""
    return [len(t) >= cfg["min_chars"] and w >= cfg["min_words"] for t, w in zip(batch["text"], batch["n_words"])]


def deduplicate(batch: dict[str, list], cfg: dict, seen_hashes: set[str]) -> tuple[list[int], dict]:
    """Step *deduplicate*: the documents of a cleaned batch (:func:`clean_batch`) kept for training, after the
    length filter, the held-apart draw (:func:`held_apart`) and exact deduplication (``seen_hashes``, the
    hashes kept so far, is updated).

    Returns:
        ``(kept indices, counts)``, counts ``{"too_short", "null_text", "overlong_word", "held_apart",
        "duplicates", "held_indices"}``: a document the length filter drops is counted as ``null_text``
        (its text field was null), ``overlong_word`` (a run without spaces longer than
        :data:`MAX_WORD_CHARS` characters: a blob, not prose) or ``too_short``.
    """
    keep = long_enough(batch, cfg)
    keep_idx, held_idx, dup, null, overlong = [], [], 0, 0, 0
    nulls = batch.get("null") or itertools.repeat(False)
    longest_words = batch.get("longest_word") or itertools.repeat(0)
    for i, (k, h, is_null, longest) in enumerate(zip(keep, batch["hash"], nulls, longest_words)):
        if not k:  # dropped by the length filter; a null text and a blob of one huge "word" counted as such
            null += bool(is_null)
            overlong += (not is_null) and longest > MAX_WORD_CHARS
            continue
        if held_apart(h, cfg.get("held_apart_fraction", 0)):
            held_idx.append(i)
            continue
        if h in seen_hashes:
            dup += 1
            continue
        seen_hashes.add(h)
        keep_idx.append(i)
    return keep_idx, {"too_short": sum(1 for k in keep if not k) - null - overlong, "null_text": null,
                      "overlong_word": overlong, "held_apart": len(held_idx), "duplicates": dup,
                      "held_indices": held_idx}


#: A source's drawn tokens above this multiple of its share of ``corpus.train_tokens`` are reported.
OVERSHOOT_FACTOR = 1.5


def warn_overshoot(name: str, lengths: np.ndarray, idx: np.ndarray, target: float) -> float:
    """Warn when the documents drawn for a source hold far more tokens than its share of ``corpus.train_tokens``
    (more than :data:`OVERSHOOT_FACTOR` x): the draw stops after the document that reaches the share, so one
    document longer than the share (a 20 MB line of a JSON-lines file) puts all of itself in the stream and
    skews the mix. Returns the ratio drawn / share (tokens)."""
    drawn = float(lengths[idx].sum()) if len(idx) else 0.0
    ratio = drawn / target if target > 0 else 0.0
    if ratio > OVERSHOOT_FACTOR:
        longest = int(lengths[idx].max())
        log.warning("corpus source %s: %s tokens drawn for its share of corpus.train_tokens (%s tokens), %.1fx; its "
                    "longest drawn document alone holds %s tokens. Split or drop such documents (a text file's lines, "
                    "or the source's own records), or raise corpus.train_tokens", name, f"{drawn:,.0f}",
                    f"{target:,.0f}", ratio, f"{longest:,}")
    return ratio


def mix(cfg: dict, lengths: dict[str, np.ndarray], rng: np.random.Generator) -> tuple[list[tuple[str, np.ndarray]], dict]:
    """Step *mix*: each source's documents in the train stream (module doc, "Mixing").

    Args:
        cfg: the validated ``corpus`` section (``sources`` with weights, ``train_tokens``, ``allow_repeat``).
        lengths: ``{source: [N] tokens of each training document}``, in canonical order.
        rng: the corpus's seeded generator (consumed in source order).

    Returns:
        ``([(source, [K] int64 document indices into its lengths)], {source: epochs})``.

    Raises:
        InputError: a source must repeat and ``corpus.allow_repeat`` is false.
    """
    total_w = sum(s["weight"] for s in cfg["sources"])
    parts, epochs_of = [], {}
    for source in cfg["sources"]:
        name = source["name"]
        n = np.asarray(lengths[name], dtype=np.int64)
        avail = int(n.sum())
        if cfg["train_tokens"]:
            target = source["weight"] / total_w * cfg["train_tokens"]
            epochs = target / max(avail, 1)
            cap = source.get("max_epochs")
            if cap is not None and epochs > cap:
                log.warning("corpus source %s: %.2f epochs needed, capped at max_epochs=%s", name, epochs, cap)
                epochs = cap
            if epochs > 1 and not cfg["allow_repeat"]:
                raise InputError(f"corpus source {name!r}: its share of corpus.train_tokens ({target:,.0f} tokens) "
                                 f"needs {epochs:.2f} epochs of its {avail:,} tokens and corpus.allow_repeat is false")
            if epochs > 1:
                log.warning("corpus source %s: repeated %.2f epochs (%s tokens available, %s wanted)", name, epochs,
                            f"{avail:,}", f"{target:,.0f}")
            whole, frac = math.floor(epochs), epochs - math.floor(epochs)
            idx = np.concatenate([np.tile(np.arange(len(n), dtype=np.int64), whole),
                                  _subsample_to_tokens(rng, n, frac * avail)])
            warn_overshoot(name, n, idx, target)
        else:
            epochs, idx = 1.0, np.arange(len(n), dtype=np.int64)
        parts.append((name, idx))
        epochs_of[name] = epochs
    return parts, epochs_of
