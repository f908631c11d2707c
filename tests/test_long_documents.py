"""Bounded memory for any document (issue 65 item 4): a document longer than a tokenizer call's budget is
tokenised in pieces cut at whitespace, with the same ids as the whole document, and the memory of the token job
does not grow with the encodings of the whole document."""

from __future__ import annotations

import numpy as np
import pytest

from clmdetour.corpus.shards import _encoded, load_encoder, pieces, special_tokens_around


def test_pieces_cut_before_whitespace_and_rejoin():
    text = "alpha beta  gamma\ndelta " * 40
    for size in (7, 16, 100):
        parts = pieces(text, size)
        assert "".join(parts) == text and all(len(p) <= size for p in parts)
        assert all(p[0].isspace() for p in parts[1:])  # every cut falls before a whitespace character
    assert pieces("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]  # no whitespace: cut at the size
    assert pieces("short", 10) == ["short"]


@pytest.mark.parametrize("size", [40, 333])
def test_a_long_document_gets_the_ids_of_the_whole_document(tiny_model_dir, demo_texts, size):
    encode, _ = load_encoder(tiny_model_dir)
    plain, _ = load_encoder(tiny_model_dir, add_special_tokens=False)
    head, tail = special_tokens_around(encode, plain)
    assert head and tail  # ModernBERT's [CLS] ... [SEP]
    long_doc = " ".join(demo_texts[:60])
    assert len(long_doc) > 20 * size
    texts = ["court.", long_doc, "aussi court.", long_doc[: size // 2]]
    got = list(_encoded(encode, texts, plain, size=size))
    want = encode(texts)
    assert [list(map(int, g)) for g in got] == want
    assert isinstance(got[1], np.ndarray) and got[1][0] == head[0] and got[1][-1] == tail[-1]
