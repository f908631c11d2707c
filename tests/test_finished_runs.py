"""Issue run-guards item 3: a fine-tuning job's stored (seed, lr) runs are reused only when they are its own.

``FinishedRuns`` keeps each finished run in scratch so a killed job's rerun trains only the rest. A file
planted there (forged scores, ``{}``, another run's file) was read back as it was: it chose the learning
rate and made a seed's record, or stopped every rerun with ``KeyError: 'wall_s'``.
"""

from __future__ import annotations

import json
import logging
import math

import pytest

CFG = {"type": "multiclass", "metric": "f1_macro", "max_length": 64, "seeds": 2,
       "finetune": {"lr_grid": [1e-5, 0.003], "epochs": 2, "batch_size": 8, "warmup_ratio": 0.1,
                    "weight_decay": 1e-5, "betas": [0.9, 0.98], "eps": 1e-6}}


def _forged(dev: float = 0.99, test: float = 0.99) -> dict:
    """A stored run of the right shape (what the job stored before runs were bound) with made-up scores."""
    return {"metrics": {"f1_macro": test, "f1_micro": test, "accuracy": test}, "dev_metric": dev,
            "dev_metrics": {"f1_macro": dev, "f1_micro": dev, "accuracy": dev}, "best_epoch": 1,
            "dev_history": [dev], "attention": {"implementation": "sdpa"}, "wall_s": 1.0,
            "train_loss": {"first": 2.0, "last": 1.0, "lowest": 1.0, "steps": 4, "diverged": None},
            "predictions": {"dev": {"fitted": {}, "rows": []}, "test": {"fitted": {}, "rows": []}}}


@pytest.fixture
def job(tmp_path, demo_tokenizer):
    from helpers import tiny_modernbert
    from helpers_finetune import demo_task_rows, write_task_folder

    model_dir = tiny_modernbert(demo_tokenizer, tmp_path / "model", hidden_size=32, num_layers=2)
    rows = demo_task_rows("multiclass", 56, seed=11, noise=0.1)
    task_dir = write_task_folder(tmp_path / "mc", "mc", "multiclass",
                                 {"train": rows[:40], "dev": rows[40:48], "test": rows[48:]}, "f1_macro")
    return model_dir, task_dir


def _run(tmp_path, model_dir, task_dir, name: str, scratch=None) -> list[dict]:
    from helpers_finetune import job_settings

    from clmdetour.finetune import run as R
    from clmdetour.finetune.job import FinetuneJob

    outputs = {s: tmp_path / name / f"seed{s}.json" for s in (1, 2)}
    R.run_task(FinetuneJob.from_params(model="tiny", task="mc", model_dir=model_dir, task_dir=task_dir, task_config=CFG,
               settings=job_settings(tie_tolerance=0.0005, attn_implementation="auto"), outputs=outputs, threads=1,
               scratch_dir=scratch))
    return [json.loads(outputs[s].read_text()) for s in (1, 2)]


PLANTED = {"forged": ("seed2-lr0.003.json", json.dumps(_forged()), "no 'task' binding it to its run"),
           "empty": ("seed1-lr1e-05.json", "{}", "no 'task' binding it to its run")}


@pytest.mark.parametrize("planted", sorted(PLANTED))
def test_a_forged_or_empty_stored_run_is_set_aside_and_trained_again(tmp_path, job, caplog, planted):
    """A planted ``seed2-lr0.003.json`` with dev and test 0.99 chose 0.003 and gave seed 2 F1 0.99; ``{}``
    stopped every rerun with KeyError 'wall_s'. Either is now moved aside (``*.rejected``, kept once the job
    ends) with a warning naming the file and why, and the job writes the records of a job without scratch."""
    from helpers_finetune import job_settings

    from clmdetour.finetune.finished import finished_runs_key
    from clmdetour.settings import FinetuneSettings
    from clmdetour.tasks.settings import TaskSettings

    model_dir, task_dir = job
    settings = FinetuneSettings.from_dict(job_settings(tie_tolerance=0.0005, attn_implementation="auto"), "evaluation")
    folder = tmp_path / "scratch" / finished_runs_key(model_dir, task_dir, TaskSettings.from_dict(CFG), settings, None)
    folder.mkdir(parents=True)
    name, content, why = PLANTED[planted]
    (folder / name).write_text(content)

    clean = _run(tmp_path, model_dir, task_dir, "clean")
    with caplog.at_level(logging.WARNING, logger="clmdetour.finetune"):
        guarded = _run(tmp_path, model_dir, task_dir, "guarded", scratch=tmp_path / "scratch")
    assert [r["status"] for r in guarded] == ["ok", "ok"]
    assert 0.99 not in guarded[1]["lr_sweep"]["seed_test"]
    for c, g in zip(clean, guarded):
        c.pop("wall_time_s"), g.pop("wall_time_s"), c["data"].pop("encode_s"), g["data"].pop("encode_s")
        assert g == c
    assert [p.name for p in folder.iterdir()] == [f"{name}.rejected"]  # the job's own runs are cleared
    (warned,) = [r.getMessage() for r in caplog.records if "not reused" in r.getMessage()]
    assert warned.startswith(f"{folder / name}: stored fine-tuning run not reused: {why}")


# ---------------------------------------------------------------- the store alone (no training)

BINDING = {"model": "tiny", "task": "mc", "model_digest": "d" * 64}


def _store(tmp_path):
    from clmdetour.finetune.finished import FinishedRuns

    return FinishedRuns(tmp_path, "k" * 16, metric="f1_macro", **BINDING)


def test_a_run_stored_by_the_job_is_reused_as_it_was(tmp_path):
    store = _store(tmp_path)
    result = _forged(0.41, 0.37)
    store.put(2, 0.003, result)
    assert "task" not in result  # the caller's result is not modified
    stored = json.loads((store.folder / "seed2-lr0.003.json").read_text())
    assert {k: stored[k] for k in ("task", "model", "seed", "lr", "run_key", "model_digest")} == {
        "task": "mc", "model": "tiny", "seed": 2, "lr": 0.003, "run_key": "k" * 16, "model_digest": "d" * 64}
    assert store.get(2, 0.003) == result  # only the reader's fields come back


def _binding(**changes) -> dict:
    return {**BINDING, "seed": 2, "lr": 0.003, "run_key": "k" * 16, **changes}


@pytest.mark.parametrize("content, why", [
    ({}, "no 'task' binding"),
    ([], "not a JSON object"),
    ("not json", "unreadable"),
    (_forged(), "no 'task' binding"),  # the right shape, no binding
    ({**_forged(), **_binding(model_digest="e" * 64)}, "model_digest is 'eee"),  # trained from another model
    ({**_forged(), **_binding(seed=1)}, "seed is 1, this run's is 2"),
    ({**_forged(), **_binding(lr=1e-5)}, "lr is 1e-05, this run's is 0.003"),
    ({**_forged(), **_binding(run_key="x" * 16)}, "run_key is 'xxx"),
    (_binding(), "missing field(s) ['metrics', 'dev_metric'"),
    ({**_forged(), **_binding(), "wall_s": None}, "wall_s is None"),
    ({**_forged(test=1.5), **_binding()}, "metrics.f1_macro is 1.5, not a finite score in [0, 1]"),
    ({**_forged(test=math.nan), **_binding()}, "metrics.f1_macro is nan"),
    ({**_forged(dev="0.99"), **_binding()}, "dev_metrics.f1_macro is '0.99', not a number"),
    ({**_forged(), **_binding(), "best_epoch": 3}, "best_epoch 3 is not an epoch"),
    ({**_forged(), **_binding(), "metrics": {"accuracy": 0.5}}, "metrics is not a map holding 'f1_macro'"),
    ({**_forged(), **_binding(), "dev_metric": 0.5}, "dev_metric 0.5 is not dev_metrics.f1_macro 0.99"),
])
def test_a_stored_run_that_is_not_this_runs_is_moved_aside(tmp_path, caplog, content, why):
    store = _store(tmp_path)
    path = store.folder / "seed2-lr0.003.json"
    path.parent.mkdir(parents=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with caplog.at_level(logging.WARNING, logger="clmdetour.finetune"):
        assert store.get(2, 0.003) is None
    assert not path.exists() and path.with_name(path.name + ".rejected").is_file()
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith(f"{path}: stored fine-tuning run not reused: ") and why in message
    assert "trained again" in message


def test_a_correlation_may_be_negative_or_undefined(tmp_path):
    """Similarity tasks score Spearman / Pearson: in [-1, 1], NaN when a side is constant (a run that finished)."""
    store = _store(tmp_path)
    store.metric = "spearman"
    result = {"metrics": {"spearman": -0.2, "pearson": math.nan}, "dev_metric": math.nan,
              "dev_metrics": {"spearman": math.nan, "pearson": math.nan}, "best_epoch": 1,
              "dev_history": [math.nan], "attention": {}, "wall_s": 0.5, "predictions": {}, "train_loss": {}}
    store.put(0, 1e-4, result)
    got = store.get(0, 1e-4)
    assert got is not None and got["metrics"]["spearman"] == -0.2
