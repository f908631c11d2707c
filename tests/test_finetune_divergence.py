"""Issue data-safe item 3: a fine-tune whose training loss explodes was recorded as F1 0.0, status ok; now the
record holds its training loss, a diverged grid point is left out of the learning-rate choice, a seed whose
every point diverged is ``status: diverged`` (named in the table, not scored 0), and an implausible grid is
warned at planning."""

from __future__ import annotations

import json
import logging
import math

import pytest

CFG = {"type": "multiclass", "metric": "f1_macro", "max_length": 64, "seeds": 1,
       "finetune": {"lr_grid": [1e-4, 100.0], "epochs": 2, "batch_size": 8, "warmup_ratio": 0.1,
                    "weight_decay": 1e-5, "betas": [0.9, 0.98], "eps": 1e-6}}


def test_the_training_loss_summary_names_a_divergence():
    from clmdetour.finetune.loop import train_loss_summary

    calm = train_loss_summary([2.3, 2.0, 1.5, 1.2, 1.0, 0.9, 0.8, 0.7, 0.6, 0.5])
    assert calm["diverged"] is None and calm["first"] == 2.3 and calm["last"] == 0.5 and calm["lowest"] == 0.5
    rising = train_loss_summary([2.3] + [50.0] * 9)
    assert rising["diverged"].startswith("training loss rose from 2.3 (first step) to 50")
    nan = train_loss_summary([2.3, math.nan, 1.0])
    assert nan["diverged"] == "training loss nan at step 2 (not finite)" and math.isnan(nan["last"])
    assert train_loss_summary([])["steps"] == 0


def _job(tmp_path, demo_tokenizer, grid):
    from helpers import tiny_modernbert
    from helpers_finetune import demo_task_rows, job_settings, write_task_folder

    from clmdetour.finetune import run as R
    from clmdetour.finetune.job import FinetuneJob

    model_dir = tiny_modernbert(demo_tokenizer, tmp_path / "model", hidden_size=32, num_layers=2)
    rows = demo_task_rows("multiclass", 40, seed=3)
    task_dir = write_task_folder(tmp_path / "tasks" / "t", "t", "multiclass",
                                 {"train": rows[:24], "dev": rows[24:32], "test": rows[32:]}, "f1_macro")
    out = tmp_path / "eval" / "tiny" / "t" / "seed0.json"
    cfg = dict(CFG, finetune=dict(CFG["finetune"], lr_grid=grid))
    (rec,) = R.run_task(FinetuneJob.from_params(model="tiny", task="t", model_dir=model_dir, task_dir=task_dir, task_config=cfg,
                        settings=job_settings(tie_tolerance=0.0005, attn_implementation="auto"), outputs={0: out},
                        threads=1))
    return rec, out, task_dir


def test_a_diverged_learning_rate_is_left_out_and_an_all_diverged_seed_says_so(tmp_path, demo_tokenizer, caplog):
    from clmdetour.evaluation.table import diverged_note, load_runs
    from clmdetour.finetune.records import exit_status

    with caplog.at_level(logging.WARNING, logger="clmdetour.finetune"):
        rec, _, _ = _job(tmp_path / "a", demo_tokenizer, [1e-4, 100.0])
    assert rec["status"] == "ok" and rec["hyperparameters"]["lr"] == 1e-4
    assert rec["train_loss"]["diverged"] is None and rec["train_loss"]["steps"] == 6
    assert "lr 100 diverged" in caplog.text and "left out of the learning-rate choice" in caplog.text

    rec, out, task_dir = _job(tmp_path / "b", demo_tokenizer, [100.0, 1e4])
    assert rec["status"] == "diverged" and rec["metrics"] is None
    assert rec["error"].startswith("diverged at every learning rate of the grid: training loss")
    assert exit_status([rec]) == 0  # a result, not a crash: the table says so
    runs = load_runs([("tiny", "t", 0)], {("tiny", "t", 0): out}, task_dirs={"t": task_dir})
    assert runs.loc[0, "status"] == "diverged" and math.isnan(runs.loc[0, "score"])
    assert "tiny/t/seed0" in diverged_note(runs)
    assert json.loads(out.read_text())["lr_sweep"]["grid"] == [100.0, 1e4]


@pytest.mark.parametrize("grid, warned", [([1e-5, 3e-5], False), ([30, 50], True), ([1e-9, 1e-5], True)])
def test_an_implausible_grid_is_warned_at_planning_naming_the_key(grid, warned):
    from clmdetour.config import lr_grid_warning

    config = {"evaluation": {"lr_grid": [1e-5]}, "tasks": {"t": {"finetune": {"lr_grid": grid}}}}
    line = lr_grid_warning(config)
    assert bool(line) is warned
    if warned:
        assert line.startswith(f"tasks.t.finetune.lr_grid {grid}: a fine-tuning learning rate outside 1e-07 .. 0.01")
