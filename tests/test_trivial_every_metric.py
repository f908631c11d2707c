"""Issue checkable-scores item 3: a trivial baseline for every metric the table shows, by rules the type declares
(multiple choice: every option, and the most frequent answer set of train, for EMR and Hamming both)."""

from __future__ import annotations

import pytest


def _mc_row(i, keys, answers):
    return {"id": f"q{i}", "text": f"question {i}", "options": [f"option {k}" for k in keys], "option_keys": keys,
            "answers": answers}


def test_multiple_choice_declares_every_option_and_the_most_frequent_answer_set():
    from clmdetour.tasktypes import get_task_type
    from clmdetour.tasktypes.multiple_choice import answer_set_scores

    mc = get_task_type("multiple_choice")
    train = [_mc_row(0, ["a", "b", "c"], ["a"]), _mc_row(1, ["a", "b", "c"], ["a"]), _mc_row(2, ["a", "b", "c"], ["b", "c"])]
    test = [_mc_row(3, ["a", "b", "c"], ["a"]), _mc_row(4, ["a", "b"], ["a", "b"])]
    (every_rule, every), (frequent_rule, frequent) = mc.extra_trivial(train, test, ["a", "b", "c"])
    assert every_rule == "every option of each question"
    assert every == answer_set_scores([{"a"}, {"a", "b"}], [{"a", "b", "c"}, {"a", "b"}])
    assert every["emr"] == 0.5 and every["hamming"] == pytest.approx((1 / 3 + 1) / 2)
    assert frequent_rule.startswith("the most frequent answer set of train, ['a'] (2 of 3)")
    assert frequent == {"hamming": pytest.approx(0.75), "emr": 0.5}
    # the other types declare none: their per-metric best constant is the rule
    assert get_task_type("multiclass").extra_trivial([], [], []) == []


def test_every_table_metric_gets_its_trivial_baseline(tmp_path):
    from helpers_finetune import demo_task_rows, write_task_folder

    from clmdetour.evaluation.table import trivial_baselines_note
    from clmdetour.evaluation.trivial import trivial_baselines

    rows = demo_task_rows("multiclass", 40, seed=3)
    folder = write_task_folder(tmp_path / "t", "t", "multiclass",
                               {"train": rows[:24], "dev": rows[24:32], "test": rows[32:]}, "f1_macro")
    found = trivial_baselines(folder, "t", ["f1_macro", "f1_micro"])
    assert [m for m, _, _ in found] == ["f1_macro", "f1_micro"]
    assert all(rule.startswith("best constant on train: class") and 0 <= v <= 1 for _, rule, v in found)
    note = trivial_baselines_note(["t", "absent"], {"t": folder}, {"t": ["f1_macro", "f1_micro"]}, 100.0)
    assert "`t`: f1_macro" in note and "; f1_micro" in note and "absent" not in note
