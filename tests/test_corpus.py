import json

import datasets
import numpy as np
import pytest

from clmdetour.config import _deep_merge, load_yaml, validate_config
from clmdetour.corpus.decontaminate import Decontaminator, decide_drops, words
from clmdetour.corpus.pack import pack_batch, packing_efficiency
from clmdetour.corpus.prepare import DecontaminationError, prepare_corpus
from clmdetour.corpus.sources import SourceError
from conftest import REPO


def corpus_cfg(**over):
    cfg = _deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml"))
    cfg = validate_config(cfg)["corpus"]
    cfg.update(num_proc=1, seq_len=64, train_tokens=None, valid_fraction=0.05)
    cfg.update(over)
    return cfg


def write_jsonl(path, texts):
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    return path


PLANTED = ("Une tumeur neuroendocrine rare du thymus a été découverte fortuitement chez cette patiente "
           "asymptomatique lors du bilan préopératoire")


def test_words_normalise_case_and_compatibility_forms():
    assert words("Le ﬁbrome de l'UTÉRUS") == ["le", "fibrome", "de", "l", "utérus"]


def test_decontamination_drops_planted_documents_only(demo_texts):
    corpus = list(demo_texts[:200])
    long_eval = ("Le patient présentait une douleur abdominale intense irradiant vers le dos depuis trois jours "
                 "avec des vomissements répétés et une fièvre modérée")
    title = "Lymphome gastrique révélé par une hémorragie digestive"
    boiler = "Conserver ce médicament hors de la vue et de la portée des enfants dans son emballage d'origine"
    # the boilerplate sentence is in 15 pretraining documents and in one evaluation text
    corpus = [t + " " + boiler if i < 15 else t for i, t in enumerate(corpus)]
    planted = {20: corpus[20] + " " + long_eval.upper(), 40: title + ". " + corpus[40]}
    corpus[20], corpus[40] = planted[20], planted[40]
    decon = Decontaminator({"emea": [long_eval, "Notice : " + boiler], "medline": [title]})
    drop, tasks, boilerplate = decide_drops([decon.matches(t) for t in corpus], decon, boilerplate_max_documents=10)
    assert [i for i, d in enumerate(drop) if d] == [20, 40]
    assert tasks[20] == ["emea"] and tasks[40] == ["medline"]
    assert boilerplate  # the shared sentence was recognised and ignored


def test_pack_loses_and_duplicates_nothing():
    rng = np.random.default_rng(0)
    docs = [rng.integers(5, 100, size=n).tolist() for n in rng.integers(1, 150, size=57)]
    out = pack_batch({"input_ids": docs}, seq_len=64, pad_token_id=3)
    assert all(len(r) == 64 for r in out["input_ids"])
    flat = [t for r, m in zip(out["input_ids"], out["attention_mask"]) for t, k in zip(r, m) if k]
    assert flat == [t for d in docs for t in d]
    assert sum(out["n_tokens"]) == sum(len(d) for d in docs)
    assert packing_efficiency(out["n_tokens"], 64) > (sum(len(d) for d in docs) / (64 * len(out["input_ids"]))) - 1e-9


def test_prepare_corpus_end_to_end(tmp_path, tiny_model_dir, demo_texts):
    texts = list(demo_texts[:300])
    texts[5] += " " + PLANTED
    texts[6] = PLANTED.upper() + " " + texts[6]
    src = write_jsonl(tmp_path / "a.jsonl", texts + texts[100:120] + ["", "court"])
    cfg = corpus_cfg(sources=[{"name": "a", "format": "jsonl", "path": str(src), "weight": 1.0, "licence": "CC-BY-4.0",
                               "text_field": "text"}], decontaminate_against=["t"])
    m = prepare_corpus(cfg, str(tiny_model_dir), str(tmp_path / "corpus"), eval_texts={"t": ["Résumé : " + PLANTED]})
    s = m["sources"]["a"]
    assert s["documents_read"] == 322 and s["duplicates_removed"] == 20 and s["dropped_too_short"] == 2
    assert s["decontaminated"] == 2 and s["decontaminated_per_task"] == {"t": 2}
    assert s["documents_train"] + s["documents_valid"] == 298 and s["licence"] == "CC-BY-4.0"
    train = datasets.load_from_disk(str(tmp_path / "corpus/train"))
    assert all(len(r) == 64 for r in train["input_ids"])
    assert m["train"]["packing_efficiency"] > 0.99
    assert m["train"]["tokens"] == s["tokens_train"]
    # deterministic: a second run gives the same token hashes
    m2 = prepare_corpus(cfg, str(tiny_model_dir), str(tmp_path / "corpus2"), eval_texts={"t": ["Résumé : " + PLANTED]})
    assert m2["hashes"] == m["hashes"]


def test_weighted_mix_repeats_small_source_and_records_epochs(tmp_path, tiny_model_dir, demo_texts):
    a = write_jsonl(tmp_path / "a.jsonl", demo_texts[:200])
    b = write_jsonl(tmp_path / "b.jsonl", demo_texts[200:220])
    srcs = [{"name": "a", "format": "jsonl", "path": str(a), "weight": 1.0, "licence": "x"},
            {"name": "b", "format": "jsonl", "path": str(b), "weight": 1.0, "licence": "x"}]
    m = prepare_corpus(corpus_cfg(sources=srcs, train_tokens=20_000), str(tiny_model_dir), str(tmp_path / "c"))
    assert m["sources"]["b"]["epochs"] > 1.0 > m["sources"]["a"]["epochs"]
    assert abs(m["sources"]["a"]["tokens_train"] - m["sources"]["b"]["tokens_train"]) < 0.2 * 10_000
    with pytest.raises(ValueError, match="allow_repeat is false"):
        prepare_corpus(corpus_cfg(sources=srcs, train_tokens=20_000, allow_repeat=False), str(tiny_model_dir),
                       str(tmp_path / "d"))
    assert not (tmp_path / "d").exists()


def test_bad_sources_give_one_line_errors_and_no_output(tmp_path, tiny_model_dir):
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    nofield = write_jsonl(tmp_path / "nofield.jsonl", ["x"])
    cases = [
        ({"path": str(tmp_path / "missing.jsonl")}, "does not exist"),
        ({"path": str(bad)}, "line 2 is not valid UTF-8"),
        ({"path": str(empty)}, "holds no documents|cannot read"),
        ({"path": str(nofield), "text_field": "body"}, "no field 'body'"),
    ]
    for over, msg in cases:
        src = dict({"name": "s", "format": "jsonl", "weight": 1.0, "licence": "x", "text_field": "text"}, **over)
        with pytest.raises(SourceError, match=msg) as e:
            prepare_corpus(corpus_cfg(sources=[src]), str(tiny_model_dir), str(tmp_path / "out"))
        assert "\n" not in str(e.value) and "'s'" in str(e.value)
        assert not (tmp_path / "out").exists()


def test_decontamination_stops_a_source_that_loses_too_much(tmp_path, tiny_model_dir, demo_texts):
    src = write_jsonl(tmp_path / "a.jsonl", demo_texts[:50])
    cfg = corpus_cfg(sources=[{"name": "a", "format": "jsonl", "path": str(src), "weight": 1.0, "licence": "x"}],
                     max_drop_fraction=0.05)
    with pytest.raises(DecontaminationError, match="max_drop_fraction"):
        prepare_corpus(cfg, str(tiny_model_dir), str(tmp_path / "out"), eval_texts={"t": demo_texts[:10]})
