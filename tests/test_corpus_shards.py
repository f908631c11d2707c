"""The sharded corpus step (issue 40): planning, byte ranges, shard jobs and the merge."""
import itertools
import json
import random

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_corpus import corpus_cfg, write_jsonl

from clmdetour.corpus.merge import merge_corpus
from clmdetour.corpus.pack import attention_mask_of
from clmdetour.corpus.prepare import prepare_corpus
from clmdetour.corpus.shards import plan_shards, shard_lines, shard_text, shard_tokens
from clmdetour.corpus.sources import SourceError, load_source


def _source(path, name="a", fmt="jsonl"):
    return {"name": name, "format": fmt, "path": str(path), "weight": 1.0, "licence": "x", "text_field": "text"}


def test_byte_ranges_cover_every_line_once_whatever_the_cut_points(tmp_path):
    rng = random.Random(0)
    lines = [("x" * rng.randint(0, 300)).encode() + b"\n" for _ in range(500)] + [b"last line without newline"]
    f = tmp_path / "f.txt"
    f.write_bytes(b"".join(lines))
    size = f.stat().st_size
    for n in (1, 2, 7, 64, 2000):
        cuts = [k * size // n for k in range(n + 1)]
        blocks = [shard_lines(f, a, b)[0] for a, b in itertools.pairwise(cuts)]
        assert b"".join(blocks) == f.read_bytes(), n
        assert all(b == b"" or b.endswith((b"\n", b"newline")) for b in blocks)


def test_planning_cuts_line_files_by_size_and_keeps_one_shard_per_csv_file(tmp_path):
    big = write_jsonl(tmp_path / "big.jsonl", ["mot " * 60] * 100)  # ~25 kB
    small = write_jsonl(tmp_path / "small.jsonl", ["court"])
    csv = tmp_path / "t.csv"
    csv.write_text("text\n" + "\n".join(["une ligne"] * 2000))
    cfg = corpus_cfg(sources=[_source(big), _source(small, "b"), _source(csv, "c", "csv")], shard_mb=0.01)
    shards = plan_shards(cfg)
    by_source = {name: [s for s in shards if s["source"] == name] for name in "abc"}
    assert len(by_source["a"]) == 3 and by_source["a"][0]["start"] == 0 and by_source["a"][-1]["end"] == big.stat().st_size
    assert [s["end"] for s in by_source["b"]] == [None] and [s["end"] for s in by_source["c"]] == [None]
    assert [s["id"] for s in shards[:4]] == ["a-00000", "a-00001", "a-00002", "b-00000"]
    assert plan_shards(dict(cfg, shard_mb=256))[0]["end"] is None  # one whole-file shard


def test_the_packed_rows_do_not_depend_on_the_shard_size(tmp_path, tiny_model_dir, demo_texts):
    """Issue 40 item 6: one shard per file and ~10 shards per file give the same rows and hashes."""
    a = write_jsonl(tmp_path / "a.jsonl", demo_texts[:250])
    b = write_jsonl(tmp_path / "b.jsonl", demo_texts[250:])
    sources = [_source(a), _source(b, "b")]
    results = []
    for mb in (256, a.stat().st_size / 1e6 / 10):
        cfg = corpus_cfg(sources=sources, shard_mb=mb, train_tokens=20_000, held_apart_fraction=0.1)
        m = prepare_corpus(cfg, str(tiny_model_dir), str(tmp_path / f"c{mb:g}"))
        rows = datasets.load_from_disk(str(tmp_path / f"c{mb:g}" / "train"))
        results.append((m["hashes"], m["train"], rows["n_tokens"], len(m["shards"])))
    (h1, t1, n1, s1), (h2, t2, n2, s2) = results
    assert s1 == 2 and s2 >= 15  # the second really was cut
    assert (h1, t1, n1) == (h2, t2, n2)


def test_duplicates_across_shards_and_sources_are_removed_once(tmp_path, tiny_model_dir, demo_texts):
    texts = demo_texts[:120]
    repeated = texts[5]
    a = write_jsonl(tmp_path / "a.jsonl", [*texts[:60], repeated, *texts[60:], repeated])  # twice more in a
    b = write_jsonl(tmp_path / "b.jsonl", [repeated, *demo_texts[200:260]])  # and once in b
    cfg = corpus_cfg(sources=[_source(a), _source(b, "b")], shard_mb=a.stat().st_size / 1e6 / 4)
    m = prepare_corpus(cfg, str(tiny_model_dir), str(tmp_path / "c"))
    shards = m["shards"]
    assert m["sources"]["a"]["shards"] == 4 and len(shards) == 4 + m["sources"]["b"]["shards"]
    assert m["sources"]["a"]["duplicates_removed"] == 2 and m["sources"]["b"]["duplicates_removed"] == 1
    within = sum(s["duplicates_within_shard"] for s in shards.values())
    across = sum(s["duplicates_across_shards"] for s in shards.values())
    assert within + across == 3 and across >= 2  # the copy in b is in another shard whatever the cut
    kept = m["sources"]["a"]["documents_train"] + m["sources"]["a"]["documents_valid"]
    assert kept == 120 and m["sources"]["b"]["documents_train"] + m["sources"]["b"]["documents_valid"] == 60
    assert sum(s["documents_read"] for s in shards.values()) == 122 + 61


def test_a_shard_job_writes_compact_ids_whose_rows_rebuild_the_attention_mask(tmp_path, tiny_model_dir, demo_texts):
    a = write_jsonl(tmp_path / "a.jsonl", demo_texts[:80])
    cfg = corpus_cfg(sources=[_source(a)])
    (shard,) = plan_shards(cfg)
    record = shard_text(cfg, cfg["sources"][0], shard, tmp_path / "text")
    tokens = shard_tokens(tmp_path / "text", tiny_model_dir, tmp_path / "tokens", cfg["batch_size"])
    docs = pq.read_table(tmp_path / "tokens" / "docs.parquet")
    ids = np.fromfile(tmp_path / "tokens" / "ids.bin", dtype="<u2")
    assert tokens["token_dtype"] == "uint16" and len(ids) == tokens["tokens"] == sum(docs.column("n_tokens").to_pylist())
    assert record["kept"] == docs.num_rows and docs.schema.field("hash").type == pa.binary(32)
    m = merge_corpus(cfg, [shard], [tmp_path / "tokens"], tiny_model_dir, tmp_path / "corpus")
    stored = datasets.load_from_disk(str(tmp_path / "corpus" / "train"))
    assert str(stored.data.schema.field("input_ids").type) == "fixed_size_list<item: uint16>[64]"
    rows = stored.with_format("numpy")[:]
    assert m["train"]["tokens"] == int(rows["n_tokens"].sum())
    mask = attention_mask_of(rows["n_tokens"], cfg["seq_len"])
    assert (mask.sum(1) == rows["n_tokens"]).all() and (mask[:, 0] == 1).all()
    assert set(np.unique(rows["input_ids"][mask == 0])) <= {0, 1, 2, 3}  # only the pad id outside the mask
    assert not (tmp_path / "corpus" / ".merge-cache-").exists()


def test_a_bad_line_in_a_byte_range_names_the_source_file_and_its_line(tmp_path, tiny_model_dir, demo_texts):
    lines = [json.dumps({"text": t}, ensure_ascii=False) for t in demo_texts[:300]]
    lines[250] = '{"text": "a broken line'  # line 251 of the file
    f = tmp_path / "a.jsonl"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = corpus_cfg(sources=[_source(f)], shard_mb=f.stat().st_size / 1e6 / 5)
    with pytest.raises(SourceError, match=rf"{f}:251: not valid JSON") as e:
        prepare_corpus(cfg, str(tiny_model_dir), str(tmp_path / "out"))
    assert "shard.jsonl" not in str(e.value) and not (tmp_path / "out").exists()
    bad = tmp_path / "b.jsonl"
    bad.write_bytes(b"".join(b'{"text": "ligne %d assez longue"}\n' % i for i in range(3000)) + b'{"text": "caf\xe9"}\n')
    cfg = corpus_cfg(sources=[_source(bad)], shard_mb=bad.stat().st_size / 1e6 / 4)
    with pytest.raises(SourceError, match=rf"{bad} line 3001 is not valid UTF-8"):
        prepare_corpus(cfg, str(tiny_model_dir), str(tmp_path / "out"))


def test_an_empty_file_among_full_ones_adds_nothing_and_an_empty_source_is_named(tmp_path, tiny_model_dir, demo_texts):
    folder = tmp_path / "src"
    folder.mkdir()
    write_jsonl(folder / "1.jsonl", demo_texts[:100])
    (folder / "2.jsonl").write_text("\n\n")
    m = prepare_corpus(corpus_cfg(sources=[_source(folder)]), str(tiny_model_dir), str(tmp_path / "c"))
    assert m["sources"]["a"]["documents_read"] == 100 and m["sources"]["a"]["shards"] == 2
    only_empty = tmp_path / "empty"
    only_empty.mkdir()
    (only_empty / "x.jsonl").write_text(" \n")
    with pytest.raises(SourceError, match=r"x\.jsonl is empty \(no line with text\)"):
        prepare_corpus(corpus_cfg(sources=[_source(only_empty)]), str(tiny_model_dir), str(tmp_path / "d"))


def test_hub_shards_are_contiguous_groups_of_the_split_files(tmp_path):
    hub = tmp_path / "hub" / "data"
    hub.mkdir(parents=True)
    for i in range(3):
        pq.write_table(pa.table({"body": [f"document {i}-{j}" for j in range(4)]}), hub / f"train-{i:05d}.parquet")
    source = {"name": "h", "format": "hub", "hub_id": "x/y", "split": "train", "text_field": "body"}
    whole = load_source(source, hub_dir=tmp_path / "hub")["text"]
    groups = [load_source(source, hub_dir=tmp_path / "hub", hub_group=(k, 4))["text"] for k in range(4)]
    assert [t for g in groups for t in g] == whole and sum(1 for g in groups if not g) == 1


def test_a_bom_and_nfd_file_gives_the_corpus_of_its_nfc_twin(tmp_path, tiny_model_dir, demo_texts):
    """The shard path normalises in its cleaning (load_source(normalize=False)): same ids as an NFC file."""
    import unicodedata

    texts = [f"Évolution favorable {i}: {t}" for i, t in enumerate(demo_texts[:60])]
    nfc = write_jsonl(tmp_path / "nfc.jsonl", texts)
    nfd = tmp_path / "nfd.jsonl"
    nfd.write_text("\ufeff" + "".join(json.dumps({"text": "\ufeff" + unicodedata.normalize("NFD", t)}, ensure_ascii=False)
                                      + "\r\n" for t in texts), encoding="utf-8")
    hashes = [prepare_corpus(corpus_cfg(sources=[_source(f)]), str(tiny_model_dir), str(tmp_path / f.stem))["hashes"]
              for f in (nfc, nfd)]
    assert hashes[0] == hashes[1]


def _lines(texts):
    return [json.dumps({"text": t}, ensure_ascii=False) for t in texts]


def _odd_sources(tmp_path, texts):
    """Inputs on which cutting a file once gave another answer than reading it whole (helper's review)."""
    ok = _lines(texts[:150])
    flat = [t.replace("\n", " ") for t in texts[:150]]
    csv_dir = tmp_path / "csvs"
    csv_dir.mkdir()
    (csv_dir / "a.csv").write_text("text\n" + "".join(json.dumps(t) + "\n" for t in flat), encoding="utf-8")
    (csv_dir / "b.csv").write_text("text\n", encoding="utf-8")  # a header alone adds nothing
    files = {
        "no_field": ("jsonl", "\n".join(ok[:70] + [json.dumps({"other": "x" * 40})] * 200 + ok[70:]) + "\n"),
        "empty_objects": ("jsonl", "\n".join(ok[:70] + ["{}"] * 300 + ok[70:]) + "\n"),
        "null_lines": ("jsonl", "\n".join(ok[:70] + ["null"] * 300 + ok[70:]) + "\n"),
        "dates": ("jsonl", "\n".join(ok[:70] + [json.dumps({"text": f"2021-03-{i % 28 + 1:02d}"}) for i in range(300)]
                                      + ok[70:]) + "\n"),
        "array": ("jsonl", json.dumps([{"text": t} for t in texts[:150]], ensure_ascii=False, indent=1)),
        "blank_text_lines": ("text", "\n".join(flat[:70]) + "\n" + "   \n" * 1500 + "\n".join(flat[70:]) + "\n"),
    }
    out = {}
    for name, (fmt, content) in files.items():
        path = tmp_path / f"{name}.{'json' if name == 'array' else 'jsonl' if fmt == 'jsonl' else 'txt'}"
        path.write_text(content, encoding="utf-8")
        out[name] = _source(path, fmt=fmt)
    out["csv_folder"] = _source(csv_dir, fmt="csv")
    return out


def test_cutting_a_file_never_changes_what_is_read(tmp_path, tiny_model_dir, demo_texts):
    """Null lines, lines without the text field, date-like texts, a JSON array, a header-only CSV among
    full ones, blank lines of a text file: the same corpus and counts whole and cut into 1-2 kB shards."""
    for name, source in _odd_sources(tmp_path, demo_texts).items():
        results = []
        for mb in (256, 0.0015):
            m = prepare_corpus(corpus_cfg(sources=[source], shard_mb=mb), str(tiny_model_dir), str(tmp_path / f"{name}{mb}"))
            counts = {k: v for k, v in m["sources"]["a"].items() if k != "shards"}
            results.append((m["hashes"], counts, m["sources"]["a"]["shards"]))
        (h1, c1, s1), (h2, c2, s2) = results
        assert (h1, c1) == (h2, c2), name
        assert s2 > s1 or name in ("array", "csv_folder"), name  # these two are never cut


def test_an_all_blank_file_cut_in_pieces_is_named_and_a_nan_shard_size_refused(tmp_path, tiny_model_dir):
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n" * 10_000)
    for mb in (256, 0.001):
        with pytest.raises(SourceError, match=r"blank\.jsonl is empty \(no line with text\)"):
            prepare_corpus(corpus_cfg(sources=[_source(blank)], shard_mb=mb), str(tiny_model_dir), str(tmp_path / "o"))
    nofield = tmp_path / "nofield.jsonl"
    nofield.write_text('{"body": "un texte assez long pour compter"}\n' * 3000)
    with pytest.raises(SourceError, match=r"no line of .*nofield\.jsonl has the field 'text'"):
        prepare_corpus(corpus_cfg(sources=[_source(nofield)], shard_mb=0.01), str(tiny_model_dir), str(tmp_path / "o"))
    with pytest.raises(ValueError, match=r"corpus\.shard_mb is nan"):
        plan_shards(corpus_cfg(sources=[_source(blank)], shard_mb=float("nan")))
