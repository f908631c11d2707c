"""A researcher's own task, first try (issue 51, items 1-8), on small synthetic files: messages naming the key
that fixes them, the overlap check on what the model sees, every metric of a type in the tables, the trivial note
per type, and the traps of exam and annotation files reported in the log and the manifest."""

from __future__ import annotations

import json
import logging
import random

import pandas as pd
import pytest
from helpers import mc_spec, write_json_arrays

from clmdetour.evaluation.table import load_runs, markdown_table, other_metric, trivial_note, write_eval_tables
from clmdetour.finetune.inputs import warn_truncated
from clmdetour.io import atomic_write_json
from clmdetour.tasks import overlap
from clmdetour.tasks.prepare import build_task
from clmdetour.tasks.spec import TaskError, files_hint, missing_files, resolve_task_spec, user_task_message
from clmdetour.tasks.traps import suspect_note_types
from clmdetour.tasktypes import TASK_TYPES, get_task_type

KEYS = ["a", "b", "c", "d", "e"]
STEM = "Parmi les affirmations suivantes, laquelle (lesquelles) est (sont) exacte(s) ?"
WORDS = ["rein", "foie", "cœur", "poumon", "rate", "os", "sang", "peau", "nerf", "muscle", "œil", "dent"]


def _options(i: int) -> dict:
    rng = random.Random(i)
    return {k: f"le {rng.choice(WORDS)} numéro {i} {k} {rng.randint(0, 10**6)}" for k in KEYS}


def _question(qid: str, i: int, n_answers: int, stem: str = STEM) -> dict:
    return {"id": qid, "question": stem, "options": _options(i), "correct_answers": KEYS[:n_answers]}


def _exam(n_train=60, n_dev=20, n_test=20) -> dict[str, list[dict]]:
    """Every question shares one stem; options differ (an exam file's shape)."""
    parts, k = {}, 0
    for split, n in (("train", n_train), ("dev", n_dev), ("test", n_test)):
        parts[split] = [_question(f"{split}{j}", k + j, 1 + (k + j) % 2) for j in range(n)]
        k += n
    return parts


# ---------------------------------------------------------------- item 1
def test_missing_files_name_the_splits_key_and_the_json_forms_read(tmp_path):
    spec = resolve_task_spec("mcqa", {k: v for k, v in mc_spec(tmp_path / "exam").items() if k != "splits"}
                             | {"source": "user", "format": "jsonl"})
    missing = missing_files(spec)
    assert missing[0].endswith("train.jsonl")
    msg = user_task_message("mcqa", spec, missing)
    assert "JSON lines or one JSON array of objects" in msg
    assert "set tasks.mcqa.splits to their names, e.g. splits: {train: train.json, dev: dev.json, test: test.json}" in msg
    # the prepare job's own refusal names the key too
    with pytest.raises(TaskError, match=r"not found .*set tasks\.mcqa\.splits to their names"):
        build_task("mcqa", {k: v for k, v in mc_spec(tmp_path / "exam").items() if k != "splits"})
    hashed = resolve_task_spec("t", {"type": "multiclass", "source": "jsonl", "path": str(tmp_path / "all.jsonl"),
                                     "split": {"policy": "hash"}})
    assert "split.policy hash reads tasks.t.path as one source" in files_hint("t", hashed)
    # with splits naming the JSON-array files, the task is read
    write_json_arrays(tmp_path / "exam", _exam())
    rows, _, _ = build_task("mcqa", mc_spec(tmp_path / "exam"))
    assert [len(rows[s]) for s in ("train", "dev", "test")] == [60, 20, 20]


# ---------------------------------------------------------------- item 2
def test_overlap_compares_the_question_with_its_options_and_counts_stems_apart(tmp_path):
    parts = _exam()
    write_json_arrays(tmp_path / "exam", parts)
    _, _, man = build_task("mcqa", mc_spec(tmp_path / "exam"))  # default max_split_overlap 0.01: not refused
    leak = man["split_overlap"]
    assert leak["input"] == "question and options"
    assert leak["pairs"]["train-test"] == {"exact": 0, "near_exact": 0}
    assert leak["shared_first_text"]["train-test"] == 20 and leak["shared_first_text"]["train-dev"] == 20
    # one real leak: a test question with the same question and options as a train one
    parts["test"][3] = dict(parts["train"][5], id="test3")
    write_json_arrays(tmp_path / "exam", parts)
    with pytest.raises(TaskError) as info:
        build_task("mcqa", mc_spec(tmp_path / "exam"))
    msg = str(info.value)
    assert "1 of 20 test examples (5.0 %) has the same question and options" in msg
    assert "19 more test examples share only their question with train: templates, not counted" in msg
    assert "to keep the official split, set tasks.mcqa.max_split_overlap: 0.05" in msg
    assert "remove the leaked test ids ['test3'] from the test file" in msg
    _, _, man = build_task("mcqa", mc_spec(tmp_path / "exam", max_split_overlap=0.05))  # the key it names works
    assert man["split_overlap"]["test_overlapping_ids"] == ["test3"]


def test_overlap_of_a_similarity_pair_compares_both_texts():
    sim = get_task_type("similarity")
    first = "le patient présente une douleur thoracique depuis trois jours"
    train = [{"id": f"r{i}", "text": first, "text_pair": f"autre phrase numéro {i} sans rapport", "score": 1.0}
             for i in range(5)]
    test = [{"id": "t0", "text": first, "text_pair": "une phrase toute différente du reste ici", "score": 2.0},
            {"id": "t1", "text": first, "text_pair": "autre phrase numéro 2 sans rapport", "score": 1.0}]
    rep = overlap.split_overlap({"train": train, "dev": [], "test": test}, texts=sim.example_texts)
    assert rep["test_overlapping"] == 1 and rep["test_example_ids"] == ["t1"]
    assert rep["shared_first_text"]["train-test"] == 1
    alone = overlap.split_overlap({"train": train, "dev": [], "test": test})  # the first text alone: both
    assert alone["test_overlapping"] == 2


# ---------------------------------------------------------------- item 3
def _record(path, model, task, seed, metric, metrics):
    atomic_write_json(path, {"model": model, "task": task, "seed": seed, "metric": metric, "status": "ok",
                             "metrics": metrics, "dev_metric": 0.5, "wall_time_s": 1.0})


def test_every_metric_of_a_type_reaches_the_runs_and_table_metrics_adds_columns(tmp_path):
    assert other_metric("hamming") == "emr" and other_metric("emr") == "hamming"
    assert other_metric("spearman") == "pearson" and other_metric("f1_micro") == "f1_macro"
    expected, paths = [], {}
    for m in ("a", "b"):
        for s in (0, 1):
            p = tmp_path / m / f"{s}.json"
            _record(p, m, "mcqa", s, "hamming", {"hamming": 0.4 + 0.1 * s, "emr": 0.2 + 0.05 * s + (m == "b") * 0.1})
            expected.append((m, "mcqa", s))
            paths[(m, "mcqa", s)] = p
    runs = load_runs(expected, paths)
    assert list(runs["metric_other"]) == ["emr"] * 4 and runs["score_other"].tolist() == pytest.approx([0.2, 0.25, 0.3, 0.35])
    out = {k: tmp_path / f"{k}.out" for k in ("runs", "table", "md", "runs2", "table2", "md2")}
    common = {"expected": expected, "paths": paths, "models": ["a", "b"], "tasks": ["mcqa"], "baseline": "a",
              "allow_missing": False, "tie_tolerance": 0.0}
    write_eval_tables(runs_tsv=out["runs"], table_tsv=out["table"], table_md=out["md"], **common)
    write_eval_tables(runs_tsv=out["runs2"], table_tsv=out["table2"], table_md=out["md2"],
                      extra_metrics={"mcqa": ["emr"]}, **common)
    plain = pd.read_csv(out["table"], sep="\t")
    assert not [c for c in plain.columns if "emr" in c]
    table = pd.read_csv(out["table2"], sep="\t").set_index("model")
    assert list(table.columns[-3:]) == ["mcqa_emr_mean", "mcqa_emr_std", "mcqa_emr_n"]
    assert table.loc["b", "mcqa_emr_mean"] == pytest.approx(0.325) and table.loc["b", "mcqa_emr_n"] == 2
    assert pd.isna(table.loc["trivial", "mcqa_emr_mean"])
    assert plain.equals(table.reset_index()[list(plain.columns)])  # the rest unchanged
    assert pd.read_csv(out["runs2"], sep="\t")["score_emr"].tolist() == pytest.approx([0.2, 0.25, 0.3, 0.35])
    assert "| b | 32.5 ± 3.5 |" in out["md2"].read_text()
    with pytest.raises(TaskError, match=r"tasks\.mcqa\.table_metrics: \['f1_macro'\] is not a list of distinct metrics"):
        resolve_task_spec("mcqa", mc_spec(tmp_path, table_metrics=["f1_macro"]))
    assert resolve_task_spec("mcqa", mc_spec(tmp_path, table_metrics=["emr"]))["table_metrics"] == ["emr"]


# ---------------------------------------------------------------- item 4
def test_the_trivial_note_covers_every_type_from_the_type_itself():
    note = trivial_note()
    for name, ttype in TASK_TYPES.items():
        assert f"{name}: {ttype.trivial_rule}" in note
    assert trivial_note({"q": "multiple_choice"}).startswith("multiple_choice: the one set of option keys")
    table = pd.DataFrame([{"model": "trivial", "q_mean": 0.3}])
    md = markdown_table(table, ["q"], "m", {"q": 1}, tie_tolerance=0.0, task_types={"q": "multiple_choice"})
    assert "(multiple_choice: the one set of option keys, best on train, answered to every question" in md


# ---------------------------------------------------------------- item 5
def test_traps_of_an_exam_file_are_reported(tmp_path, caplog):
    parts = _exam()
    for j, row in enumerate(parts["train"]):  # train: mostly multi-answer; dev and test: mostly single
        row["correct_answers"] = KEYS[:1] if j % 4 == 0 else KEYS[:3]
    parts["train"].append(dict(parts["train"][7], id="copy-of-train7"))  # the same record under another id
    parts["dev"][2]["options"]["e"] = parts["dev"][2]["options"]["b"].upper()  # two identical options
    write_json_arrays(tmp_path / "exam", parts)
    with caplog.at_level(logging.WARNING):
        _, _, man = build_task("mcqa", mc_spec(tmp_path / "exam", max_split_overlap=1.0))
    traps = man["traps"]
    assert traps["identical_records"]["groups"] == 1 and traps["identical_records"]["examples"] == [
        ["train:train7", "train:copy-of-train7"]]
    assert traps["record_problems"] == {"identical options within a question": {"rows": 1, "examples": ["dev:dev2"]}}
    shift = traps["profile_shift"]
    assert shift["profile"] == "share of questions per number of correct options"
    assert shift["shares"]["dev"] == {"1": 0.5, "2": 0.5} and shift["distance"]["dev"] >= 0.2
    log = caplog.text
    assert "1 record repeats another's question and options and answer under a different id" in log
    assert "1 record with identical options within a question, e.g. ['dev:dev2']" in log
    assert "differs from train's (total variation" in log


def test_truncation_share_is_warned(caplog):
    info = {"truncated": {"train": 134, "dev": 0, "test": 0}, "model_inputs": {"train": 10850, "dev": 5, "test": 5}}
    with caplog.at_level(logging.WARNING):
        assert warn_truncated("mcqa", info, 512, get_task_type("multiple_choice").truncated_unit)
    assert "134 question-option pairs of train cut at max_length 512 tokens (10850 model inputs, 1.2 %)" in caplog.text
    assert not warn_truncated("mcqa", {"truncated": dict.fromkeys(("train", "dev", "test"), 0),
                                       "model_inputs": dict.fromkeys(("train", "dev", "test"), 3)}, 512, "x")


# ---------------------------------------------------------------- item 6
def _brat(root, split, stem, text, ann):
    folder = root / split
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.txt").write_text(text, encoding="utf-8")
    (folder / f"{stem}.ann").write_text(ann, encoding="utf-8")


def test_note_types_that_are_not_groups_are_warned(tmp_path, caplog):
    notes = ('"C0015967", "Fièvre", "Sign or Symptom", "DISO"', '"C0017890", "glycine", "Amino Acid, Peptide, or Protein"')
    for split in ("train", "dev", "test"):
        text = f"Le document {split} signale une fièvre et de la glycine."
        a, b = text.index("fièvre"), text.index("glycine")
        _brat(tmp_path, split, f"{split}1", text,
              f"T1\tC0015967 {a} {a + 6}\tfièvre\nT2\tC0017890 {b} {b + 7}\tglycine\n"
              f"#1\tAnnotatorNotes T1\t{notes[0]}\n#2\tAnnotatorNotes T2\t{notes[1]}\n")
    spec = {"type": "ner", "source": "brat", "path": str(tmp_path), "max_split_overlap": 1.0,
            "type_from_note": {"field": -1, "multi_group": "first"}}
    with caplog.at_level(logging.WARNING):
        _, labels, man = build_task("notes", spec)
    assert labels["labels"] == ["Amino Acid, Peptide, or Protein", "DISO"]
    assert man["traps"]["note_types_suspect"] == ["Amino Acid, Peptide, or Protein"]
    assert "do not look like group codes: ['Amino Acid, Peptide, or Protein']" in caplog.text
    assert "type_from_note.regex" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # the regex form the docs lead with: the clean groups, no warning
        _, labels, man = build_task("notes", {**spec, "type_from_note": {"regex": r'"([A-Z]{4})"\s*$',
                                                                         "unmatched": "drop"}})
    assert labels["labels"] == ["DISO"] and man["traps"]["note_types_suspect"] == []
    assert "group codes" not in caplog.text
    assert suspect_note_types(["Sign or Symptom", "Finding"]) == ["Sign or Symptom"]
    assert suspect_note_types(["a b", "c d"]) == []  # no type looks like a code: nothing to compare with


def _cui_docs(root, notes: dict[str, str]):
    """One document per split: T1 fièvre (C0015967), T2 rein (C0022646), concept ids in the type slot, and
    the notes given (entity id -> note value)."""
    for split in ("train", "dev", "test"):
        text = f"Le document {split} signale une fièvre et un rein."
        a, b = text.index("fièvre"), text.index("rein")
        ann = f"T1\tC0015967 {a} {a + 6}\tfièvre\nT2\tC0022646 {b} {b + 4}\trein\n"
        ann += "".join(f"#{n}\tAnnotatorNotes {tid}\t{value}\n" for n, (tid, value) in enumerate(notes.items(), 1))
        _brat(root, split, f"{split}1", text, ann)


def test_written_types_beside_note_types_are_warned_and_listed(tmp_path, caplog):
    """Review item: an entity without a note keeps its written concept id, which becomes a label beside the
    group codes read from notes, even with the docs' regex form and unmatched: error."""
    _cui_docs(tmp_path, {"T1": '"C0015967", "Fièvre", "Sign or Symptom", "DISO"'})  # rein has no note
    spec = {"type": "ner", "source": "brat", "path": str(tmp_path), "max_split_overlap": 1.0,
            "type_from_note": {"regex": r'"([A-Z]{4})"\s*$', "unmatched": "error"}}
    with caplog.at_level(logging.WARNING):
        _, labels, man = build_task("notes", spec)
    assert labels["labels"] == ["C0022646", "DISO"]
    written = man["traps"]["written_types_beside_note_types"]
    assert list(written) == ["C0022646"]
    assert {k: v for k, v in written["C0022646"].items() if k != "example"} == {
        "entities": 3, "without_note": 3, "unmatched_note": 0}
    assert written["C0022646"]["example"].endswith("train1.ann:2")
    assert man["traps"]["note_types_suspect"] == []  # no space or comma: only the new trap finds it
    log = caplog.text
    assert "task notes: 1 entity type written in the .ann becomes labels beside the 1 type read from notes" in log
    assert "'C0022646': 3 entities (3 without a note, 0 whose note yields no type), e.g. " in log
    assert "train1.ann:2" in log and "tasks.notes.entity_types: ['DISO']" in log
    assert "unmatched: error" not in log  # no note was unmatched: that key would change nothing
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # the key the warning names removes them
        _, labels, man = build_task("notes", {**spec, "entity_types": ["DISO"]})
    assert labels["labels"] == ["DISO"] and man["traps"]["written_types_beside_note_types"] == {}
    assert "written in the .ann" not in caplog.text


def test_written_types_of_unmatched_notes_are_warned_with_the_unmatched_key(tmp_path, caplog):
    """field: 3, unmatched: written (the docs' third form): a short note keeps the written type as a label."""
    _cui_docs(tmp_path, {"T1": '"C0015967", "Fièvre", "Sign or Symptom", "DISO"', "T2": '"C0022646", "rein"'})
    spec = {"type": "ner", "source": "brat", "path": str(tmp_path), "max_split_overlap": 1.0,
            "type_from_note": {"note": "AnnotatorNotes", "field": 3, "multi_group": "first", "unmatched": "written"}}
    with caplog.at_level(logging.WARNING):
        _, labels, man = build_task("notes", spec)
    assert labels["labels"] == ["C0022646", "DISO"]
    assert man["type_from_note"]["entities"]["unmatched_kept_written_type"] == 3
    entry = man["traps"]["written_types_beside_note_types"]["C0022646"]
    assert (entry["entities"], entry["without_note"], entry["unmatched_note"]) == (3, 0, 3)
    assert "(0 without a note, 3 whose note yields no type)" in caplog.text
    assert "tasks.notes.type_from_note.unmatched: error" in caplog.text
    with pytest.raises(TaskError, match=r"train1\.ann:4: AnnotatorNotes note of entity T2 .* yields no type"):
        build_task("notes", {**spec, "type_from_note": {**spec["type_from_note"], "unmatched": "error"}})


def test_written_types_renamed_by_type_map_or_without_note_types_are_not_warned(tmp_path, caplog):
    _cui_docs(tmp_path, {"T1": "DISO"})
    spec = {"type": "ner", "source": "brat", "path": str(tmp_path), "max_split_overlap": 1.0,
            "type_from_note": "AnnotatorNotes"}
    with caplog.at_level(logging.WARNING):  # the whole-value form too: the concept id is warned
        _, labels, man = build_task("notes", spec)
    assert labels["labels"] == ["C0022646", "DISO"]
    assert list(man["traps"]["written_types_beside_note_types"]) == ["C0022646"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # renamed by type_map: the researcher's own choice
        _, labels, man = build_task("notes", {**spec, "type_map": {"C0022646": "ANAT"}})
    assert labels["labels"] == ["ANAT", "DISO"] and man["traps"]["written_types_beside_note_types"] == {}
    assert "written in the .ann" not in caplog.text
    for split in ("train", "dev", "test"):  # no note at all: no type read from notes to stand beside
        (tmp_path / split / f"{split}1.ann").write_text(
            (tmp_path / split / f"{split}1.ann").read_text(encoding="utf-8").split("#1")[0], encoding="utf-8")
    _, labels, man = build_task("notes", spec)
    assert labels["labels"] == ["C0015967", "C0022646"] and man["traps"]["written_types_beside_note_types"] == {}


def test_a_note_pointing_at_no_entity_is_warned_with_its_line(tmp_path, caplog):
    _cui_docs(tmp_path, {"T1": '"C0015967", "Fièvre", "Sign or Symptom", "DISO"',
                         "T9": '"C0022646", "rein", "Body Part", "ANAT"'})
    spec = {"type": "ner", "source": "brat", "path": str(tmp_path), "max_split_overlap": 1.0,
            "type_from_note": {"field": -1}, "entity_types": ["DISO"]}
    with caplog.at_level(logging.WARNING):
        _, _, man = build_task("notes", spec)
    assert man["type_from_note"]["notes"]["without_entity"] == 3
    assert "train1.ann: 1 AnnotatorNotes note line(s) name an entity the file does not define" in caplog.text
    assert "tasks.notes.type_from_note types nothing from them), e.g. " in caplog.text
    assert caplog.text.count("ann:4") == 3  # one per file, each with its file:line
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # the whole-value form reads the same notes: warned as well
        build_task("notes", {**spec, "type_from_note": "AnnotatorNotes", "entity_types": None,
                             "type_map": {"C0022646": "ANAT"}})
    assert "train1.ann:4" in caplog.text and "hand-edited; tasks.notes.type_from_note types nothing" in caplog.text


def test_an_iob1_file_read_as_iob2_names_the_tag_scheme_key(tmp_path):
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.txt").write_text(f"-DOCSTART- ({split})\n\nLa O\nfièvre I-DISO\n{split} O\n\n",
                                               encoding="utf-8")
    spec = {"type": "ner", "source": "conll", "path": str(tmp_path), "max_split_overlap": 1.0,
            "splits": {s: f"{s}.txt" for s in ("train", "dev", "test")}}
    with pytest.raises(TaskError) as info:
        build_task("cn", spec)
    msg = str(info.value)
    assert "train.txt:3: tag 1 'I-DISO' continues no DISO entity (strict IOB2); if the file is IOB1" in msg
    assert "set tasks.cn.tag_scheme: iob1" in msg
    rows, _, _ = build_task("cn", {**spec, "tag_scheme": "iob1"})  # the key it names works
    assert rows["train"][0]["tags"] == ["O", "B-DISO", "O"]
    (tmp_path / "train.txt").write_text("La O\nfièvre I-DISO\ntrain X-DISO\n\n", encoding="utf-8")
    with pytest.raises(TaskError) as info:  # iob1 would not read it either: no hint
        build_task("cn", spec)
    assert "continues no DISO entity" in str(info.value) and "tag_scheme" not in str(info.value)


def test_counts_in_messages_take_the_number_of_their_noun():
    from clmdetour.textio import counted

    assert [counted(1, "record"), counted(2, "record"), counted(0, "entity", "entities"),
            counted(1, "entity", "entities")] == ["1 record", "2 records", "0 entities", "1 entity"]


# ---------------------------------------------------------------- item 7
def test_a_row_by_row_overlap_refusal_names_the_text_field_recipe(tmp_path):
    sentences = [f"le patient numéro {i} présente une fièvre persistante et une toux" for i in range(40)]
    rows = [{"id": f"r{3 * i + k}", "text": t, "label": "ab"[i % 2]} for i, t in enumerate(sentences) for k in range(3)]
    f = tmp_path / "all.jsonl"
    f.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    spec = {"type": "multiclass", "source": "jsonl", "path": str(f), "id_field": "id",
            "split": {"policy": "hash", "dev_fraction": 0.2, "test_fraction": 0.2}}
    with pytest.raises(TaskError) as info:
        build_task("one", spec)
    msg = str(info.value)
    assert "set tasks.one.doc_id_field to the field naming each row's document" in msg
    assert "when no field names a document, set tasks.one.doc_id_field: 'text' (the text field)" in msg
    assert "to keep the official split" not in msg  # the pipeline made this split
    _, _, man = build_task("one", {**spec, "doc_id_field": "text"})  # the recipe it names works
    assert man["split_overlap"]["test_overlapping"] == 0


# ---------------------------------------------------------------- item 8
def test_a_split_by_sentence_is_warned_in_the_log(tmp_path, caplog):
    sent = "".join(f"Phrase O\nnuméro O\n{i} O\navec O\nfièvre B-DISO\n\n" for i in range(30))
    for split in ("train", "test"):
        (tmp_path / f"{split}.txt").write_text(sent.replace("Phrase", split), encoding="utf-8")
    spec = {"type": "ner", "source": "conll", "path": str(tmp_path), "max_split_overlap": 1.0,
            "splits": {"train": "train.txt", "test": "test.txt"}}
    with caplog.at_level(logging.WARNING):
        _, _, man = build_task("cn", spec)
    assert man["split"]["dev"]["unit"].startswith("sentence")
    assert "task cn: dev is made sentence by sentence (the file marks no documents: no -DOCSTART- line" in caplog.text
    assert "by sentence: sentence" not in caplog.text
    assert "tasks.cn.doc_marker" in caplog.text


# ---------------------------------------------------------------- docs/tasks.md's examples, as written
def _docs_blocks() -> list[str]:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "tasks.md").read_text(encoding="utf-8")
    return [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]


def test_the_docs_exam_example_runs_on_json_arrays(tmp_path, caplog):
    import yaml

    (block,) = [b for b in _docs_blocks() if "splits: {train: train.json" in b]
    spec = yaml.safe_load(block)["tasks"]["frenchmedmcqa"]
    spec["path"] = str(tmp_path / "exam")
    parts = {split: [{"id": r["id"], "question": r["question"], "answers": r["options"],
                      "correct_answers": r["correct_answers"], "subject_name": "pharmacie"} for r in rows]
             for split, rows in _exam().items()}
    parts["train"].append(dict(parts["train"][0]))  # the same record twice under one id
    write_json_arrays(tmp_path / "exam", parts)
    with caplog.at_level(logging.WARNING):
        rows, labels, man = build_task("frenchmedmcqa", spec)
    assert [len(rows[s]) for s in ("train", "dev", "test")] == [60, 20, 20] and labels["labels"] == KEYS
    assert man["duplicates"]["dropped_total"] == 1 and man["split_overlap"]["shared_first_text"]["train-test"] == 20
    assert resolve_task_spec("frenchmedmcqa", spec)["table_metrics"] == ["emr"]


def test_the_docs_first_type_from_note_form_stops_on_a_note_without_a_group(tmp_path):
    import yaml

    (block,) = [b for b in _docs_blocks() if b.startswith("type_from_note: {regex:")]
    rule = yaml.safe_load(block.splitlines()[0])["type_from_note"]
    assert rule["unmatched"] == "error"
    for split in ("train", "dev", "test"):
        text = f"Le document {split} signale de la glycine."
        b = text.index("glycine")
        _brat(tmp_path, split, f"{split}1", text, f"T1\tC0017890 {b} {b + 7}\tglycine\n"
              '#1\tAnnotatorNotes T1\t"C0017890", "glycine", "Amino Acid, Peptide, or Protein"\n')
    with pytest.raises(TaskError, match=r"train1\.ann:2: AnnotatorNotes note of entity T1 .* yields no type"):
        build_task("notes", {"type": "ner", "source": "brat", "path": str(tmp_path), "type_from_note": rule})
