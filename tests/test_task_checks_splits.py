"""A researcher's own task, first try (issue 51, follow-up): an exam question re-used with its options shuffled is
a leak and an identical record; a `splits` map naming one file twice or an empty name is refused at planning,
naming the key; an empty split file is named alone. Small synthetic files only."""

from __future__ import annotations

import random

import pytest
from helpers import REPO, mc_spec, write_json_arrays

from clmdetour.config import ConfigError, deep_merge, load_yaml, validate_config
from clmdetour.tasks import overlap
from clmdetour.tasks.prepare import build_task
from clmdetour.tasks.spec import TaskError, resolve_task_spec
from clmdetour.tasks.traps import identical_records
from clmdetour.tasktypes import TASK_TYPES, TaskType, get_task_type
from clmdetour.tasktypes.multiple_choice import option_order

KEYS = ["a", "b", "c", "d", "e"]
SWAP = {"a": "e", "b": "d", "c": "c", "d": "b", "e": "a"}  # a <-> e, b <-> d


def _question(qid: str, i: int, n_answers: int) -> dict:
    rng = random.Random(i)
    return {"id": qid, "question": f"Question {i} : quel organe {rng.randint(0, 10**6)} est concerné ici ?",
            "options": {k: f"le choix {k} de la question {i} numéro {rng.randint(0, 10**6)}" for k in KEYS},
            "correct_answers": KEYS[:n_answers]}


def _shuffled(rec: dict, qid: str) -> dict:
    """``rec`` with its option keys permuted (a <-> e, b <-> d): same question, option texts and correct texts,
    the options listed again in key order a..e (as an exam file writes them)."""
    return {"id": qid, "question": rec["question"], "options": {k: rec["options"][SWAP[k]] for k in KEYS},
            "correct_answers": sorted(SWAP[k] for k in rec["correct_answers"])}


def _exam() -> dict[str, list[dict]]:
    return {"train": [_question(f"tr-{j}", j, 1 + j % 2) for j in range(40)],
            "dev": [_question(f"dv-{j}", 100 + j, 1 + j % 2) for j in range(20)],
            "test": [_question(f"te-{j}", 200 + j, 1 + j % 2) for j in range(20)]}


# ---------------------------------------------------------------- shuffled options
def test_a_test_question_with_shuffled_options_is_a_leak_and_an_identical_record(tmp_path):
    parts = _exam()
    parts["test"][3] = _shuffled(parts["train"][5], "te-3")
    shuffled = parts["test"][3]
    assert [shuffled["options"][k] for k in KEYS] != [parts["train"][5]["options"][k] for k in KEYS]
    write_json_arrays(tmp_path / "exam", parts)
    with pytest.raises(TaskError, match=r"1 of 20 test examples \(5\.0 %\) has the same question and options"):
        build_task("mcqa", mc_spec(tmp_path / "exam"))
    _, _, man = build_task("mcqa", mc_spec(tmp_path / "exam", max_split_overlap=0.05))
    assert man["split_overlap"]["pairs"]["train-test"] == {"exact": 1, "near_exact": 1}
    assert man["split_overlap"]["test_overlapping_ids"] == ["te-3"]
    ident = man["traps"]["identical_records"]
    assert ident["groups"] == 1 and ident["across_splits"] == 1 and ident["examples"] == [["train:tr-5", "test:te-3"]]
    # the same texts answering the same options under other keys is not a label conflict
    assert man["conflicting_labels"]["texts"] == 0
    # the prepared rows keep the options as the file gives them (what the model and decontamination see)
    rows, _, _ = build_task("mcqa", mc_spec(tmp_path / "exam", max_split_overlap=0.05))
    test3 = next(r for r in rows["test"] if r["id"] == "te-3")
    assert test3["options"] == [shuffled["options"][k] for k in KEYS] and test3["answers"] == ["d", "e"]


def test_shuffled_options_with_another_correct_option_are_not_identical_but_conflict(tmp_path):
    parts = _exam()
    other = _shuffled(parts["train"][5], "te-3")
    other["correct_answers"] = ["c"]  # same question and options, another answer
    parts["test"][3] = other
    write_json_arrays(tmp_path / "exam", parts)
    _, _, man = build_task("mcqa", mc_spec(tmp_path / "exam", max_split_overlap=0.05))
    assert man["split_overlap"]["test_overlapping_ids"] == ["te-3"]  # the input is still shared
    assert man["traps"]["identical_records"]["groups"] == 0
    assert man["conflicting_labels"]["texts"] == 1 and man["conflicting_labels"]["across"]["train-test"] == 1


def test_option_order_ignores_case_and_punctuation_so_near_copies_still_match():
    mc = get_task_type("multiple_choice")
    row = {"id": "x", "text": "Quelle est la bonne réponse ici, selon vous ?", "options": ["Bêta bloquant", "alpha", "gamma"],
           "option_keys": ["a", "b", "c"], "answers": ["a"]}
    near = {"id": "y", "text": row["text"], "options": ["GAMMA.", "Alpha", "bêta-bloquant"],
            "option_keys": ["a", "b", "c"], "answers": ["c"]}
    assert mc.compared_texts(row) == (row["text"], "alpha", "Bêta bloquant", "gamma")
    assert mc.compared_texts(near)[1:] == ("Alpha", "bêta-bloquant", "GAMMA.")
    assert option_order("Bêta bloquant")[0] == option_order("bêta-bloquant")[0] == ("bêta", "bloquant")
    rep = overlap.split_overlap({"train": [row], "dev": [], "test": [near]}, min_words=1, texts=mc.compared_texts)
    assert rep["pairs"]["train-test"] == {"exact": 0, "near_exact": 1}
    # answers compare case-folded (checkable-scores item 4), a hyphen still tells them apart; shown as written
    assert mc.compared_label_key(row) == ("bêta bloquant",) and mc.compared_label_key(near) == ("bêta-bloquant",)
    assert mc.shown_label_key(row) == ("Bêta bloquant",)
    assert mc.example_texts(near) == (row["text"], "GAMMA.", "Alpha", "bêta-bloquant")  # the model's order kept


def test_other_types_compare_what_they_did_before():
    """Only multiple choice reorders its parts: every other type compares example_texts and label_key."""
    for name, ttype in TASK_TYPES.items():
        if name == "multiple_choice":
            continue
        assert type(ttype).compared_texts is TaskType.compared_texts, name
        assert type(ttype).compared_label_key is TaskType.compared_label_key, name
    sim = get_task_type("similarity")
    row = {"id": "p", "text": "deux", "text_pair": "un", "score": 1.0}
    assert sim.compared_texts(row) == sim.example_texts(row) == ("deux", "un")
    ident = identical_records({"train": [row, dict(row, id="q", text="un", text_pair="deux")], "dev": [], "test": []},
                              sim)
    assert ident["groups"] == 0  # a pair's order is what the model sees: not reordered


# ---------------------------------------------------------------- splits refused at planning
def test_two_splits_naming_one_file_are_refused_at_planning_naming_both_keys(tmp_path):
    write_json_arrays(tmp_path / "exam", _exam())
    spec = mc_spec(tmp_path / "exam", splits={"train": "train.json", "dev": "train.json", "test": "test.json"})
    msg = "tasks.mcqa.splits.dev and tasks.mcqa.splits.train name the same file 'train.json'"
    with pytest.raises(TaskError, match="^" + msg.replace(".", r"\.") + ".*leave dev out to derive it from train"):
        resolve_task_spec("mcqa", spec)
    with pytest.raises(TaskError, match=msg.replace(".", r"\.")):
        build_task("mcqa", spec)
    same = mc_spec(tmp_path / "exam", splits={"train": "train.json", "dev": "dev.json", "test": "./dev.json"})
    with pytest.raises(TaskError, match=r"tasks\.mcqa\.splits\.test and tasks\.mcqa\.splits\.dev name the same file "
                                        r"'\./dev\.json'"):
        resolve_task_spec("mcqa", same)
    resolve_task_spec("mcqa", mc_spec(tmp_path / "exam"))  # distinct names pass


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_split_name_is_refused_at_planning_naming_the_key(tmp_path, name):
    write_json_arrays(tmp_path / "exam", _exam())
    spec = mc_spec(tmp_path / "exam", splits={"train": "train.json", "dev": name, "test": "test.json"})
    with pytest.raises(TaskError, match=r"^tasks\.mcqa\.splits\.dev: an empty file name .*leave dev out"):
        resolve_task_spec("mcqa", spec)
    test_blank = mc_spec(tmp_path / "exam", splits={"train": "train.json", "test": "  "})
    with pytest.raises(TaskError, match=r"^tasks\.mcqa\.splits\.test: an empty file name"):
        resolve_task_spec("mcqa", test_blank)


def test_the_schema_refuses_an_empty_split_name_naming_the_key(tmp_path):
    cfg = deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml"))
    cfg["tasks"]["mcqa"] = mc_spec(tmp_path / "exam", splits={"train": "train.json", "dev": "", "test": "test.json"})
    with pytest.raises(ConfigError, match=r"config key 'tasks\.mcqa\.splits\.dev': '' should be non-empty"):
        validate_config(cfg)


def test_the_schema_refuses_an_empty_type_from_note_naming_the_key():
    """``type_from_note: ''`` would silently read no note at all (the concept ids stay the labels)."""
    cfg = deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml"))
    cfg["tasks"]["emea"]["type_from_note"] = ""
    with pytest.raises(ConfigError, match=r"config key 'tasks\.emea\.type_from_note': '' should be non-empty"):
        validate_config(cfg)
    cfg["tasks"]["emea"]["type_from_note"] = "AnnotatorNotes"
    validate_config(cfg)


# ---------------------------------------------------------------- an empty split file
def test_an_empty_json_array_names_its_own_file_and_split(tmp_path):
    parts = _exam()
    parts["train"] = []
    write_json_arrays(tmp_path / "exam", parts)
    with pytest.raises(TaskError) as info:
        build_task("mcqa", mc_spec(tmp_path / "exam"))
    msg = str(info.value)
    assert msg == f"{tmp_path / 'exam' / 'train.json'}: split 'train' of task 'mcqa' is empty (0 examples)"
    assert "dev.json" not in msg and "test.json" not in msg
