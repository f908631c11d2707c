"""The English task readers on the real files of ../shared/data/english/ (see its README).

CoNLL with the tag in the 4th column (NCBI-disease IOB2, BC5CDR IOB1 with
``-DOCSTART- (PMID)``), ChemProt relation classification (markers, 13 -> 5 label
map), the two-column IOB TSV, and the BigBIO parquet readers on fixtures written
here, at test time, from those real files in the BigBIO schemas. Skipped with a
message when the shared folder is absent.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from clmdetour.tasks.formats import iob1_to_iob2, read_conll, read_iob_tsv
from clmdetour.tasks.prepare import build_task, prepare_task
from clmdetour.tasks.spec import resolve_task_spec

ENGLISH = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "english"  # ../shared/data/english
pytestmark = pytest.mark.skipif(not (ENGLISH / "bc5cdr").is_dir(),
                                reason=f"real English task files not found at {ENGLISH} (../shared/data/english)")
SPLIT_FILES = {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}
CPR_GROUPS = {"UPREGULATOR": "CPR:3", "ACTIVATOR": "CPR:3", "INDIRECT-UPREGULATOR": "CPR:3",
              "DOWNREGULATOR": "CPR:4", "INHIBITOR": "CPR:4", "INDIRECT-DOWNREGULATOR": "CPR:4",
              "AGONIST": "CPR:5", "AGONIST-ACTIVATOR": "CPR:5", "AGONIST-INHIBITOR": "CPR:5",
              "ANTAGONIST": "CPR:6",
              "SUBSTRATE": "CPR:9", "PRODUCT-OF": "CPR:9", "SUBSTRATE_PRODUCT-OF": "CPR:9"}


def english_tasks() -> dict:
    """The three real-file task entries (as config/english.yaml would give them, paths absolute)."""
    return {
        "ncbi-disease": {"type": "ner", "source": "user", "format": "conll", "path": str(ENGLISH / "ncbi_disease"),
                         "splits": SPLIT_FILES},
        "bc5cdr": {"type": "ner", "source": "user", "format": "conll", "path": str(ENGLISH / "bc5cdr"),
                   "splits": SPLIT_FILES, "tag_column": 3, "tag_scheme": "iob1"},
        "chemprot": {"type": "multiclass", "source": "user", "format": "jsonl", "path": str(ENGLISH / "chemprot"),
                     "splits": SPLIT_FILES, "label_map": CPR_GROUPS, "entity_markers": [["<<", ">>"], ["[[", "]]"]],
                     "metric": "f1_micro"},
    }


def _raw_columns(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("-DOCSTART-")]


# ------------------------------------------------------------------ CoNLL


def test_iob1_to_iob2_rule():
    tags, n = iob1_to_iob2(["I-X", "I-X", "O", "I-Y", "B-Y", "I-Y", "I-X", "B-X"])
    assert tags == ["B-X", "I-X", "O", "B-Y", "B-Y", "I-Y", "B-X", "B-X"] and n == 3


def test_ncbi_disease_tag_column_picks_the_fourth_column():
    path = ENGLISH / "ncbi_disease" / "dev.txt"
    rows = read_conll(path, tag_column=3)
    cols = _raw_columns(path)
    assert [t for r in rows for t in r["tags"]] == [c[3].strip() for c in cols]
    assert [w for r in rows for w in r["words"]] == [c[0] for c in cols]
    assert read_conll(path, tag_column=-1)[5]["tags"] == rows[5]["tags"]
    assert not rows[0]["doc_marked"] and rows[0]["doc"] == rows[0]["id"]  # no document markers in NCBI's files


def test_bc5cdr_iob1_is_converted_and_counted_and_documents_keep_their_pmid():
    path = ENGLISH / "bc5cdr" / "train.txt"
    text = path.read_text(encoding="utf-8")
    pmids = re.findall(r"^-DOCSTART- \((\d+)\)", text, flags=re.MULTILINE)
    # independent count of the I- tags that start an entity (after O, a sentence start or another type)
    expected, prev = 0, "O"
    for line in text.splitlines():
        if not line.strip() or line.startswith("-DOCSTART-"):
            prev = "O"
            continue
        tag = line.split("\t")[-1].strip()
        expected += tag.startswith("I-") and (prev == "O" or prev[2:] != tag[2:])
        prev = tag
    with pytest.raises(Exception, match=r"train\.txt:\d+: tag 0 'I-Entity' continues no Entity entity"):
        read_conll(path)  # the strict IOB2 default refuses it
    counts = Counter()
    rows = read_conll(path, tag_column=3, tag_scheme="iob1", counts=counts)
    assert counts["iob1_converted_tags"] == expected == 6857  # the shared README counts 6,857 in train
    assert sorted({r["doc"] for r in rows}) == sorted(f"train#{p}" for p in pmids) and len(pmids) == 500
    first = rows[0]
    assert first["doc"] == f"train#{pmids[0]}" and first["words"][0] == "Naloxone" and first["tags"][0] == "B-Entity"


def test_bc5cdr_manifest_counts_the_conversions(tmp_path):
    spec = english_tasks()["bc5cdr"]
    rows, labels, man = build_task("bc5cdr", spec)
    assert man["tag_scheme"]["scheme"] == "iob1" and man["tag_scheme"]["iob1_converted_tags"] > 0
    assert man["annotations"]["iob1_converted_tags"] == man["tag_scheme"]["iob1_converted_tags"]
    assert man["documents"] == {"train": 500, "dev": 500, "test": 500}
    assert labels["labels"] == ["Entity"] and labels["tags"] == ["O", "B-Entity", "I-Entity"]
    assert all(not t.startswith("I-") or r["tags"][i - 1] != "O"
               for split in rows.values() for r in split for i, t in enumerate(r["tags"]))


def test_iob_tsv_is_the_conll_reader_with_two_columns(tmp_path):
    src = ENGLISH / "ncbi_disease" / "dev.txt"
    lines = src.read_text(encoding="utf-8").splitlines()
    two = "\n".join("\t".join([c.split("\t")[0], c.split("\t")[3]]) if c.strip() else "" for c in lines) + "\n"
    f = tmp_path / "dev.tsv"
    f.write_text(two, encoding="utf-8")
    a, b = read_iob_tsv(f), read_conll(src, tag_column=3)
    assert [(r["words"], r["tags"]) for r in a] == [(r["words"], r["tags"]) for r in b]
    f.write_text("Aspirin\tO\tB-X\n", encoding="utf-8")
    with pytest.raises(Exception, match=r"dev\.tsv:1: 3 columns, but every line has 2 tab-separated columns"):
        read_iob_tsv(f)


# ------------------------------------------------------------------ relation classification


def test_chemprot_five_groups_after_the_map():
    spec = english_tasks()["chemprot"]
    rows, labels, man = build_task("chemprot", spec)
    raw = {s: [json.loads(x)["label"] for x in (ENGLISH / "chemprot" / f).read_text(encoding="utf-8").splitlines()
               if x.strip()] for s, f in SPLIT_FILES.items()}
    assert len({x for v in raw.values() for x in v}) == 13
    assert labels["labels"] == ["CPR:3", "CPR:4", "CPR:5", "CPR:6", "CPR:9"] and labels["metric"] == "f1_micro"
    for split in SPLIT_FILES:
        assert Counter(r["label"] for r in rows[split]) == Counter(CPR_GROUPS[x] for x in raw[split])
    assert man["relation"]["label_map_mapped"] == sum(len(v) for v in raw.values())
    assert man["relation"]["marker_tokens"] is False and "marker_tokens" not in labels
    assert all("<< " in r["text"] and " ]]" in r["text"] for r in rows["test"])  # markers kept in the text


def test_chemprot_unmapped_label_is_an_error_or_dropped_and_counted():
    spec = dict(english_tasks()["chemprot"])
    spec["label_map"] = {k: v for k, v in CPR_GROUPS.items() if k != "AGONIST-INHIBITOR"}
    with pytest.raises(Exception, match=r"chemprot/train\.txt:\d+: label 'AGONIST-INHIBITOR' is not in "
                                        r"tasks\.chemprot\.label_map"):
        build_task("chemprot", spec)
    rows, _, man = build_task("chemprot", dict(spec, label_map_unmapped="drop"))
    assert "CPR:5" in {r["label"] for r in rows["train"]}  # AGONIST and AGONIST-ACTIVATOR still map there
    n = sum(x.count('"AGONIST-INHIBITOR"') for x in
            ((ENGLISH / "chemprot" / f).read_text(encoding="utf-8") for f in SPLIT_FILES.values()))
    assert man["relation"]["label_map_unmapped_dropped"] == man["relation"]["label_map_unmapped_rows_dropped"] == n > 0


def test_marker_tokens_reach_labels_json():
    spec = dict(english_tasks()["chemprot"], marker_tokens=True)
    _, labels, man = build_task("chemprot", spec)
    assert labels["marker_tokens"] == ["<<", ">>", "[[", "]]"] and man["relation"]["marker_tokens"] is True
    with pytest.raises(Exception, match=r"tasks\.x\.marker_tokens: true needs entity_markers"):
        resolve_task_spec("x", {"type": "multiclass", "source": "jsonl", "path": "p", "marker_tokens": True})


# ------------------------------------------------------------------ BigBIO parquet fixtures from the real files


def _conll_documents(path: Path, n: int) -> list[dict]:
    """The first ``n`` sentences of a CoNLL file as BigBIO kb rows (one document a sentence, entities from tags)."""
    rows = read_conll(path, tag_column=3)[:n]
    out = []
    for k, r in enumerate(rows):
        text, offsets = r["text"], r["word_offsets"]
        ents, cur = [], None
        for i, tag in enumerate(r["tags"] + ["O"]):
            if cur and not tag.startswith("I-"):
                s, e = offsets[cur[0]][0], offsets[i - 1][1]
                ents.append({"id": f"{k}_T{len(ents)}", "type": cur[1], "text": [text[s:e]], "offsets": [[s, e]],
                             "normalized": []})
                cur = None
            if tag.startswith("B-"):
                cur = (i, tag[2:])
        cut = len(text) // 2 if " " not in text else text.index(" ")  # two passages: first word, the rest
        passages = [{"id": f"{k}_p0", "type": "title", "text": [text[:cut]], "offsets": [[0, cut]]},
                    {"id": f"{k}_p1", "type": "abstract", "text": [text[cut + 1:]], "offsets": [[cut + 1, len(text)]]}]
        out.append({"id": str(k), "document_id": f"{path.stem}{r['id']}", "passages": passages, "entities": ents,
                    "events": [], "coreferences": [], "relations": []})
    return out


def _write_parquet(path: Path, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def _kb_fixture(root: Path, layout: str = "flat") -> Path:
    config = "ncbi_disease_bigbio_kb"
    for ours, theirs in (("train", "train"), ("dev", "validation"), ("test", "test")):
        rows = _conll_documents(ENGLISH / "ncbi_disease" / f"{ours}.txt", 60)
        target = (root / config / f"{theirs}-00000-of-00001.parquet" if layout == "flat"
                  else root / config / theirs / "0000.parquet")
        _write_parquet(target, rows)
    return root


@pytest.mark.parametrize("layout", ["flat", "convert-parquet"])
def test_bigbio_kb_gives_the_conll_sentences_back(tmp_path, layout):
    root = _kb_fixture(tmp_path / "snap", layout)
    spec = {"type": "ner", "source": "hub", "format": "bigbio_kb", "hub_id": "bigbio/ncbi_disease",
            "hub_config": "ncbi_disease_bigbio_kb", "path": str(root), "max_split_overlap": 1.0}
    rows, labels, man = build_task("ncbi-kb", spec)
    conll = read_conll(ENGLISH / "ncbi_disease" / "dev.txt", tag_column=3)[:60]
    assert [(r["words"], r["tags"]) for r in rows["dev"]] == [(r["words"], r["tags"]) for r in conll]
    assert labels["labels"] == ["Disease"] and man["split"]["hub_splits"]["dev"] == "validation"
    assert all(f.endswith(".parquet") for f in man["split"]["files"]["dev"])
    assert resolve_task_spec("k", spec)["fetch"] is False
    assert resolve_task_spec("k", {k: v for k, v in spec.items() if k != "path"})["fetch"] is True


def test_bigbio_kb_entity_types_filter(tmp_path):
    root = _kb_fixture(tmp_path / "snap")
    spec = {"type": "ner", "source": "user", "format": "bigbio_kb", "hub_config": "ncbi_disease_bigbio_kb",
            "path": str(root), "entity_types": ["Other"], "max_split_overlap": 1.0,
            "label_set": {"unseen": "drop"}}
    with pytest.raises(Exception, match="no labels in train"):
        build_task("ncbi-kb", spec)


def test_bigbio_text_from_chemprot(tmp_path):
    root = tmp_path / "snap"
    for ours, theirs in (("train", "train"), ("dev", "validation"), ("test", "test")):
        lines = (ENGLISH / "chemprot" / f"{ours}.txt").read_text(encoding="utf-8").splitlines()[:300]
        rows = [{"id": str(i), "document_id": f"{ours}{i // 3}", "text": json.loads(x)["text"],
                 "labels": [json.loads(x)["label"]]} for i, x in enumerate(lines)]
        _write_parquet(root / "data" / f"{theirs}-00000-of-00001.parquet", rows)
    spec = {"type": "multiclass", "source": "hub", "format": "bigbio_text", "hub_id": "o/chemprot", "path": str(root),
            "label_map": CPR_GROUPS, "label_map_unmapped": "drop", "entity_markers": [["<<", ">>"], ["[[", "]]"]],
            "max_split_overlap": 1.0, "label_set": {"unseen": "drop"}, "max_unlabelled_fraction": 1.0}
    rows, labels, man = build_task("chemprot-text", spec)
    assert set(labels["labels"]) <= set(CPR_GROUPS.values()) and len(labels["labels"]) >= 4
    assert rows["dev"][0]["id"] == "validation-0" and man["documents"]["train"] == 100
    multilabel = dict(spec, type="multilabel")
    rows, labels, _ = build_task("chemprot-text", multilabel)
    assert all(len(r["labels"]) == 1 for r in rows["train"])


# ------------------------------------------------------------------ end to end: the prepare entry point


def test_prepare_the_three_english_tasks_end_to_end(tmp_path):
    """config -> prepare_task (the rule's entry point) -> results/tasks/{task}, read back through the contract."""
    from clmdetour.tasks.contract import load_task_data

    out = {}
    for name, spec in english_tasks().items():
        folder = tmp_path / "results" / "tasks" / name
        man = prepare_task(name, spec, folder)
        data = load_task_data(folder, name)
        written = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        assert written["counts"] == man["counts"] == {s: len(data.splits[s]) for s in SPLIT_FILES}
        assert written["split"]["files"]["test"].endswith("test.txt")
        out[name] = (data, written)
    ncbi, bc5, chem = out["ncbi-disease"], out["bc5cdr"], out["chemprot"]
    raw_sentences = sum(1 for block in (ENGLISH / "ncbi_disease" / "test.txt").read_text(encoding="utf-8")
                        .split("\n\n") if block.strip())
    assert ncbi[0].labels == ["O", "B-Disease", "I-Disease"] and ncbi[1]["counts"]["test"] == raw_sentences
    assert ncbi[1]["tag_scheme"]["iob1_converted_tags"] == 0
    assert bc5[1]["tag_scheme"]["iob1_converted_tags"] > 0 and bc5[1]["documents"]["test"] == 500
    assert chem[0].labels == ["CPR:3", "CPR:4", "CPR:5", "CPR:6", "CPR:9"] and chem[0].metric == "f1_micro"
    lines = sum(len((ENGLISH / "chemprot" / f).read_text(encoding="utf-8").splitlines()) for f in SPLIT_FILES.values())
    assert chem[1]["relation"]["label_map_mapped"] == sum(chem[1]["counts"].values()) == lines
