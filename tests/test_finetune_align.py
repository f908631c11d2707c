"""Word <-> sub-token alignment on French text (accents, apostrophes, hyphens)."""
import pytest

from clmdetour.modeling.loss import IGNORE_INDEX
from clmdetour.tasktypes.align import align_labels, word_ids_from_offsets, word_predictions
from clmdetour.textio import word_spans

WORDS = ["Patiente", "de", "72", "ans", "hospitalisée", "à", "l'", "hôpital", "Hôtel-Dieu", "pour", "œdème",
         "pulmonaire", "aigu", "(", "OAP", ")", "d'", "origine", "cardiaque", "ischémique", "."]
TAGS = ["B-LIVB", "O", "O", "O", "O", "O", "O", "B-GEOG", "I-GEOG", "O", "B-DISO", "I-DISO", "I-DISO", "O",
        "B-DISO", "O", "O", "O", "O", "O", "O"]


@pytest.fixture(scope="module")
def tokenizer(demo_tokenizer):
    """The session's demo tokenizer (conftest.py)."""
    return demo_tokenizer


def _encode(tokenizer, words):
    text, spans = word_spans(words)
    enc = tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
    return enc, word_ids_from_offsets(enc["offset_mapping"], spans)


def test_each_word_maps_to_exactly_its_own_subtokens(tokenizer):
    enc, wids = _encode(tokenizer, WORDS)
    assert wids[0] is None and wids[-1] is None  # [CLS], [SEP]
    for i, word in enumerate(WORDS):
        pieces = [t for t, w in zip(enc["input_ids"], wids) if w == i]
        assert pieces, f"word {word!r} has no sub-token"
        assert tokenizer.decode(pieces).strip() == word
    assert max(wids.count(i) for i in range(len(WORDS))) > 1, "the test needs multi-token words"


def test_round_trip_words_subtokens_words(tokenizer):
    labels = sorted(set(TAGS))
    ids = [labels.index(t) for t in TAGS]
    _, wids = _encode(tokenizer, WORDS)
    token_labels = align_labels(wids, ids)
    # Exactly one labelled position per word (its first sub-token); the others are ignored.
    assert sum(l != IGNORE_INDEX for l in token_labels) == len(WORDS)
    assert [labels[i] for i in word_predictions(wids, token_labels, len(WORDS))] == TAGS


def test_label_all_subtokens_flag_turns_b_into_i(tokenizer):
    words = ["œdème", "pulmonaire"]
    _, wids = _encode(tokenizer, words)
    out = align_labels(wids, [1, 2], label_all_subtokens=True, b_to_i={1: 2})
    first_word = [l for l, w in zip(out, wids) if w == 0]
    assert first_word[0] == 1 and all(l == 2 for l in first_word[1:]) and len(first_word) > 1
    assert IGNORE_INDEX not in [l for l, w in zip(out, wids) if w is not None]
