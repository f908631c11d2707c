"""The named steps of prepare_corpus, each alone."""
import datasets
import numpy as np
import pytest

from clmdetour.corpus.prepare import _doc_hash, deduplicate, mix, split_by_hash
from clmdetour.errors import InputError

CFG = {"min_chars": 10, "min_words": 3, "held_apart_fraction": 0.0}


def _ds(texts):
    return datasets.Dataset.from_dict({"text": texts, "hash": [_doc_hash(t) for t in texts],
                                       "n_words": [len(t.split()) for t in texts]})


def test_deduplicate_drops_short_documents_and_duplicates_across_sources():
    seen: set[str] = set()
    a = _ds(["un document assez long", "court", "un document assez long", "un autre document assez long"])
    keep, counts = deduplicate(a, CFG, seen)
    assert keep == [0, 3] and counts["too_short"] == 1 and counts["duplicates"] == 1 and counts["held_apart"] == 0
    b = _ds(["un autre document assez long", "un troisième document assez long"])  # a later source
    keep, counts = deduplicate(b, CFG, seen)
    assert keep == [1] and counts["duplicates"] == 1


def test_deduplicate_holds_apart_by_hash_before_deduplication():
    texts = [f"document numéro {i} du corpus" for i in range(200)]
    keep, counts = deduplicate(_ds(texts), dict(CFG, held_apart_fraction=0.25), set())
    held = counts["held_indices"]
    assert 30 < len(held) < 70 and not set(held) & set(keep) and len(keep) + len(held) == 200
    keep2, counts2 = deduplicate(_ds(texts), dict(CFG, held_apart_fraction=0.25), set())
    assert (keep2, counts2["held_indices"]) == (keep, held)  # a pure function of the text


def test_split_by_hash_is_stable_and_keeps_a_source_too_small_for_valid():
    hashes = [_doc_hash(f"doc {i}") for i in range(400)]
    train, valid = split_by_hash(hashes, 0.1)
    assert 20 < len(valid) < 60 and sorted(train + valid) == list(range(400))
    assert split_by_hash(hashes[:50], 0.1)[1] == [i for i in valid if i < 50]
    assert split_by_hash(hashes, 0.0) == (list(range(400)), [])
    assert split_by_hash(hashes[:3], 1.0) == ([0, 1, 2], [])  # every document in valid: all go to train


def test_mix_gives_each_source_its_weighted_share_and_refuses_repeats_when_told():
    big = datasets.Dataset.from_dict({"n": [10] * 100})    # 1,000 tokens
    small = datasets.Dataset.from_dict({"n": [10] * 10})   # 100 tokens
    cfg = {"sources": [{"name": "big", "weight": 3}, {"name": "small", "weight": 1}], "train_tokens": 400,
           "allow_repeat": True}
    parts, epochs = mix(cfg, {"big": big, "small": small}, np.random.default_rng(0))
    assert epochs == {"big": 0.3, "small": 1.0}
    tokens = {name: sum(ds["n"][i] for i in idx) for name, ds, idx in parts}
    assert tokens == {"big": 300, "small": 100}
    parts, epochs = mix(dict(cfg, train_tokens=800), {"big": big, "small": small}, np.random.default_rng(0))
    assert epochs["small"] == 2.0 and sorted(parts[1][2]) == sorted(list(range(10)) * 2)
    with pytest.raises(InputError, match="'small'.*allow_repeat is false"):
        mix(dict(cfg, train_tokens=800, allow_repeat=False), {"big": big, "small": small}, np.random.default_rng(0))
    parts, epochs = mix(dict(cfg, train_tokens=None), {"big": big, "small": small}, np.random.default_rng(0))
    assert epochs == {"big": 1.0, "small": 1.0} and [len(idx) for _, _, idx in parts] == [100, 10]
