"""Word <-> sub-token alignment for token classification (NER).

A document arrives as a list of words with one IOB2 tag per word. The model
sees sub-tokens. Following transformers' ``run_ner.py``, the first sub-token
of each word carries the word's label and the other sub-tokens are ignored
(label ``-100``, PyTorch's ``CrossEntropyLoss`` ``ignore_index``) unless the
``label_all_subtokens`` flag asks for them to be labelled too. Predictions go
back to words through the same first sub-token.

``word_ids`` is the list returned by a fast tokenizer's ``Encoding.word_ids()``
(``None`` for special tokens). :func:`word_ids_from_offsets` computes the same
list from character offsets, so the words are tokenized exactly as in running
text (a byte-level BPE sees ``" hôpital"`` with its leading space, as during
pretraining, which ``is_split_into_words`` would not give it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from clmdetour.modeling.loss import (
    IGNORE_INDEX,  # torch.nn.CrossEntropyLoss default ignore_index
)
from clmdetour.tasks.textio import word_spans  # noqa: F401  (re-exported: the joining rule of word-only rows)


def word_ids_from_offsets(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int | None]:
    """Map each token to the word whose character span contains it.

    Args:
        offsets: per-token ``(start, end)`` character offsets from a fast tokenizer
            (``return_offsets_mapping=True``); ``(0, 0)`` marks special tokens.
        spans: per-word ``(start, end)`` character spans, sorted, non-overlapping.

    Returns:
        One entry per token: the word index, or ``None`` for special tokens and
        tokens made only of the separator (no character inside a word).
    """
    out: list[int | None] = []
    w = 0
    for start, end in offsets:
        if end <= start:
            out.append(None)
            continue
        # Advance to the first word ending after this token's start; byte-level
        # offsets may include the leading space, so test overlap, not containment.
        while w < len(spans) and spans[w][1] <= start:
            w += 1
        if w < len(spans) and spans[w][0] < end:
            out.append(w)
        else:
            out.append(None)
    return out


def align_labels(
    word_ids: Sequence[int | None],
    word_labels: Sequence[int],
    label_all_subtokens: bool = False,
    b_to_i: Mapping[int, int] | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> list[int]:
    """Per-token label ids from per-word label ids (transformers ``run_ner.py`` policy).

    Args:
        word_ids: per-token word index or ``None`` (special tokens), length T.
        word_labels: per-word label id.
        label_all_subtokens: if False (default, the paper's setting), only the
            first sub-token of a word is labelled and the others get ``ignore_index``;
            if True they get the word's label, with ``B-X`` turned into ``I-X``
            through ``b_to_i`` (label id -> label id) when given.
        ignore_index: label of unscored positions (-100, ignored by the loss).

    Returns:
        ``list[int]`` of length T.
    """
    out: list[int] = []
    previous = None
    for wid in word_ids:
        if wid is None:
            out.append(ignore_index)
        elif wid != previous:
            out.append(int(word_labels[wid]))
        elif label_all_subtokens:
            lab = int(word_labels[wid])
            out.append(b_to_i.get(lab, lab) if b_to_i else lab)
        else:
            out.append(ignore_index)
        previous = wid
    return out


def first_subtoken_positions(word_ids: Sequence[int | None]) -> dict[int, int]:
    """Token position of the first sub-token of every word present in ``word_ids``.

    Returns:
        ``{word index: token position}``; words with no token are absent.
    """
    first: dict[int, int] = {}
    for pos, wid in enumerate(word_ids):
        if wid is not None and wid not in first:
            first[wid] = pos
    return first


def word_predictions(word_ids: Sequence[int | None], token_predictions: Sequence, num_words: int, default=None) -> list:
    """Per-word predictions read at each word's first sub-token.

    Args:
        word_ids: per-token word index or ``None``, length T.
        token_predictions: per-token predictions (label ids or tags), length T.
        num_words: number of words of the sequence.
        default: value for a word that has no sub-token (e.g. truncated away).

    Returns:
        ``list`` of length ``num_words``.
    """
    out = [default] * num_words
    for wid, pos in first_subtoken_positions(word_ids).items():
        out[wid] = token_predictions[pos]
    return out
