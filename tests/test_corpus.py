import copy
import json
import math
import re

import datasets
import numpy as np
import pytest
from helpers import REPO

from clmdetour.config import ConfigError, _deep_merge, load_yaml, validate_config
from clmdetour.corpus.decontaminate import Decontaminator, decide_drops, decontamination_tasks, words
from clmdetour.corpus.pack import attention_mask_of, pack_batch, packing_efficiency, token_dtype
from clmdetour.corpus.prepare import held_apart_texts, prepare_corpus
from clmdetour.corpus.sources import SourceError
from clmdetour.corpus.steps import DecontaminationError, doc_hash, held_apart


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
    out = pack_batch({"input_ids": docs}, seq_len=64, pad_token_id=3, dtype=token_dtype(100))
    assert out["input_ids"].dtype == np.uint16 and out["input_ids"].shape[1] == 64
    mask = attention_mask_of(out["n_tokens"], 64)
    flat = [int(t) for r, m in zip(out["input_ids"], mask) for t, k in zip(r, m) if k]
    assert flat == [t for d in docs for t in d]
    assert (out["input_ids"][mask == 0] == 3).all()  # padding only after a row's real tokens
    assert sum(out["n_tokens"]) == sum(len(d) for d in docs)
    assert packing_efficiency(out["n_tokens"], 64) > (sum(len(d) for d in docs) / (64 * len(out["input_ids"]))) - 1e-9


def test_null_texts_and_one_word_blobs_are_counted_as_what_they_are(tmp_path, tiny_model_dir, demo_texts):
    """A null text and a 20 MB single-word line were counted as "too short"; each has its own count now,
    and what is kept does not change."""
    from clmdetour.corpus.steps import MAX_WORD_CHARS

    lines = [json.dumps({"text": t}, ensure_ascii=False) for t in demo_texts[:60]]
    lines += [json.dumps({"text": None}), json.dumps({"text": "x" * 20_000_000}),
              json.dumps({"text": "court"}), json.dumps({"text": "y" * (MAX_WORD_CHARS + 1) + " z"})]
    src = tmp_path / "a.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = corpus_cfg(sources=[{"name": "a", "format": "jsonl", "path": str(src), "weight": 1.0, "licence": "x",
                               "text_field": "text"}], decontaminate_against=[])
    s = prepare_corpus(cfg, str(tiny_model_dir), str(tmp_path / "corpus"))["sources"]["a"]
    assert (s["dropped_null_text"], s["dropped_overlong_word"], s["dropped_too_short"]) == (1, 2, 1)
    assert s["documents_read"] == 64 and s["documents_train"] + s["documents_valid"] == 60


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


def test_held_apart_text_of_the_base_model_is_decontaminated(tmp_path, tiny_model_dir, demo_texts):
    # Documents held apart for building the base model are trained on too: the same rule drops them,
    # held_apart_texts (rule held_apart_corpus) removes them and the corpus manifest counts them.
    fraction = 0.3
    i, planted = next((i, t + " " + PLANTED) for i, t in enumerate(demo_texts[:300])
                      if held_apart(doc_hash(t + " " + PLANTED), fraction))  # a document held apart once planted
    texts = list(demo_texts[:300])
    texts[i] = planted
    held = [t for t in texts if held_apart(doc_hash(t), fraction)]
    assert len(held) > 20 and planted in held
    src = write_jsonl(tmp_path / "a.jsonl", texts)
    cfg = corpus_cfg(sources=[{"name": "a", "format": "jsonl", "path": str(src), "weight": 1.0, "licence": "x",
                               "text_field": "text"}], held_apart_fraction=fraction)
    eval_texts = {"t": ["Résumé : " + PLANTED]}
    kept, report = held_apart_texts(cfg, eval_texts=eval_texts)
    assert planted not in kept and len(kept) == len(held) - 1
    assert report == {"a": {"documents": len(held), "decontaminated": 1, "decontaminated_per_task": {"t": 1}}}
    assert held_apart_texts(cfg)[0] == held  # nothing to decontaminate against
    m = prepare_corpus(cfg, str(tiny_model_dir), str(tmp_path / "corpus"), eval_texts=eval_texts)
    s = m["sources"]["a"]
    assert s["held_apart_for_base_model"] == len(held) and s["decontaminated"] == 0
    assert s["held_apart_decontaminated"] == 1 and s["held_apart_decontaminated_per_task"] == {"t": 1}


def test_decontamination_tasks_default_to_every_available_task_and_warn_about_the_rest():
    cfg = validate_config(load_yaml(REPO / "config/config.yaml"))
    assert cfg["corpus"]["decontaminate_against"] == "all"
    tasks, warning = decontamination_tasks(cfg, left_out={"meddialog": "files missing"})
    assert tasks == [t for t in cfg["tasks"] if t != "meddialog"] and len(tasks) == 7
    assert "meddialog" in warning and "files are missing" in warning and "emea" not in warning
    assert decontamination_tasks(cfg) == (list(cfg["tasks"]), "")
    cfg["corpus"]["decontaminate_against"] = ["emea"]  # an explicit list wins, and the rest is named
    tasks, warning = decontamination_tasks(cfg, left_out={"meddialog": "files missing"})
    assert tasks == ["emea"] and warning.startswith("7 configured task(s)") and "diamed" in warning
    # the schema takes all or a list of tasks, nothing else
    for bad in ("every", ["nope"]):
        over = _deep_merge(load_yaml(REPO / "config/config.yaml"), {"corpus": {"decontaminate_against": bad}})
        with pytest.raises(Exception, match="corpus.decontaminate_against"):
            validate_config(over)


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
        ({"path": str(empty)}, r"empty\.jsonl is empty \(no line with text\)"),
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


def test_phase1_reads_the_corpus_once_and_the_decay_continues_into_the_next_pass(tmp_path, tiny_model_dir, demo_texts):
    # corpus.train_tokens = phase 1's budget: the stream is one pass over the weighted mix, a source
    # larger than its share subsampled without replacement, a smaller one repeated, epochs recorded per source.
    from clmdetour.training.data import phase_stream

    a = write_jsonl(tmp_path / "a.jsonl", demo_texts[:300])
    b = write_jsonl(tmp_path / "b.jsonl", demo_texts[300:305])
    srcs = [{"name": "a", "format": "jsonl", "path": str(a), "weight": 3.0, "licence": "x"},
            {"name": "b", "format": "jsonl", "path": str(b), "weight": 1.0, "licence": "x"}]
    phase1_tokens, gb, seq_len = 12_000, 4, 64
    m = prepare_corpus(corpus_cfg(sources=srcs, train_tokens=phase1_tokens, seq_len=seq_len), str(tiny_model_dir),
                       str(tmp_path / "c"))
    assert m["sources"]["a"]["epochs"] < 1.0 < m["sources"]["b"]["epochs"]
    assert m["train"]["tokens"] >= phase1_tokens - 1  # token-targeted sampling: the stream holds phase 1's budget
    rows = datasets.load_from_disk(str(tmp_path / "c/train"))
    phase1 = phase_stream(rows, phase1_tokens, seq_len, gb, what="phase1")
    read = [phase1._row_index(i) for i in range(len(phase1))]
    # one pass, up to the rounding to whole global batches and the packing's padding rows
    tolerance = gb + math.ceil((1 - m["train"]["packing_efficiency"]) * len(rows)) + 1
    assert abs(len(phase1) - len(rows)) <= tolerance, (len(phase1), len(rows))
    first_pass = [r for i, r in enumerate(read) if phase1.offset + i < len(rows)]
    assert len(set(first_pass)) == len(first_pass) >= len(rows) - tolerance  # every row once
    # the decay starts where phase 1 ended: the rest of the first pass, then a reshuffled second pass
    decay = phase_stream(rows, 6_000, seq_len, gb, offset_tokens=len(phase1) * seq_len, what="decay")
    assert decay.offset == len(phase1) and decay.epochs > 1.0
    second = [decay._row_index(i) for i in range(len(decay)) if decay.offset + i >= len(rows)]
    assert len(set(second)) == len(second) and second != sorted(second)
    # real (non-padding) tokens: the rows' non-pad ids (a document never holds the pad id), the same rows
    # the stream reads, wrap included
    from transformers import AutoTokenizer

    pad = AutoTokenizer.from_pretrained(str(tiny_model_dir)).pad_token_id
    # stored as the smallest type of the tiny vocabulary, a fixed-length list (issue 40: compact storage)
    assert str(rows.data.schema.field("input_ids").type) == "fixed_size_list<item: uint16>[64]"
    ids = np.asarray(rows.with_format("numpy")["input_ids"])
    mask_sum = [int(n) for n in (ids != pad).sum(axis=1)]
    assert mask_sum == [int(n) for n in rows["n_tokens"]]  # the stored counts are the real tokens'
    assert "attention_mask" not in rows.column_names
    assert decay.real_tokens() == sum(mask_sum[decay._row_index(i)] for i in range(len(decay)))
    assert phase1.real_tokens(5) == sum(mask_sum[:5]) < 5 * seq_len or min(mask_sum[:5]) == seq_len
    assert phase1.real_tokens(0) == 0 and decay.real_tokens() <= len(decay) * seq_len
    # phase 1 asking for more than the stream plus one global batch is refused when repeats are off
    with pytest.raises(ValueError, match="allow_repeat is false"):
        phase_stream(rows, 2 * phase1_tokens, seq_len, gb, allow_repeat=False, what="phase1")


def test_subsampling_targets_tokens_not_documents():
    # skewed lengths (a few long articles): a document-count sample of a quarter would hold far less than
    # a quarter of the tokens; the token-targeted sample overshoots by less than one document
    from clmdetour.corpus.steps import _subsample_to_tokens

    lengths = np.array([5_000] * 10 + [50] * 990)
    for seed in range(5):
        idx = _subsample_to_tokens(np.random.default_rng(seed), lengths, 0.25 * lengths.sum())
        got = lengths[idx].sum()
        assert 0.25 * lengths.sum() <= got < 0.25 * lengths.sum() + lengths.max()
        assert idx.tolist() == sorted(set(idx.tolist()))  # without replacement
    assert _subsample_to_tokens(np.random.default_rng(0), lengths, 0).tolist() == []
    assert len(_subsample_to_tokens(np.random.default_rng(0), lengths, 10 * lengths.sum())) == len(lengths)


def test_planning_refuses_a_phase1_longer_than_the_corpus_naming_both_keys():
    cfg = _deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml"))
    validate_config(copy.deepcopy(cfg))  # the shipped demo: train_tokens = phase 1's budget
    # one global batch (16 x 128 tokens) of slack is allowed: phases are rounded up to whole batches
    ok = _deep_merge(cfg, {"pretraining": {"phase1": {"tokens": 100_000 + 16 * 128}}})
    validate_config(ok)
    for over, key in [({"pretraining": {"phase1": {"tokens": 100_000 + 16 * 128 + 1}}}, "pretraining.phase1.tokens"),
                      ({"pretraining": {"variants": {"clm-detour": {"phase1": {"tokens": 300_000}}}}},
                       "pretraining.variants.clm-detour.phase1.tokens")]:
        with pytest.raises(ConfigError, match=re.escape(key) + r" .* corpus\.train_tokens \(100,000\)"):
            validate_config(_deep_merge(cfg, over))


def test_a_corpus_with_no_validation_document_stops_unless_allowed(tmp_path, tiny_model_dir, demo_texts):
    """Too few documents for a held-out split: an error saying how many were left and what to set; with
    corpus.allow_train_as_valid the run goes on and the manifest says the validation text is training text."""
    src = write_jsonl(tmp_path / "few.jsonl", demo_texts[:3])
    srcs = [{"name": "few", "format": "jsonl", "path": str(src), "weight": 1.0, "licence": "x"}]
    with pytest.raises(ValueError, match=r"no document fell in the validation split \(3 training documents left.*"
                       r"corpus\.valid_fraction 0\.0001.*corpus\.allow_train_as_valid: true") as e:
        prepare_corpus(corpus_cfg(sources=srcs, valid_fraction=0.0001), str(tiny_model_dir), str(tmp_path / "out"))
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()
    m = prepare_corpus(corpus_cfg(sources=srcs, valid_fraction=0.0001, allow_train_as_valid=True),
                       str(tiny_model_dir), str(tmp_path / "out"))
    assert m["valid"]["held_out"] is False and m["valid"]["documents"] == 3
    held = prepare_corpus(corpus_cfg(sources=[dict(srcs[0], path=str(write_jsonl(tmp_path / "many.jsonl", demo_texts[:400])))]),
                          str(tiny_model_dir), str(tmp_path / "out2"))
    assert held["valid"]["held_out"] is True


def test_the_packed_token_ids_do_not_depend_on_num_proc(tmp_path, tiny_model_dir, demo_texts):
    """Issue 40 item 6: the manifest's token hashes (the rows a phase reads) are the same for 1 and 2
    worker processes; the stored ids are uint16 for the tiny vocabulary."""
    src = write_jsonl(tmp_path / "a.jsonl", demo_texts[:200])
    sources = [{"name": "a", "format": "jsonl", "path": str(src), "weight": 1.0, "licence": "x"}]
    hashes = []
    for procs in (1, 2):
        m = prepare_corpus(corpus_cfg(sources=sources), str(tiny_model_dir), str(tmp_path / f"c{procs}"), num_proc=procs)
        hashes.append((m["hashes"]["train_token_ids"], m["hashes"]["valid_token_ids"], m["train"]["sequences"]))
        assert m["storage"]["token_dtype"] == "uint16"
    assert hashes[0] == hashes[1]
