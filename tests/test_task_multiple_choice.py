"""The ``multiple_choice`` task type (FrenchMedMCQA's kind): reader, contract, metrics, trivial baseline,
and prepare -> one fine-tuning seed of a tiny local ModernBERT -> a table row beside its trivial baseline."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest
from helpers_finetune import job_settings

from clmdetour.evaluation.trivial import trivial_baseline
from clmdetour.tasks.contract import TaskDataError, load_task_data, write_task
from clmdetour.tasks.formats import read_table
from clmdetour.tasks.prepare import build_task
from clmdetour.tasktypes import TASK_TYPES, get_task_type
from clmdetour.tasktypes.multiple_choice import answer_set_scores, best_constant_answer_set
from clmdetour.tasktypes.records import FormatError

MC = get_task_type("multiple_choice")
FT = {"lr_grid": [3e-3], "epochs": 2, "batch_size": 16, "warmup_ratio": 0.1, "weight_decay": 1e-5,
      "betas": [0.9, 0.98], "eps": 1e-6}
KEYS = ["a", "b", "c", "d", "e"]


def test_registered_with_its_contract():
    assert TASK_TYPES["multiple_choice"] is MC
    assert list(MC.features()) == ["id", "text", "options", "option_keys", "answers"]
    assert MC.default_metric == "hamming" and MC.metrics == ("hamming", "emr")


def test_hamming_score_and_exact_match_ratio_as_defined():
    gold = [{"a"}, {"a", "c"}, {"b", "d", "e"}]
    pred = [{"a"}, {"a", "b"}, {"d"}]
    s = answer_set_scores(gold, pred)
    assert s["emr"] == pytest.approx(1 / 3)
    assert s["hamming"] == pytest.approx((1 + 1 / 3 + 1 / 3) / 3)  # |P∩G| / |P∪G| per question
    with pytest.raises(ValueError, match="equal"):
        answer_set_scores(gold, pred[:2])


def test_reader_takes_a_mapping_a_list_or_one_field_per_option(tmp_path):
    rows = [{"id": "q1", "question": "Quel organe filtre le sang ?", "choices": {"a": "le rein", "b": "le foie", "c": "l'œil"},
             "correct": ["a", "b"]}]
    (tmp_path / "map.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n")
    fields = {"text_field": "question", "options_field": "choices", "label_field": "correct", "id_field": "id"}
    row = read_table(tmp_path / "map.jsonl", "jsonl", TASK_TYPES["multiple_choice"], fields)[0]
    assert (row["text"], row["option_keys"], row["answers"]) == ("Quel organe filtre le sang ?", ["a", "b", "c"], ["a", "b"])
    assert row["options"] == ["le rein", "le foie", "l'œil"]
    # FrenchMedMCQA's layout: one field per option, the correct keys as a list
    frenchmedmcqa = {"id": "f1", "question": "Q ?", **{f"answer_{k}": f"option {k}" for k in KEYS}, "correct_answers": ["c"]}
    (tmp_path / "fields.jsonl").write_text(json.dumps(frenchmedmcqa) + "\n")
    fields = {"text_field": "question", "options_field": [f"answer_{k}" for k in KEYS], "option_keys": KEYS,
              "label_field": "correct_answers", "id_field": "id"}
    row = read_table(tmp_path / "fields.jsonl", "jsonl", TASK_TYPES["multiple_choice"], fields)[0]
    assert row["option_keys"] == KEYS and row["options"][2] == "option c" and row["answers"] == ["c"]
    # a list of options keyed a, b ... by default, answers as a "|"-separated string
    (tmp_path / "list.jsonl").write_text(json.dumps({"q": "Q ?", "opts": ["x", "y", "z"], "ans": "c|a"}) + "\n")
    row = read_table(tmp_path / "list.jsonl", "jsonl", TASK_TYPES["multiple_choice"], {"text_field": "q", "options_field": "opts",
                                                                            "label_field": "ans", "id_field": None})[0]
    assert row["option_keys"] == ["a", "b", "c"] and row["answers"] == ["a", "c"]


@pytest.mark.parametrize("record, message", [
    ({"q": "Q ?", "opts": ["x", "y"], "ans": ["c"]}, r"bad\.jsonl:1: correct option\(s\) \['c'\] are not among the option keys \['a', 'b'\]"),
    ({"q": "Q ?", "ans": ["a"]}, r"bad\.jsonl:1: options field 'opts' \(options_field\) missing"),
    ({"q": "Q ?", "opts": ["x"], "ans": ["a"]}, r"bad\.jsonl:1: a multiple-choice question needs at least 2 options"),
    ({"q": "Q ?", "opts": ["x", ""], "ans": ["a"]}, r"bad\.jsonl:1: option 'b' is not a non-empty string"),
    ({"q": "Q ?", "opts": ["x", "y"], "ans": []}, r"bad\.jsonl:1: no correct option in 'ans'"),
])
def test_reader_names_the_line_of_a_bad_question(tmp_path, record, message):
    (tmp_path / "bad.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(FormatError, match=message):
        read_table(tmp_path / "bad.jsonl", "jsonl", TASK_TYPES["multiple_choice"],
                   {"text_field": "q", "options_field": "opts", "label_field": "ans", "id_field": None})


def test_trivial_is_the_best_constant_answer_set():
    train = [["a"], ["a"], ["a", "b"], ["c"]]
    test = [["a"], ["b"], ["a", "b"]]
    triv = best_constant_answer_set(train, test, ["a", "b", "c"], "emr")
    assert triv.prediction == "options ['a']" and triv.train_score == pytest.approx(0.5)
    assert triv.score == pytest.approx(1 / 3)
    ham = best_constant_answer_set(train, test, ["a", "b", "c"], "hamming")
    # {a}: (1 + 1 + 0.5 + 0) / 4 = 0.625 on train beats {a, b}: (0.5 + 0.5 + 1 + 0) / 4
    assert ham.prediction == "options ['a']" and ham.train_score == pytest.approx(0.625)
    with pytest.raises(ValueError, match="metric"):
        best_constant_answer_set(train, test, ["a"], "f1_macro")


def _questions(n: int, seed: int) -> list[dict]:
    """Questions naming a symptom; the correct options are the ones that mention it (learnable from text)."""
    rng = random.Random(seed)
    symptoms = ["fièvre", "toux", "douleur", "nausée", "fatigue", "vertige", "éruption", "dyspnée"]
    rows = []
    for i in range(n):
        target = rng.choice(symptoms)
        others = [s for s in symptoms if s != target]
        correct = sorted(rng.sample(KEYS, rng.choice([1, 1, 2])))
        options = {k: (f"le patient présente une {target} depuis {rng.randint(2, 9)} jours" if k in correct
                       else f"le patient présente une {rng.choice(others)} isolée") for k in KEYS}
        rows.append({"id": f"q{seed}-{i}", "question": f"Dossier {seed}-{i}, patient de {rng.randint(20, 90)} ans : quelles observations décrivent une {target} ?",
                     "options": options, "correct_answers": correct})
    return rows


def _write_split_files(folder, rows):
    folder.mkdir(parents=True)
    for split, part in (("train", rows[:60]), ("dev", rows[60:75]), ("test", rows[75:])):
        (folder / f"{split}.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in part) + "\n")


def test_prepare_finetune_one_seed_and_table_row_beside_the_trivial_baseline(tmp_path):
    from helpers import tiny_modernbert, train_tokenizer

    from clmdetour.evaluation.table import write_eval_tables
    from clmdetour.finetune.job import FinetuneJob
    from clmdetour.finetune.run import run_task

    rows = _questions(90, seed=4)
    _write_split_files(tmp_path / "raw", rows)
    spec = {"type": "multiple_choice", "source": "jsonl", "path": str(tmp_path / "raw"), "text_field": "question",
            "options_field": "options", "label_field": "correct_answers", "id_field": "id",
            "max_split_overlap": 1.0}
    splits, labels_json, manifest = build_task("mcqa", spec)
    assert labels_json["labels"] == KEYS and labels_json["metric"] == "hamming"
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [60, 15, 15]
    folder = tmp_path / "tasks" / "mcqa"
    write_task(folder, splits, labels_json, manifest)
    data = load_task_data(folder, "mcqa")
    assert data.task_type.name == "multiple_choice" and data.labels == KEYS

    texts = [r["question"] + " " + " ".join(r["options"].values()) for r in rows]
    tok = train_tokenizer(texts, vocab_size=300)
    model = tiny_modernbert(tok, tmp_path / "model", hidden_size=32, num_layers=2)
    cfg = {"type": "multiple_choice", "metric": "hamming", "max_length": 48, "seeds": 1, "finetune": FT}
    outputs = {0: tmp_path / "runs" / "seed0.json"}
    (rec,) = run_task(FinetuneJob.from_params(model="tiny", task="mcqa", model_dir=model, task_dir=folder, task_config=cfg,
                      settings=job_settings(attn_implementation="auto"), outputs=outputs, threads=1))
    assert rec["status"] == "ok" and rec["task_type"] == "multiple_choice"
    assert set(rec["metrics"]) == {"hamming", "emr"} and 0.0 <= rec["metrics"]["emr"] <= rec["metrics"]["hamming"] <= 1.0
    assert rec["data"]["model_inputs"]["test"] == 5 * 15  # one input per (question, option) pair
    from clmdetour.evaluation.rescore import rescore_record

    rescored = rescore_record(outputs[0], task_data=data)  # its saved predictions give its scores, gold the task's
    assert rescored.ok, rescored.problems
    assert rescored.recomputed["test"] == pytest.approx(rec["metrics"])

    table = write_eval_tables(expected=[("tiny", "mcqa", 0)], paths={("tiny", "mcqa", 0): outputs[0]}, models=["tiny"],
                              tasks=["mcqa"], baseline="tiny", allow_missing=False, runs_tsv=tmp_path / "runs.tsv",
                              table_tsv=tmp_path / "table.tsv", table_md=tmp_path / "table.md", tie_tolerance=0.0,
                              task_dirs={"mcqa": folder})
    back = pd.read_csv(tmp_path / "table.tsv", sep="\t").set_index("model")
    assert list(back.index) == ["tiny", "trivial"]
    assert back.loc["tiny", "mcqa_mean"] == pytest.approx(rec["metrics"]["hamming"], abs=1e-6)
    triv = trivial_baseline(folder, "mcqa")
    assert back.loc["trivial", "mcqa_mean"] == pytest.approx(triv.score, abs=1e-6) and triv.prediction.startswith("options")
    md = (tmp_path / "table.md").read_text()
    assert "Hamming score" in md
    # every table metric's trivial baseline, with multiple choice's own two rules
    assert "every option of each question" in md and "the most frequent answer set of train" in md
    assert table is not None


def test_a_label_outside_the_options_is_refused_by_the_contract(tmp_path):
    rows = _questions(90, seed=5)
    _write_split_files(tmp_path / "raw", rows)
    spec = {"type": "multiple_choice", "source": "jsonl", "path": str(tmp_path / "raw"), "text_field": "question",
            "options_field": "options", "label_field": "correct_answers", "id_field": "id", "max_split_overlap": 1.0}
    splits, labels_json, manifest = build_task("mcqa", spec)
    labels_json["labels"] = ["a", "b"]  # a stale labels.json
    write_task(tmp_path / "t", splits, labels_json, manifest)
    with pytest.raises(TaskDataError, match=r"has label 'c' not in labels\.json"):
        load_task_data(tmp_path / "t", "mcqa")


def _spec(raw, **over):
    return {"type": "multiple_choice", "source": "jsonl", "path": str(raw), "text_field": "question",
            "options_field": "options", "label_field": "correct_answers", "id_field": "id", "max_split_overlap": 1.0,
            **over}


def test_a_key_never_correct_in_train_is_still_a_key(tmp_path):
    """Option keys are positions, not classes: the model scores each (question, option) pair, so a key
    that is never right in train (here ``e``) is answered in dev and test like any other."""
    rows = _questions(90, seed=6)
    for r in rows[:60]:
        if r["correct_answers"] == ["e"]:
            r["correct_answers"] = ["a"]
        r["correct_answers"] = [k for k in r["correct_answers"] if k != "e"] or ["a"]
    rows[70]["correct_answers"] = ["e"]
    _write_split_files(tmp_path / "raw", rows)
    _splits, labels_json, manifest = build_task("mcqa", _spec(tmp_path / "raw"))
    assert labels_json["labels"] == KEYS
    assert "e" not in manifest["label_counts"]["train"] and manifest["label_counts"]["dev"]["e"] >= 1


@pytest.mark.parametrize("over, message", [
    ({"metric": "f1_macro"}, (r"tasks\.mcqa\.metric: 'f1_macro' is not a metric of a multiple_choice task; one of "
                             r"\('hamming', 'emr'\)")),
    ({"option_keys": ["a", "a", "b"]}, r"tasks\.mcqa\.option_keys: keys repeat"),
    ({"options_field": ["answer_a", "answer_b", "answer_c"], "option_keys": ["a", "b"]},
     r"tasks\.mcqa\.option_keys: 2 keys for the 3 option fields of tasks\.mcqa\.options_field"),
])
def test_a_metric_or_option_keys_that_cannot_work_are_refused_at_planning(tmp_path, over, message):
    from clmdetour.tasks.spec import TaskError, resolve_task_spec

    (tmp_path / "raw").mkdir()
    with pytest.raises(TaskError, match=message):
        resolve_task_spec("mcqa", _spec(tmp_path / "raw", **over))


def test_one_answer_written_two_ways_is_no_conflict_and_a_real_conflict_names_both_spellings():
    """Issue checkable-scores item 4: ``Anémie`` / ``anémie`` and ``0.75`` / ``0,75`` were counted as conflicting
    labels; a conflict that remains shows each answer with its spellings."""
    from clmdetour.tasks import overlap
    from clmdetour.tasktypes import get_task_type
    from clmdetour.tasktypes.multiple_choice import answer_form

    assert answer_form(" Anémie ") == answer_form("anémie") and answer_form("0,75 mg") == answer_form("0.75  mg")
    assert answer_form("1,2,3") == "1.2.3" and answer_form("a, b") == "a, b"  # only a comma between digits
    mc = get_task_type("multiple_choice")

    def row(i, answer_text, other="Fer"):
        return {"id": f"q{i}", "text": "Quel diagnostic ?", "options": [answer_text, other], "option_keys": ["a", "b"],
                "answers": ["a"]}

    same = {"train": [row(0, "Anémie")], "test": [row(1, "anémie")]}
    report = overlap.conflicting_labels(same, mc.compared_label_key, mc.compared_texts, spelling=mc.shown_label_key)
    assert report["texts"] == 0
    decimal = {"train": [row(0, "0.75", "1")], "test": [row(1, "0,75", "1")]}
    assert overlap.conflicting_labels(decimal, mc.compared_label_key, mc.compared_texts)["texts"] == 0
    differ = {"train": [row(0, "Anémie"), row(2, "anémie")], "test": [row(1, "Fer", "Anémie")]}
    report = overlap.conflicting_labels(differ, mc.compared_label_key, mc.compared_texts, spelling=mc.shown_label_key)
    assert report["texts"] == 1
    assert report["examples"][0]["labels"] == ["Anémie / anémie", ["Fer"]]
