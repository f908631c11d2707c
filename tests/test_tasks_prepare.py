"""Task preparation: real QUAERO / FRACCO loaders, label-set policies, bad input, outputs, Hub and URL sources."""

import io
import json
import re
import zipfile
from pathlib import Path

import pytest

from clmdetour.tasks.contract import task_eval_texts
from clmdetour.tasks.fetch import FetchError, fetch_url
from clmdetour.tasks.formats import read_conll
from clmdetour.tasks.prepare import build_task, prepare_task
from clmdetour.tasks.spec import TaskError, missing_files, resolve_task_spec, user_task_message
from clmdetour.tasks.split import hash_split

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
QUAERO = DATA / "quaero" / "corpus"
FRACCO = DATA / "fracco" / "brat_raw"
needs_quaero = pytest.mark.skipif(not QUAERO.is_dir(), reason=f"real QUAERO data absent ({QUAERO})")
needs_fracco = pytest.mark.skipif(not FRACCO.is_dir(), reason=f"real FRACCO data absent ({FRACCO})")
GROUPS = ["ANAT", "CHEM", "DEVI", "DISO", "GEOG", "LIVB", "OBJC", "PHEN", "PHYS", "PROC"]


def _paper_spec(name, **over):
    """A task entry of config/config.yaml pointed at the shared test data."""
    from clmdetour.config import load_yaml

    spec = dict(load_yaml(REPO / "config" / "config.yaml")["tasks"][name])
    spec.update(over)
    return spec


# ---------------------------------------------------------------- real data


@needs_quaero
def test_quaero_emea_and_medline_counts_per_split():
    _, labels, man = build_task("medline", _paper_spec("medline", source="brat", path=str(QUAERO)))
    assert man["counts"] == {"train": 833, "dev": 832, "test": 833}  # official MEDLINE titles
    assert labels["labels"] == GROUPS and labels["metric"] == "f1_micro"
    assert labels["tags"][0] == "O" and len(labels["tags"]) == 21
    rows, labels, man = build_task("emea", _paper_spec("emea", source="brat", path=str(QUAERO)))
    assert man["documents"] == {"train": 11, "dev": 12, "test": 15}  # official EMEA files
    # sentences (rule in docs/tasks.md; spaCy vetoes one rule cut in test: "( ≥ 5 . 17 - ...")
    assert man["counts"] == {"train": 742, "dev": 689, "test": 640}
    assert set(man["label_counts"]["test"]) == set(GROUPS)
    ann = man["annotations"]
    # contiguous_first: 80 of the 84 discontinuous extents overlap a kept mention and are dropped; with
    # full_extent 1128 spans were nested, 114 more contiguous gold mentions lost (docs/tasks.md, Policies)
    assert ann["discontinuous"] == 84 and ann["discontinuous_dropped"] == 80 and ann["nested"] == 1000
    assert ann["entities_without_words"] == 0
    pol = man["discontinuous_policies"]
    assert pol["full_extent"]["contiguous_lost"] - pol["contiguous_first"]["contiguous_lost"] == 114
    assert pol["contiguous_first"]["contiguous_lost"] == pol["drop"]["contiguous_lost"]
    assert man["split_overlap"]["test_overlapping"] == 5 and man["split_overlap"]["test_fraction"] < 0.01
    row = rows["train"][0]
    assert set(row) == {"id", "text", "words", "word_offsets", "tags"} and len(row["words"]) == len(row["tags"])
    assert all(w in row["text"] for w in row["words"])


@pytest.fixture(scope="module")
def fracco30():
    if not FRACCO.is_dir():
        pytest.skip(f"real FRACCO data absent ({FRACCO})")
    return build_task("fracco-30", _paper_spec("fracco-30", source="fracco", path=str(FRACCO)))


def test_fracco_codes_validated_and_junk_counted(fracco30):
    rows, labels, man = fracco30
    assert len(labels["labels"]) == 30
    valid = re.compile(r"C\d\d\.\d|\d{4}/\d")
    assert all(valid.fullmatch(code) for code in labels["labels"])
    assert all(valid.fullmatch(c) for split in rows.values() for r in split for c in r["labels"])
    icdo = man["icdo"]
    # counted against `grep` of the raw notes: 248 tocheck, 53 todelete, 222 AnnotatorNotes trad, 1 .txt without .ann
    assert icdo["junk"]["tocheck"] == 248 and icdo["junk"]["todelete"] == 53
    assert icdo["annotator_notes"] == {"trad": 222}
    assert icdo["documents_without_ann"] == 1
    assert icdo["junk"]["bare_digits"] > 1000 and icdo["junk"]["morphology_with_grade"] > 0
    assert re.fullmatch(r".*\.ann:\d+ tocheck", icdo["junk_examples"]["tocheck"])
    assert sum(man["counts"].values()) == 1300
    assert man["split"]["policy"] == "hash" and man["split"]["salt"] == "clmdetour"


def test_fracco_split_is_deterministic_and_by_document_hash(fracco30):
    rows, _, man = fracco30
    rows2, _, man2 = build_task("fracco-30", _paper_spec("fracco-30", source="fracco", path=str(FRACCO)))
    assert man2["rows_sha256"] == man["rows_sha256"]
    for split in ("train", "dev", "test"):
        assert [r["id"] for r in rows2[split]] == [r["id"] for r in rows[split]]
        assert all(hash_split(r["id"], 0.1, 0.2, "clmdetour") == split for r in rows[split])


@needs_fracco
def test_cantemist_is_morphology_only_with_unseen_codes_dropped_and_counted():
    _, labels, man = build_task("cantemist", _paper_spec("cantemist", source="fracco", path=str(FRACCO)))
    assert all(re.fullmatch(r"\d{4}/\d", c) for c in labels["labels"])
    assert len(labels["labels"]) > 100
    assert man["label_set"]["test"]["unseen_in_train"] > 0
    assert man["annotations"]["codes_other_kind"] > 0


# ---------------------------------------------------------------- small synthetic sources


def _jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _mc_task(tmp_path, test_rows=None, dev_rows=None):
    train = [{"id": f"t{i}", "text": f"texte {i}", "label": "a" if i % 2 else "b"} for i in range(6)]
    _jsonl(tmp_path / "train.jsonl", train)
    _jsonl(tmp_path / "dev.jsonl", dev_rows if dev_rows is not None else [{"id": "d0", "text": "x", "label": "a"}])
    _jsonl(tmp_path / "test.jsonl", test_rows or [{"id": "e0", "text": "y", "label": "b"}])
    return {"type": "multiclass", "source": "jsonl", "path": str(tmp_path), "id_field": "id"}


def test_prepare_writes_datasets_labels_and_manifest(tmp_path):
    import datasets

    spec = _mc_task(tmp_path / "src")
    out = tmp_path / "results" / "tasks" / "toy"
    man = prepare_task("toy", spec, out)
    assert sorted(p.name for p in out.iterdir()) == ["dev", "labels.json", "manifest.json", "test", "train"]
    assert json.loads((out / "labels.json").read_text()) == {"task": "toy", "type": "multiclass",
                                                              "labels": ["a", "b"], "metric": "f1_macro"}
    written = json.loads((out / "manifest.json").read_text())
    assert written["counts"] == {"train": 6, "dev": 1, "test": 1} == man["counts"]
    assert written["label_counts"]["train"] == {"a": 3, "b": 3}
    assert written["split"]["policy"] == "given"
    assert {Path(f["path"]).name for f in written["files"]} == {"train.jsonl", "dev.jsonl", "test.jsonl"}
    assert all(len(f["sha256"]) == 64 for f in written["files"])
    train = datasets.load_from_disk(str(out / "train"))
    assert train.column_names == ["id", "text", "label"] and train[0] == {"id": "t0", "text": "texte 0", "label": "b"}
    assert task_eval_texts(out) == ["x", "y"]


def test_unseen_label_in_test_names_file_line_and_label(tmp_path):
    spec = _mc_task(tmp_path, test_rows=[{"id": "e0", "text": "y", "label": "b"}, {"id": "e1", "text": "z", "label": "zz"}])
    with pytest.raises(TaskError, match=r"test\.jsonl:2: label 'zz' in test is not in train"):
        build_task("toy", spec)
    _, _labels, man = build_task("toy", {**spec, "label_set": {"unseen": "drop"}, "max_unlabelled_fraction": 0.5})
    assert man["counts"]["test"] == 1 and man["label_set"]["test"]["rows_dropped"] == 1
    with pytest.raises(TaskError, match=r"tasks\.toy: 1 of 2 test rows \(50\.0 %\) have no label seen in train"):
        build_task("toy", {**spec, "label_set": {"unseen": "drop"}})


def test_unseen_entity_type_names_the_ann_line(tmp_path):
    for split, typ in (("train", "DISO"), ("dev", "DISO"), ("test", "CHEM")):
        d = tmp_path / split
        d.mkdir()
        (d / f"{split}1.txt").write_text("Un mot ici.", encoding="utf-8")
        (d / f"{split}1.ann").write_text(f"T1\tDISO 3 6\tmot\nT2\t{typ} 7 10\tici\n", encoding="utf-8")
    spec = {"type": "ner", "source": "brat", "path": str(tmp_path)}
    with pytest.raises(TaskError, match=r"test/test1\.ann:2: label 'CHEM' in test is not in train"):
        build_task("toy-ner", spec)
    (tmp_path / "dev" / "train1.txt").write_text("Un mot.", encoding="utf-8")
    (tmp_path / "dev" / "train1.ann").write_text("", encoding="utf-8")
    with pytest.raises(TaskError, match=r"dev/train1\.txt: id 'train1' appears twice"):
        build_task("toy-ner", spec)


def test_empty_split_is_an_error(tmp_path):
    spec = _mc_task(tmp_path, dev_rows=[])
    with pytest.raises(TaskError, match=r"split 'dev' of task 'toy' is empty"):
        build_task("toy", spec)


def test_missing_files_and_bad_lines(tmp_path):
    spec = _mc_task(tmp_path)
    (tmp_path / "dev.jsonl").unlink()
    with pytest.raises(TaskError, match=r"dev\.jsonl: not found"):
        build_task("toy", spec)
    (tmp_path / "dev.jsonl").write_text('{"id": "d0", "text": "x", "label": "a"}\n{"id": "d1", "text": \n',
                                        encoding="utf-8")
    with pytest.raises(TaskError, match=r"dev\.jsonl:2: invalid JSON"):
        build_task("toy", spec)
    (tmp_path / "dev.jsonl").write_text('{"id": "d0", "txt": "x", "label": "a"}\n', encoding="utf-8")
    with pytest.raises(TaskError, match=r"dev\.jsonl:1: text field 'text' \(text_field\) missing"):
        build_task("toy", spec)
    conll = tmp_path / "x.conll"
    conll.write_text("Le O\ncancer I-DISO\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"x\.conll:1: tag 1 'I-DISO' continues no DISO entity"):
        read_conll(conll)


def test_task_not_in_config_and_user_task_message():
    spec = resolve_task_spec("diamed", _paper_spec("diamed", path="/nonexistent/diamed"))
    missing = missing_files(spec)
    assert missing == [f"/nonexistent/diamed/{s}.jsonl" for s in ("train", "dev", "test")]
    msg = user_task_message("diamed", spec, missing)
    assert "task 'diamed' needs files you must provide" in msg and "'label' (one label)" in msg
    with pytest.raises(TaskError, match=r"tasks\.bad\.format: a 'user' task needs format"):
        resolve_task_spec("bad", {"type": "multiclass", "source": "user", "path": "x"})
    with pytest.raises(TaskError, match=r"tasks\.bad: format 'brat' gives \('ner',\) tasks"):
        resolve_task_spec("bad", {"type": "multiclass", "source": "brat", "path": "x"})


def test_multilabel_top_k_and_tsv_hash_split(tmp_path):
    rows = ["id\ttext\tlabels"] + [f"r{i}\ttexte {i}\tA|{'B' if i % 3 else 'C'}" for i in range(60)]
    (tmp_path / "all.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    spec = {"type": "multilabel", "source": "tsv", "path": str(tmp_path / "all.tsv"), "label_field": "labels",
            "split": {"policy": "hash", "dev_fraction": 0.25, "test_fraction": 0.25}, "label_set": {"top_k": 2}}
    out, labels, man = build_task("ml", spec)
    assert labels["labels"] == ["A", "B"]
    assert sum(man["counts"].values()) == 60 and min(man["counts"].values()) >= 5
    assert all(set(r["labels"]) <= {"A", "B"} for split in out.values() for r in split)
    assert man["label_set"]["train"]["outside_top_k"] == man["label_set"]["train_document_frequency"]["C"]
    assert man["split"]["unit"] == "row id"


def test_hub_snapshot_loaded_from_local_parquet_with_classlabels(tmp_path):
    import datasets

    feats = datasets.Features({"id": datasets.Value("string"), "words": datasets.Sequence(datasets.Value("string")),
                               "ner_tags": datasets.Sequence(datasets.ClassLabel(names=["O", "B-DISO", "I-DISO"]))})
    for split, n in (("train", 4), ("validation", 2), ("test", 2)):
        first = "la" if split == "validation" else "une"  # a dev split copied from train is refused
        ds = datasets.Dataset.from_dict({"id": [f"{split}{i}" for i in range(n)], "words": [[first, "fièvre"]] * n,
                                         "ner_tags": [[0, 1]] * n}, features=feats)
        ds.to_parquet(str(tmp_path / "snap" / "data" / f"{split}-00000-of-00001.parquet"))
    spec = {"type": "ner", "source": "hub", "hub_id": "someone/x", "path": str(tmp_path / "snap"),
            "tags_field": "ner_tags"}
    rows, labels, man = build_task("hubtask", spec)
    assert man["counts"] == {"train": 4, "dev": 2, "test": 2}
    assert rows["dev"][0]["tags"] == ["O", "B-DISO"] and rows["dev"][0]["text"] == "la fièvre"
    assert labels["labels"] == ["DISO"]


def test_fetch_url_records_then_checks_sha256(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("QUAERO_FrenchMed/corpus/train/EMEA/a.txt", "x")
    archive = tmp_path / "q.zip"
    archive.write_bytes(buf.getvalue())
    out, rec = tmp_path / "resources" / "datasets" / "quaero", tmp_path / "checksums"
    info = fetch_url(archive.as_uri(), out, "quaero", record_dir=rec)
    assert (out / "corpus" / "train" / "EMEA" / "a.txt").read_text() == "x"  # single top folder stripped
    assert (rec / "quaero.sha256").read_text().split()[0] == info["sha256"]
    assert info["sha256"] in (out / "revision.txt").read_text()
    fetch_url(archive.as_uri(), out, "quaero", record_dir=rec)  # same bytes: accepted
    archive.write_bytes(buf.getvalue() + b"changed")
    with pytest.raises(FetchError, match=r"sha256 .* differs from .*quaero\.sha256"):
        fetch_url(archive.as_uri(), out, "quaero", record_dir=rec)
    assert (out / "corpus").is_dir()  # the previous complete copy is kept
    with pytest.raises(FetchError, match="config sha256"):
        fetch_url(archive.as_uri(), tmp_path / "other", "other", sha256="0" * 64, record_dir=rec)


def test_hash_split_is_stable_and_close_to_fractions():
    got = [hash_split(f"doc{i}", 0.1, 0.2, "s") for i in range(5000)]
    assert got == [hash_split(f"doc{i}", 0.1, 0.2, "s") for i in range(5000)]
    assert abs(got.count("test") / 5000 - 0.2) < 0.02 and abs(got.count("dev") / 5000 - 0.1) < 0.02
    other_salt = [hash_split(f"doc{i}", 0.1, 0.2, "other") for i in range(5000)]
    assert other_salt != got  # the salt changes the assignment
    with pytest.raises(ValueError, match="sum to less than 1"):
        hash_split("x", 0.5, 0.5, "s")


@pytest.mark.parametrize("overlay", [None, "demo", "real-small", "slurm-test"])
def test_resolving_is_idempotent_on_every_shipped_task(overlay):
    """The prepare_task job resolves the spec that planning resolved: nothing may change or be refused then."""
    from helpers import REPO

    from clmdetour.config import deep_merge, load_yaml

    cfg = load_yaml(REPO / "config/config.yaml")
    for name in ["demo", overlay] if overlay == "slurm-test" else [overlay] if overlay else []:
        cfg = deep_merge(cfg, load_yaml(REPO / f"config/{name}.yaml"))
    for name, spec in cfg["tasks"].items():
        once = resolve_task_spec(name, spec)
        assert resolve_task_spec(name, once) == once, name


def _manifest_counters() -> set[str]:
    """The counter names the task readers write to the manifest's ``annotations`` (``counts["name"]``; an
    f-string key ``counts[f"junk_{kind}"]`` gives its prefix, ``junk_``). overlap.py's ``counts`` are the
    ``split_overlap`` bands, documented with it."""
    names = set()
    for path in sorted((REPO / "src" / "clmdetour" / "tasks").glob("*.py")):
        if path.name == "overlap.py":
            continue
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"counts\[\"(\w+)\"\]", text))
        names |= set(re.findall(r"counts\[f\"(\w+?)\{", text))
    return names


def test_docs_name_every_manifest_counter():
    """docs/tasks.md names every counter of the manifest's annotations (it missed duplicate_entity)."""
    counters = _manifest_counters()
    assert {"duplicate_entity", "type_filtered", "comment_lines_skipped", "junk_"} <= counters
    doc = (REPO / "docs" / "tasks.md").read_text(encoding="utf-8")
    table = doc.split("### Manifest counters (`annotations`)", 1)[1].split("\n#", 1)[0]
    assert sorted(c for c in counters if f"`{c}" not in table) == []


def test_a_number_among_text_labels_is_refused_naming_its_line(tmp_path):
    """Issue 65 item 6: a label 1 among string labels became a class of its own, silently."""
    spec = _mc_task(tmp_path / "src", test_rows=[{"id": "e0", "text": "y", "label": "b"}])
    rows = [json.loads(x) for x in (tmp_path / "src" / "train.jsonl").read_text().splitlines()]
    rows[3]["label"] = 1
    _jsonl(tmp_path / "src" / "train.jsonl", rows)
    with pytest.raises(TaskError, match=r"train\.jsonl:4: task 'toy' has the number 1 as a label among text labels "
                                        r"\('a', 'b'\): it would become a class of its own"):
        prepare_task("toy", spec, tmp_path / "out")
    rows[3]["label"] = "1"  # the same value as text: a class, by choice
    _jsonl(tmp_path / "src" / "train.jsonl", rows)
    prepare_task("toy", spec, tmp_path / "out")


def test_a_single_class_task_is_refused(tmp_path):
    """Issue 65 item 6: a multiclass task with one class scored 1.0 for every model."""
    src = tmp_path / "src"
    _jsonl(src / "train.jsonl", [{"id": f"t{i}", "text": f"texte {i}", "label": "a"} for i in range(6)])
    _jsonl(src / "dev.jsonl", [{"id": "d0", "text": "x", "label": "a"}])
    _jsonl(src / "test.jsonl", [{"id": "e0", "text": "y", "label": "a"}])
    spec = {"type": "multiclass", "source": "jsonl", "path": str(src), "id_field": "id"}
    with pytest.raises(TaskError, match=r"task 'toy' has a single class \('a'\) after the label set, fewer than a "
                                        r"multiclass task needs \(2\): every model would score 1\.0 on it"):
        prepare_task("toy", spec, tmp_path / "out")
    assert not (tmp_path / "out").exists()
