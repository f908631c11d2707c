"""The named steps of the corpus step (clmdetour.corpus.steps, merge.valid_mask), each alone."""
import numpy as np
import pytest

from clmdetour.corpus.merge import valid_mask
from clmdetour.corpus.steps import deduplicate, doc_hash, in_valid, mix
from clmdetour.errors import InputError

CFG = {"min_chars": 10, "min_words": 3, "held_apart_fraction": 0.0}


def _ds(texts):
    return {"text": texts, "hash": [doc_hash(t) for t in texts], "n_words": [len(t.split()) for t in texts]}


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


def test_the_array_split_by_hash_is_the_per_document_rule_and_stable():
    hex_hashes = [doc_hash(f"doc {i}") for i in range(400)]
    digests = np.array([bytes.fromhex(h) for h in hex_hashes], dtype="S32")
    mask = valid_mask(digests, 0.1)
    assert mask.tolist() == [in_valid(h, 0.1) for h in hex_hashes]
    assert 20 < mask.sum() < 60
    assert valid_mask(digests[:50], 0.1).tolist() == mask[:50].tolist()  # a document's side never depends on the others
    assert not valid_mask(digests, 0.0).any() and valid_mask(digests, 1.0).all()
    assert valid_mask(np.zeros(0, dtype="S32"), 0.1).shape == (0,)


def test_mix_gives_each_source_its_weighted_share_and_refuses_repeats_when_told():
    lengths = {"big": np.full(100, 10), "small": np.full(10, 10)}  # 1,000 and 100 tokens
    cfg = {"sources": [{"name": "big", "weight": 3}, {"name": "small", "weight": 1}], "train_tokens": 400,
           "allow_repeat": True}
    parts, epochs = mix(cfg, lengths, np.random.default_rng(0))
    assert epochs == {"big": 0.3, "small": 1.0}
    tokens = {name: int(lengths[name][idx].sum()) for name, idx in parts}
    assert tokens == {"big": 300, "small": 100}
    parts, epochs = mix(dict(cfg, train_tokens=800), lengths, np.random.default_rng(0))
    assert epochs["small"] == 2.0 and sorted(parts[1][1].tolist()) == sorted(list(range(10)) * 2)
    with pytest.raises(InputError, match="'small'.*allow_repeat is false"):
        mix(dict(cfg, train_tokens=800, allow_repeat=False), lengths, np.random.default_rng(0))
    parts, epochs = mix(dict(cfg, train_tokens=None), lengths, np.random.default_rng(0))
    assert epochs == {"big": 1.0, "small": 1.0} and [len(idx) for _, idx in parts] == [100, 10]


def test_one_document_longer_than_the_share_is_reported(caplog):
    """A JSON-lines file with one 20 MB line: the draw stops after the document that reaches the share, so the
    whole giant document enters the stream (76x the budget, seen in review); the mix says so, naming the source."""
    lengths = {"leaflets": np.concatenate([np.full(50, 100), [7_600_000]])}
    cfg = {"sources": [{"name": "leaflets", "weight": 1}], "train_tokens": 1_000_000, "allow_repeat": True}
    seen_huge = seen_small = False
    for seed in range(20):  # whether the draw reaches the giant document depends on the shuffle
        caplog.clear()
        with caplog.at_level("WARNING", logger="clmdetour"):
            parts, _ = mix(cfg, lengths, np.random.default_rng(seed))
        drawn = int(lengths["leaflets"][parts[0][1]].sum())
        warned = any("corpus source leaflets" in r.getMessage() and "7,600,000 tokens" in r.getMessage()
                     for r in caplog.records)
        assert warned == (drawn > 1.5 * 1_000_000), (seed, drawn)
        seen_huge |= warned
        seen_small |= not warned
    assert seen_huge  # the case of the review happens and is reported
    # well-behaved lengths never warn
    caplog.clear()
    with caplog.at_level("WARNING", logger="clmdetour"):
        mix({"sources": [{"name": "a", "weight": 1}], "train_tokens": 500, "allow_repeat": True},
            {"a": np.full(100, 10)}, np.random.default_rng(0))
    assert not caplog.records
