"""The learning-rate sweep: choice on mean dev over seeds, ties toward the grid's middle, records."""
import copy
import math

import pytest
from helpers_finetune import job_settings

from clmdetour.config import ConfigError
from clmdetour.evaluation.grid import finetune_settings, finetune_task_params
from clmdetour.finetune.sweep import choose_lr, mean_dev_over_seeds
from clmdetour.tasks.settings import TaskSettings

GRID = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]


def test_choice_is_on_the_mean_over_seeds_not_on_one_seed():
    # seed 0 alone would pick 1e-2 (0.90); the mean over seeds picks 3e-4
    dev = {0: [0.10, 0.60, 0.50, 0.40, 0.90], 1: [0.10, 0.80, 0.50, 0.40, 0.10], 2: [0.10, 0.70, 0.50, 0.40, 0.20]}
    c = choose_lr(GRID, dev, tolerance=0.0005)
    assert c.lr == 3e-4 and c.index == 1 and not c.flat
    assert c.dev_mean == pytest.approx([0.10, 0.70, 0.50, 0.40, 0.40])


def test_ties_within_tolerance_go_toward_the_middle():
    # index 0 is best by 0.0004 (< tolerance): a tie with index 2, which is nearer the middle
    dev = {0: [0.5004, 0.40, 0.50, 0.30, 0.20]}
    c = choose_lr(GRID, dev, tolerance=0.0005)
    assert c.index == 2 and c.ties == [0, 2]
    # beyond the tolerance the end point wins
    c = choose_lr(GRID, {0: [0.5010, 0.40, 0.50, 0.30, 0.20]}, tolerance=0.0005)
    assert c.index == 0 and c.ties == [0]


def test_flat_curve_chooses_the_middle_and_says_flat():
    c = choose_lr(GRID, {0: [0.3] * 5, 1: [0.3] * 5}, tolerance=0.0005)
    assert c.flat and c.index == 2 and c.lr == 1e-3
    # even grid: the two middle points are equally near; the higher mean wins, then the lower index
    c = choose_lr([1, 2, 3, 4], {0: [0.3, 0.3, 0.3002, 0.3]}, tolerance=0.0005)
    assert c.index == 2
    c = choose_lr([1, 2, 3, 4], {0: [0.3, 0.3, 0.3, 0.3]}, tolerance=0.0005)
    assert c.index == 1


def test_a_seed_missing_a_point_is_left_out_of_every_mean():
    means = mean_dev_over_seeds({0: [0.2, 0.4], 1: [0.9], 2: [0.4, 0.6]}, 2)
    assert means == pytest.approx([0.3, 0.5])
    assert all(math.isnan(m) for m in mean_dev_over_seeds({0: [0.1]}, 2))


@pytest.mark.parametrize("grid, dev, tol, match", [
    ([], {0: []}, 0.0, "no learning-rate grid"),
    ([1e-3, 1e-4], {0: [0.1, 0.2]}, 0.0, "increasing"),
    ([1e-4], {0: [0.1]}, -1.0, "tolerance"),
    ([1e-4, 1e-3], {0: [0.1]}, 0.0, "no seed"),
])
def test_bad_inputs(grid, dev, tol, match):
    with pytest.raises(ValueError, match=match):
        choose_lr(grid, dev, tol)


def _config():
    from helpers_finetune import FINETUNE_BLOCK

    block = {k: v for k, v in FINETUNE_BLOCK.items() if k != "lr_grid"}  # the schema fills lr_grid: null
    return {"evaluation": {"lr_grid": [1e-4, 1e-3], "tie_tolerance": 0.001},
            "tasks": {"a": {"type": "multiclass", "max_length": 64, "seeds": 3, "finetune": dict(block, epochs=1)},
                      "b": {"type": "ner", "max_length": 64, "seeds": 3,
                            "finetune": dict(block, epochs=1, lr_grid=[5e-4])}}}


def test_grid_resolution_per_task():
    cfg = _config()
    assert finetune_task_params(cfg, "a")["finetune"]["lr_grid"] == [1e-4, 1e-3]
    assert finetune_task_params(cfg, "b")["finetune"]["lr_grid"] == [5e-4]
    assert TaskSettings.from_dict(finetune_task_params(cfg, "a")).finetune.lr_points == [1e-4, 1e-3]
    assert finetune_settings(cfg)["tie_tolerance"] == 0.001
    assert "lr_grid" not in cfg["tasks"]["a"]["finetune"]  # the config itself is not modified
    bad = copy.deepcopy(cfg)
    bad["evaluation"]["lr_grid"] = []  # the key that set the empty grid is named
    with pytest.raises(ConfigError, match=r"^evaluation\.lr_grid: no learning-rate grid"):
        finetune_task_params(bad, "a")
    with pytest.raises(ConfigError, match=r"^tasks\.a\.finetune\.lr_grid: \[0\.001, 0\.0001\] is not strictly increasing"):
        TaskSettings.from_dict(dict(finetune_task_params(cfg, "a"), finetune=dict(
            finetune_task_params(cfg, "a")["finetune"], lr_grid=[1e-3, 1e-4])), "tasks.a")


def test_paper_and_demo_configs_have_a_grid_and_reject_a_task_lr():
    from test_config import demo, paper

    from clmdetour.config import deep_merge, validate_config

    for cfg in (paper(), demo()):
        validate_config(cfg)
        assert len(cfg["evaluation"]["lr_grid"]) >= 1
        assert all(t.get("finetune", {}).get("lr") is None for t in cfg["tasks"].values())
    with pytest.raises(ConfigError) as e:
        validate_config(deep_merge(demo(), {"tasks": {"meddialog": {"finetune": {"lr": 1e-3}}}}))
    msg = str(e.value)
    assert "tasks.meddialog.finetune.lr" in msg and "evaluation.lr_grid" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match=r"tasks\.meddialog\.finetune\.lr_grid"):
        validate_config(deep_merge(demo(), {"tasks": {"meddialog": {"finetune": {"lr_grid": []}}}}))


def test_run_task_records_the_sweep(tmp_path, demo_tokenizer):
    from helpers import tiny_modernbert
    from helpers_finetune import demo_task_rows, write_task_folder

    from clmdetour.finetune import run as R
    from clmdetour.finetune.job import FinetuneJob
    from clmdetour.io import read_json

    model_dir = tiny_modernbert(demo_tokenizer, tmp_path / "model", hidden_size=32, num_layers=2)
    rows = demo_task_rows("multiclass", 56, seed=11, noise=0.1)
    task_dir = write_task_folder(tmp_path / "mc", "mc", "multiclass", {"train": rows[:40], "dev": rows[40:48], "test": rows[48:]},
                                 "f1_macro")
    grid = [1e-5, 3e-3]
    cfg = {"type": "multiclass", "metric": "f1_macro", "max_length": 64, "seeds": 2,
           "finetune": {"lr_grid": grid, "epochs": 2, "batch_size": 8, "warmup_ratio": 0.1, "weight_decay": 1e-5,
                        "betas": [0.9, 0.98], "eps": 1e-6}}
    outputs = {s: tmp_path / f"seed{s}.json" for s in (0, 1)}
    records = R.run_task(FinetuneJob.from_params(model="tiny", task="mc", model_dir=model_dir, task_dir=task_dir, task_config=cfg,
                         settings=job_settings(tie_tolerance=0.0005, attn_implementation="auto"), outputs=outputs, threads=1))
    recs = [read_json(outputs[s]) for s in (0, 1)]
    assert [r["status"] for r in records] == ["ok", "ok"]
    for r in recs:
        sw = r["lr_sweep"]
        assert sw["grid"] == grid and len(sw["seed_dev"]) == len(sw["seed_test"]) == 2
        assert sw["dev_mean"] == pytest.approx([(recs[0]["lr_sweep"]["seed_dev"][i] + recs[1]["lr_sweep"]["seed_dev"][i]) / 2
                                                for i in range(2)])
        i = sw["chosen_index"]
        assert sw["chosen_lr"] == grid[i] == r["hyperparameters"]["lr"]
        # the reported test and dev scores are this seed's at the chosen point
        assert r["metrics"]["f1_macro"] == sw["seed_test"][i] and r["dev_metric"] == sw["seed_dev"][i]
    assert recs[0]["lr_sweep"]["chosen_lr"] == recs[1]["lr_sweep"]["chosen_lr"]  # one choice per (model, task)


_RUN_TASK_SCRIPT = """
import json, logging, sys
logging.basicConfig(level=logging.INFO)
sys.path.insert(0, {tests!r})
from helpers_finetune import job_settings
from clmdetour.finetune import run as R
from clmdetour.finetune.job import FinetuneJob
args = json.loads(sys.argv[1])
R.run_task(FinetuneJob.from_params(model="tiny", task="mc", model_dir=args["model"], task_dir=args["task"], task_config=args["cfg"],
           settings=job_settings(tie_tolerance=0.0005, attn_implementation="auto"),
           outputs={{int(k): v for k, v in args["outputs"].items()}}, threads=1, scratch_dir=args["scratch"]))
"""


@pytest.mark.slow  # three fine-tuning subprocesses of 2 seeds x 2 learning rates (about 20 s each)
def test_a_killed_fine_tuning_job_keeps_its_finished_runs(tmp_path, demo_tokenizer):
    """kill -9 after the first (seed, lr) run finished: the rerun reuses it, trains the rest, writes the
    uninterrupted job's records (wall times aside) and removes its scratch folder."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from helpers import REPO, tiny_modernbert
    from helpers_finetune import demo_task_rows, write_task_folder

    model_dir = tiny_modernbert(demo_tokenizer, tmp_path / "model", hidden_size=32, num_layers=2)
    rows = demo_task_rows("multiclass", 56, seed=11, noise=0.1)
    task_dir = write_task_folder(tmp_path / "mc", "mc", "multiclass",
                                 {"train": rows[:40], "dev": rows[40:48], "test": rows[48:]}, "f1_macro")
    cfg = {"type": "multiclass", "metric": "f1_macro", "max_length": 64, "seeds": 2,
           "finetune": {"lr_grid": [1e-5, 3e-3], "epochs": 3, "batch_size": 8, "warmup_ratio": 0.1,
                        "weight_decay": 1e-5, "betas": [0.9, 0.98], "eps": 1e-6}}
    script = _RUN_TASK_SCRIPT.format(tests=str(REPO / "tests"))

    def job(name: str) -> list[str]:
        args = {"model": str(model_dir), "task": str(task_dir), "cfg": cfg, "scratch": str(tmp_path / f"scratch_{name}"),
                "outputs": {s: str(tmp_path / name / f"seed{s}.json") for s in (0, 1)}}
        return [sys.executable, "-c", script, json.dumps(args)]

    r = subprocess.run(job("plain"), cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    proc = subprocess.Popen(job("killed"), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not list((tmp_path / "scratch_killed").rglob("seed*.json")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # by the PID we started
    proc.wait()
    kept = sorted(p.name for p in (tmp_path / "scratch_killed").rglob("seed*.json"))
    assert kept and len(kept) < 4 and not (tmp_path / "killed").exists()
    r = subprocess.run(job("killed"), cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr.count("finished before") == len(kept)
    for s in (0, 1):
        plain, resumed = (json.loads((tmp_path / d / f"seed{s}.json").read_text()) for d in ("plain", "killed"))
        plain.pop("wall_time_s"), resumed.pop("wall_time_s")
        plain["data"].pop("encode_s", None), resumed["data"].pop("encode_s", None)
        assert resumed == plain
    assert not list((tmp_path / "scratch_killed").rglob("seed*.json"))  # removed once the records are written
