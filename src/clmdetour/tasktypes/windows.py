"""Windows over long NER documents, so that every word is scored.

A document longer than the model's limit (512 tokens for DrBERT and
CamemBERT-bio, the task's ``max_length`` otherwise) is split into windows of
whole words. Each word is *scored* in exactly one window (its "core"); a
window may also start with up to ``context_tokens`` tokens of the preceding
words as unlabelled left context. Predictions are merged back per document,
so an entity past the limit, or one crossing a window boundary, is predicted
and scored like any other. A single word longer than a window is truncated
to its first sub-tokens: its first sub-token (the one labelled and read) is
always kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """Words ``[context_start, start)`` are unlabelled context, ``[start, end)`` are scored."""

    context_start: int
    start: int
    end: int


def plan_windows(token_counts: Sequence[int], budget: int, context_tokens: int = 0) -> list[Window]:
    """Split words into windows whose tokens fit ``budget``; the cores partition the words.

    Args:
        token_counts: sub-tokens per word (0 for a word the tokenizer drops).
        budget: tokens per window, excluding special tokens (> 0).
        context_tokens: at most this many tokens of left context per window
            (whole words only; dropped where the next word needs the room).

    Returns:
        Windows in order; ``[w.start, w.end)`` ranges are disjoint and cover
        ``range(len(token_counts))`` (an empty document gives no window).

    Raises:
        ValueError: ``budget`` < 1 or ``context_tokens`` < 0.
    """
    if budget < 1:
        raise ValueError(f"window budget must be at least 1 token, got {budget}")
    if context_tokens < 0:
        raise ValueError(f"context_tokens must be >= 0, got {context_tokens}")
    n = len(token_counts)
    windows: list[Window] = []
    s = 0
    while s < n:
        c, ctx = s, 0
        while c > 0 and ctx + token_counts[c - 1] <= min(context_tokens, budget - 1):
            c -= 1
            ctx += token_counts[c]
        e, used = s, 0
        while e < n and used + token_counts[e] <= budget - ctx:
            used += token_counts[e]
            e += 1
        if e == s:  # the next word does not fit beside the context: drop it, then truncate if needed
            c, e, used = s, s, 0
            while e < n and used + token_counts[e] <= budget:
                used += token_counts[e]
                e += 1
            e = max(e, s + 1)
        windows.append(Window(c, s, e))
        s = e
    return windows


def _first_positions(word_ids: Sequence[int | None], num_words: int) -> list[int | None]:
    first: list[int | None] = [None] * num_words
    for pos, wid in enumerate(word_ids):
        if wid is not None and first[wid] is None:
            first[wid] = pos
    return first


def _token_bounds(word_ids: Sequence[int | None], num_words: int) -> list[tuple[int, int]]:
    """Per word, the token range from its first token to the next word's first token."""
    first = _first_positions(word_ids, num_words)
    bounds: list[tuple[int, int]] = [(0, 0)] * num_words
    nxt = len(word_ids)
    for w in range(num_words - 1, -1, -1):
        if first[w] is None:
            bounds[w] = (nxt, nxt)
        else:
            bounds[w] = (first[w], nxt)
            nxt = first[w]
    return bounds


def word_token_counts(word_ids: Sequence[int | None], num_words: int) -> list[int]:
    """Tokens per word, counted from its first token up to the next word's first token.

    Tokens that belong to no word (e.g. a lone separator) count with the word
    before them, so that summing counts gives exactly the tokens a window holds.

    Args:
        word_ids: per-token word index or ``None``, length T (no special tokens).
        num_words: number of words of the document.

    Returns:
        ``list[int]`` of length ``num_words`` (0 for a word with no token).
    """
    return [b - a for a, b in _token_bounds(word_ids, num_words)]


def window_inputs(
    token_ids: Sequence[int],
    word_ids: Sequence[int | None],
    num_words: int,
    window: Window,
    budget: int,
    prefix_ids: Sequence[int] = (),
    suffix_ids: Sequence[int] = (),
) -> tuple[list[int], list[int | None]]:
    """Token ids and word ids of one window, with special tokens around it.

    Args:
        token_ids: the whole document's token ids, without special tokens, length T.
        word_ids: per-token word index (``None`` for separator-only tokens), length T.
        num_words: number of words of the document.
        window: from :func:`plan_windows` over :func:`word_token_counts`.
        budget: tokens per window excluding specials (the same as for planning).
        prefix_ids, suffix_ids: special tokens (e.g. ``[CLS]`` / ``[SEP]``, ``<s>`` / ``</s>``).

    Returns:
        ``(input_ids, window_word_ids)``, each of length at most
        ``budget + len(prefix_ids) + len(suffix_ids)``; context words and
        special tokens have word id ``None`` (unlabelled, not read back).
    """
    bounds = _token_bounds(word_ids, num_words)
    if window.end <= window.context_start:
        lo = hi = 0
    else:
        lo, hi = bounds[window.context_start][0], bounds[window.end - 1][1]
    hi = min(hi, lo + budget)  # only a single over-long word is ever cut here
    ids = list(prefix_ids) + list(token_ids[lo:hi]) + list(suffix_ids)
    wids: list[int | None] = [None] * len(prefix_ids)
    wids += [w if w is not None and window.start <= w < window.end else None for w in word_ids[lo:hi]]
    wids += [None] * len(suffix_ids)
    return ids, wids
