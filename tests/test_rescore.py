"""Issue checkable-scores items 1-2: every fine-tune run saves its predictions, and every score can be recomputed
from them and the task's gold (``python -m clmdetour.evaluation.rescore``); the table is built from the
recomputed scores, and a record or a file changed after the run is caught."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest

CFG = {"metric": "f1_macro", "max_length": 64, "seeds": 1,
       "finetune": {"lr_grid": [0.003], "epochs": 2, "batch_size": 8, "warmup_ratio": 0.1,
                    "weight_decay": 1e-5, "betas": [0.9, 0.98], "eps": 1e-6}}


def _job(tmp_path, demo_tokenizer, task_type: str):
    from helpers import tiny_modernbert
    from helpers_finetune import demo_task_rows, job_settings, write_task_folder

    from clmdetour.finetune import run as R
    from clmdetour.finetune.job import FinetuneJob

    model_dir = tiny_modernbert(demo_tokenizer, tmp_path / "model", hidden_size=32, num_layers=2)
    rows = demo_task_rows(task_type, 40, seed=3, noise=0.1)
    metric = "f1_micro" if task_type == "ner" else "f1_macro"
    task_dir = write_task_folder(tmp_path / "tasks" / "t", "t", task_type,
                                 {"train": rows[:24], "dev": rows[24:32], "test": rows[32:]}, metric)
    out = tmp_path / "eval" / "tiny" / "t" / "seed0.json"
    R.run_task(FinetuneJob.from_params(model="tiny", task="t", model_dir=model_dir, task_dir=task_dir,
               task_config=dict(CFG, type=task_type, metric=metric),
               settings=job_settings(tie_tolerance=0.0005, attn_implementation="auto"), outputs={0: out}, threads=1))
    return out, task_dir


@pytest.mark.parametrize("task_type", [pytest.param("ner", marks=pytest.mark.slow), "multiclass", "multilabel"])
def test_a_run_saves_predictions_that_give_its_scores(tmp_path, demo_tokenizer, task_type, capsys):
    from clmdetour.evaluation import rescore
    from clmdetour.tasktypes.rescoring import predictions_path

    out, _task_dir = _job(tmp_path, demo_tokenizer, task_type)
    record = json.loads(out.read_text())
    assert record["status"] == "ok" and record["predictions"]["file"] == "seed0.predictions.json.gz"
    saved = json.loads(gzip.decompress(predictions_path(out).read_bytes()))
    assert [r["id"] for r in saved["test"]["rows"]][:2] and len(saved["test"]["rows"]) == 8
    assert saved["task_type"] == task_type and saved["labels"]
    r = rescore.rescore_record(out, tmp_path / "tasks")
    assert r.ok, r.problems
    for split, field in (("test", "metrics"), ("dev", "dev_metrics")):
        for name, value in record[field].items():
            assert r.recomputed[split][name] == pytest.approx(value, abs=1e-12, nan_ok=True), (split, name)
    assert rescore.main([str(tmp_path / "eval"), "--tasks-root", str(tmp_path / "tasks")]) == 0
    assert "ok, the record is what its predictions give" in capsys.readouterr().out


def test_a_changed_record_a_changed_file_and_other_gold_are_each_caught(tmp_path, demo_tokenizer, capsys):
    from clmdetour.evaluation import rescore
    from clmdetour.tasktypes.rescoring import predictions_path

    out, task_dir = _job(tmp_path, demo_tokenizer, "multiclass")
    record = json.loads(out.read_text())
    # a forged score: the record says 0.99, the predictions do not
    out.write_text(json.dumps(dict(record, metrics=dict(record["metrics"], f1_macro=0.99))))
    r = rescore.rescore_record(out, tmp_path / "tasks")
    assert any(p.startswith("test f1_macro: recorded 0.99, recomputed") for p in r.problems)
    assert rescore.main([str(out), "--tasks-root", str(tmp_path / "tasks")]) == 1
    assert "DIFFERS" in capsys.readouterr().out
    # a predictions file changed after the run: its digest no longer matches
    out.write_text(json.dumps(record))
    path = predictions_path(out)
    good = path.read_bytes()
    saved = json.loads(gzip.decompress(good))
    saved["test"]["rows"][0]["predicted"] = saved["test"]["rows"][0]["gold"]
    path.write_bytes(gzip.compress(json.dumps(saved).encode(), mtime=0))
    (problem,) = rescore.rescore_record(out, tmp_path / "tasks").problems
    assert "sha256" in problem and "changed after the run" in problem
    # the task's gold is no longer what the run was scored on
    path.write_bytes(good)
    from clmdetour.tasks.contract import load_task_data

    data = load_task_data(task_dir, "t")
    first = data.splits["test"][0]
    data.splits["test"][0] = dict(first, label="not-its-label")
    r = rescore.rescore_record(out, task_data=data)
    assert any(f"test {first['id']}: saved gold" in p for p in r.problems)
    # a record that names no predictions
    out.write_text(json.dumps({k: v for k, v in record.items() if k != "predictions"}))
    (problem,) = rescore.rescore_record(out, None).problems
    assert "no saved predictions" in problem


def test_the_table_counts_only_runs_their_predictions_give(tmp_path, demo_tokenizer):
    from clmdetour.evaluation.table import load_runs, rescore_note

    out, task_dir = _job(tmp_path, demo_tokenizer, "multiclass")
    record = json.loads(out.read_text())
    runs = load_runs([("tiny", "t", 0)], {("tiny", "t", 0): out}, task_dirs={"t": task_dir})
    assert runs.loc[0, "status"] == "ok" and bool(runs.loc[0, "rescored"])
    assert runs.loc[0, "score"] == pytest.approx(record["metrics"]["f1_macro"], abs=1e-12)
    assert rescore_note(runs).startswith("Scores: 1 of 1 runs recomputed")
    out.write_text(json.dumps(dict(record, metrics=dict(record["metrics"], f1_macro=0.99))))
    runs = load_runs([("tiny", "t", 0)], {("tiny", "t", 0): out}, task_dirs={"t": task_dir})
    assert runs.loc[0, "status"] == "differs" and math.isnan(runs.loc[0, "score"])
    assert "1 left out" in rescore_note(runs)


def test_a_stored_scratch_run_must_be_what_its_predictions_give(tmp_path, demo_tokenizer, caplog):
    """A forged scratch run with a real run's binding and predictions but other scores is not reused."""
    import logging

    from clmdetour.finetune.finished import FinishedRuns
    from clmdetour.tasks.contract import load_task_data
    from clmdetour.tasktypes.rescoring import predictions_path

    out, task_dir = _job(tmp_path, demo_tokenizer, "multiclass")
    record = json.loads(out.read_text())
    saved = json.loads(gzip.decompress(predictions_path(out).read_bytes()))
    data = load_task_data(task_dir, "t")
    store = FinishedRuns(tmp_path / "scratch", "k" * 16, model="tiny", task="t", model_digest="d" * 64,
                         metric="f1_macro", data=data)
    result = {k: record[k] for k in ("metrics", "dev_metric", "dev_metrics", "best_epoch", "dev_history", "attention",
                                     "train_loss")}
    result.update(wall_s=1.0, predictions={s: saved[s] for s in ("dev", "test")})
    store.put(0, 0.003, result)
    assert store.get(0, 0.003) is not None  # the real run is reused
    store.put(0, 0.003, dict(result, metrics=dict(result["metrics"], f1_macro=0.99)))
    with caplog.at_level(logging.WARNING, logger="clmdetour.finetune"):
        assert store.get(0, 0.003) is None
    assert "not what its saved predictions give" in caplog.text and "recorded 0.99" in caplog.text


def test_similarity_and_multiple_choice_rescore_from_their_rows():
    from clmdetour.tasktypes import get_task_type
    from clmdetour.tasktypes.multiple_choice import answer_set_scores
    from clmdetour.tasktypes.similarity import correlation_scores

    sim = get_task_type("similarity")
    rows = [{"gold": g, "predicted": p} for g, p in [(0.0, 0.1), (1.0, 0.8), (3.5, 2.0), (5.0, 4.4)]]
    assert sim.rescore([], rows, {}) == correlation_scores([0.0, 1.0, 3.5, 5.0], [0.1, 0.8, 2.0, 4.4])
    assert sim.gold_of_row({"score": "2.5"}) == 2.5
    mc = get_task_type("multiple_choice")
    rows = [{"gold": ["a", "c"], "predicted": ["a"]}, {"gold": ["b"], "predicted": ["b"]}]
    assert mc.rescore(["a", "b", "c"], rows, {}) == answer_set_scores([{"a", "c"}, {"b"}], [{"a"}, {"b"}])
    assert mc.gold_of_row({"answers": ["c", "a"]}) == ["a", "c"]
    ml = get_task_type("multilabel")
    rows = [{"gold": ["x"], "predicted": ["x", "y"]}, {"gold": ["y"], "predicted": []}]
    scores = ml.rescore(["x", "y"], rows, {"threshold": 0.4})
    assert scores["threshold"] == 0.4 and 0 < scores["f1_micro"] < 1
    assert np.isfinite(scores["f1_macro"])


def test_a_test_split_cut_above_five_percent_is_named_in_the_notes():
    import pandas as pd

    from clmdetour.evaluation.table import truncated_share, truncation_note

    assert truncated_share({"data": {"truncated": {"test": 3}, "model_inputs": {"test": 20}}}) == 0.15
    assert math.isnan(truncated_share({"data": {}}))
    runs = pd.DataFrame([{"model": "m", "task": "long", "status": "ok", "truncated_share": 0.15},
                         {"model": "m", "task": "short", "status": "ok", "truncated_share": 0.01},
                         {"model": "m", "task": "gone", "status": "missing", "truncated_share": math.nan}])
    note = truncation_note(runs)
    assert "`long` with `m` 15.0%" in note and "short" not in note and "gone" not in note
    assert truncation_note(runs.iloc[1:]) == ""
