"""The trivial baseline: the best constant predictor of a task, chosen on train, scored on test."""
import pytest

from clmdetour.evaluation.trivial import best_constant_class, best_constant_label_set, no_entities, trivial_baseline
from clmdetour.tasks.contract import write_task


def test_multiclass_best_single_class_by_hand():
    train, test = ["a", "a", "a", "b", "c"], ["a", "b", "b", "c"]
    res = best_constant_class(train, test, ["a", "b", "c"], "f1_macro")
    # train, all 'a': F1_a = 2*3/(2*3 + 2) = 0.75, b and c 0 -> 0.25 (all 'b': 2/6 / 3 = 0.111)
    assert res.prediction == "class 'a'" and res.train_score == pytest.approx(0.25)
    # test, all 'a': F1_a = 2*1/(2*1 + 3) = 0.4 over 3 classes present
    assert res.score == pytest.approx(0.4 / 3)
    micro = best_constant_class(train, test, ["a", "b", "c"], "f1_micro")
    assert micro.prediction == "class 'a'" and micro.score == pytest.approx(0.25)  # accuracy 1/4


def test_multiclass_choice_is_made_on_train_not_test():
    res = best_constant_class(["a", "a", "b"], ["b", "b", "b"], ["a", "b"], "f1_macro")
    assert res.prediction == "class 'a'" and res.score == 0.0


ML_TRAIN = [["x", "y"], ["x"], ["x", "z"], ["y"], ["x", "y"]]   # document frequency x 4, y 3, z 1
ML_TEST = [["y"], ["x", "z"], []]


def test_multilabel_top_k_by_hand():
    # macro F1 on train: k=0 0; k=1 (8/9)/3; k=2 (8/9 + 6/8)/3; k=3 (8/9 + 6/8 + 2/6)/3 = 0.657 -> k = 3
    res = best_constant_label_set(ML_TRAIN, ML_TEST, ["x", "y", "z"], "f1_macro")
    assert res.prediction == "labels ['x', 'y', 'z']"
    assert res.train_score == pytest.approx((8 / 9 + 6 / 8 + 2 / 6) / 3)
    assert res.score == pytest.approx(0.5)  # each label: 1 gold, 3 predicted, 1 hit: 2/(2+2) = 0.5
    # micro F1 on train: k=1 8/13, k=2 14/18, k=3 16/23 -> k = 2; test: tp 2, fp 4, fn 1 -> 4/9
    micro = best_constant_label_set(ML_TRAIN, ML_TEST, ["x", "y", "z"], "f1_micro")
    assert micro.prediction == "labels ['x', 'y']"
    assert micro.train_score == pytest.approx(14 / 18) and micro.score == pytest.approx(4 / 9)


def test_multilabel_label_set_is_chosen_on_train_not_test():
    # micro F1 on train: k=1 {x}: 8/9; k=2 {x, y}: 10/13 -> k = 1, which finds nothing of test's y
    res = best_constant_label_set([["x"], ["x"], ["x", "y"], ["x"]], [["y"], ["y"]], ["x", "y"], "f1_micro")
    assert res.prediction == "labels ['x']" and res.train_score == pytest.approx(8 / 9) and res.score == 0.0
    with pytest.raises(ValueError, match="not in the label set"):
        best_constant_label_set([["q"]], [[]], ["x"], "f1_macro")


def test_ner_no_entities_scores_zero():
    tags = [["B-CHEM", "I-CHEM", "O"], ["O", "B-DISO"]]
    for metric in ("f1_micro", "f1_macro"):
        res = no_entities(tags, tags, metric)
        assert res.score == 0.0 and res.train_score == 0.0 and res.prediction == "no entities"
    with pytest.raises(ValueError, match="metric"):
        no_entities(tags, tags, "accuracy")


def _task(folder, name, task_type, rows, labels, metric):
    labels_json = {"task": name, "type": task_type, "labels": labels, "metric": metric}
    if task_type == "ner":
        labels_json["tags"] = ["O"] + [f"{p}-{t}" for t in labels for p in ("B", "I")]
    write_task(folder, rows, labels_json, {"task": name, "files": []})
    return folder


def test_trivial_baseline_of_task_folders_of_each_type(tmp_path):
    def mc(split, labels):
        return [{"id": f"{split}{i}", "text": "t", "label": x} for i, x in enumerate(labels)]

    def ml(split, sets):
        return [{"id": f"{split}{i}", "text": "t", "labels": x} for i, x in enumerate(sets)]

    folder = _task(tmp_path / "mc", "mc", "multiclass",
                   {"train": mc("tr", ["a", "a", "a", "b", "c"]), "dev": mc("d", ["a"]), "test": mc("te", ["a", "b", "b", "c"])},
                   ["a", "b", "c"], "f1_macro")
    assert trivial_baseline(folder, "mc").score == pytest.approx(0.4 / 3)
    assert trivial_baseline(folder, "mc", metric="f1_micro").score == pytest.approx(0.25)

    folder = _task(tmp_path / "ml", "ml", "multilabel",
                   {"train": ml("tr", ML_TRAIN), "dev": ml("d", [["x"]]), "test": ml("te", ML_TEST)}, ["x", "y", "z"], "f1_macro")
    assert trivial_baseline(folder, "ml").score == pytest.approx(0.5)

    ner_rows = [{"id": "n0", "text": "a b", "words": ["a", "b"], "word_offsets": [[0, 1], [2, 3]], "tags": ["B-CHEM", "O"]}]
    folder = _task(tmp_path / "ner", "ner", "ner", {"train": ner_rows, "dev": ner_rows, "test": ner_rows}, ["CHEM"], "f1_micro")
    res = trivial_baseline(folder, "ner")
    assert res.score == 0.0 and res.metric == "f1_micro"

    from clmdetour.finetune.run import TaskDataError
    with pytest.raises(TaskDataError, match="describes task 'ner', not 'other'"):
        trivial_baseline(folder, "other")
