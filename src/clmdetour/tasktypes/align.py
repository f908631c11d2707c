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

**Words without a sub-token of their own.** Fed as running text, a word can
lie wholly inside a token that starts in an earlier word: a byte-level BPE
that learned ``).`` as one token reads ``(CRP).`` as ``(``, ``CRP``, ``).``,
and the word ``.`` gets no token (:func:`word_ids_from_offsets` gives a token
to the first word it overlaps). Such a word is not truncated: the model reads
its characters, inside the covering token. It is scored as the model's output
says: it takes the tag predicted for the word whose token covers it
(:func:`covering_words`), as a continuation (``B-X`` becomes ``I-X``,
:func:`continuation_tag`), because the model tags that token and the token
holds the word's characters too (the character span a token-classification
pipeline would return). Under seqeval strict IOB2 this keeps an entity whole
when the merged token lies inside it (a SentencePiece tokenizer reading
``mg/kg`` as ``▁mg`` + ``/kg`` leaves ``kg`` without a token: it continues the
dosage), and a gold entity is out of reach only where one of its boundaries
falls inside a token, which no token-level prediction can express
(:func:`entities_out_of_reach`). Predicting ``O`` for such a word would lose,
besides those, every entity the word lies inside although the tokenization
allows it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from clmdetour.modeling.loss import (
    IGNORE_INDEX,  # torch.nn.CrossEntropyLoss default ignore_index
)


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
        default: value for a word that has no sub-token here (outside this window,
            or with no token of its own: see :func:`tags_of_words_without_token`).

    Returns:
        ``list`` of length ``num_words``.
    """
    out = [default] * num_words
    for wid, pos in first_subtoken_positions(word_ids).items():
        out[wid] = token_predictions[pos]
    return out


def covering_words(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]],
                   word_ids: Sequence[int | None]) -> dict[int, int | None]:
    """For every word with no sub-token of its own, the word whose token covers it.

    A word has no token of its own when every token over its characters starts
    in an earlier word (``).`` over the words ``)`` and ``.``); that token
    belongs to the first word it overlaps (:func:`word_ids_from_offsets`).

    Args:
        offsets: per-token ``(start, end)`` character offsets, length T (``(0, 0)``: special token).
        spans: per-word ``(start, end)`` character spans, sorted, non-overlapping, length W.
        word_ids: :func:`word_ids_from_offsets` of ``offsets`` and ``spans``, length T.

    Returns:
        ``{word index: covering word index}`` with one key per word that no
        token is assigned to, in increasing order; the value is ``None`` where
        no token overlaps the word at all (characters a tokenizer dropped).
    """
    own = {w for w in word_ids if w is not None}
    out: dict[int, int | None] = {w: None for w in range(len(spans)) if w not in own}
    if not out:
        return out
    for (start, end), owner in zip(offsets, word_ids):
        if owner is None or end <= start:
            continue
        w = owner + 1  # the words after the owner that this token also overlaps
        while w < len(spans) and spans[w][0] < end:
            if w in out:
                out[w] = owner
            w += 1
    return out


def continuation_tag(tag: str) -> str:
    """``B-X`` -> ``I-X``; ``I-X`` and ``O`` unchanged (the tag of a word that continues its neighbour's)."""
    return "I-" + tag[2:] if tag.startswith("B-") else tag


def tags_of_words_without_token(tags: Sequence[str], covered_by: Mapping[int, int | None]) -> list[str]:
    """Word tags with each word that has no token of its own scored through its covering token.

    Such a word takes :func:`continuation_tag` of the tag of the word whose
    token covers it, or ``O`` when no token covers it (see the module
    docstring for why).

    Args:
        tags: one IOB2 tag per word (predicted or gold), length W.
        covered_by: :func:`covering_words` of the document.

    Returns:
        A new ``list[str]`` of length W; words not in ``covered_by`` keep their tag.
    """
    out = list(tags)
    for w, owner in covered_by.items():
        out[w] = "O" if owner is None else continuation_tag(out[owner])
    return out


def iob2_entities(tags: Sequence[str]) -> set[tuple[int, int, str]]:
    """Entities of a tag sequence as seqeval's strict IOB2 mode reads them.

    ``B-X`` starts an entity of type ``X`` that each following ``I-X`` extends;
    an ``I-X`` that continues no ``X`` entity starts none (as in seqeval's
    strict mode, unlike conlleval).

    Args:
        tags: one tag per word (``O``, ``B-<type>``, ``I-<type>``).

    Returns:
        ``{(first word, last word + 1, type)}``.
    """
    out: set[tuple[int, int, str]] = set()
    start, typ = None, None
    for i, tag in enumerate(list(tags) + ["O"]):
        if typ is not None and tag == "I-" + typ:
            continue
        if typ is not None:
            out.add((start, i, typ))
        start, typ = (i, tag[2:]) if tag.startswith("B-") else (None, None)
    return out


def entities_out_of_reach(gold: Sequence[str], covered_by: Mapping[int, int | None]) -> int:
    """Gold entities that no prediction can match, because a word in or next to them has no token of its own.

    The best any model can do is the gold tag at every word that has a token,
    the other words scored by :func:`tags_of_words_without_token`; an entity
    that these best tags do not reproduce exactly (an entity boundary inside a
    token, e.g. an entity ending at ``)`` read as the token ``).``) is lost
    whatever the model predicts.

    Args:
        gold: one gold IOB2 tag per word, length W.
        covered_by: :func:`covering_words` of the document.

    Returns:
        The number of such entities (0 when ``covered_by`` is empty).
    """
    if not covered_by:
        return 0
    gold_entities = iob2_entities(gold)
    return len(gold_entities - iob2_entities(tags_of_words_without_token(gold, covered_by)))
