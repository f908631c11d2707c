"""The GPU-hour projection of a planned DAG (clmdetour.pipeline.cost, issue gpu-proven item 3).

Run counts are derived from the config through the wiring (``Pipeline``), never hard-coded; the snakemake
tests plan fresh checkouts and read the printed block.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, clean_env

from clmdetour.config import deep_merge, load_yaml, resolve_phase, validate_config
from clmdetour.pipeline import Pipeline
from clmdetour.pipeline.cost import (
    ASSUMED_EXAMPLES,
    MEASURED_RATES,
    REFERENCE_MODEL,
    Rate,
    flops_per_token,
    phase_jobs,
    planning_cost_message,
    project_cost,
    resolve_rates,
)
from clmdetour.tasks.spec import left_out_tasks

HEADER = "Projected GPU-hours of `all` under this config"
USER_TASKS = ("distemist", "meddialog", "diamed")


@pytest.fixture(autouse=True)
def _scratch_cwd(tmp_path, monkeypatch):
    """Plan from an empty folder: no fetched model or prepared task of the checkout changes the figures."""
    monkeypatch.chdir(tmp_path)


def _user_tasks(folder: Path, rows: int = 3) -> dict:
    """The paper's user-provided tasks as small JSON-lines files (``rows`` lines per split)."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        line = {"id": split, "text": "t", "label": "a", "labels": ["a"]}
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(dict(line, id=f"{split}{i}")) + "\n"
                                                       for i in range(rows)))
    return {t: {"path": str(folder)} for t in USER_TASKS}


def _paper(tmp_path: Path | None = None, **over) -> dict:
    cfg = load_yaml(REPO / "config/config.yaml")
    if tmp_path is not None:
        cfg = deep_merge(cfg, {"tasks": _user_tasks(tmp_path / "user")})
    return validate_config(deep_merge(cfg, over))


def test_run_counts_are_the_planned_grid_times_seeds_times_the_lr_grid(tmp_path):
    config = _paper(tmp_path)
    pipe = Pipeline(config, left_out_tasks(config))
    assert not left_out_tasks(config) and len(pipe.eval_tasks) == len(config["tasks"])  # the whole grid
    lr_points = {t: len(config["tasks"][t]["finetune"].get("lr_grid") or config["evaluation"]["lr_grid"])
                 for t in pipe.eval_tasks}
    expected = {t: sum(lr_points[t] for m, task, _ in pipe.grid_runs if task == t) for t in pipe.eval_tasks}
    proj = project_cost(config)
    rows = {r.name: r for r in proj.rows if r.stage == "fine-tuning"}
    assert {t: r.count for t, r in rows.items()} == expected
    assert proj.count("fine-tuning") == sum(expected.values()) == len(pipe.grid_runs) * 4
    # one (model, task) job per cell, each running seeds x lr points
    assert sorted(j for r in rows.values() for j in r.jobs) == sorted(
        f"{m}/{t}" for m in pipe.eval_models for t in pipe.eval_tasks)
    # the user tasks' files are read (3 rows per split): not assumed
    emea, distemist = rows["emea"], rows["distemist"]
    spec = config["tasks"]["distemist"]
    lengths = [min(spec["max_length"], (config["reference_models"].get(m) or {}).get("max_length") or 10**9)
               for m in pipe.eval_models]  # a reference model's own limit caps its inputs (DrBERT: 512)
    assert 512 in lengths and spec["max_length"] in lengths
    runs_per_cell = distemist.count // len(pipe.eval_models)
    assert distemist.tokens == pytest.approx(sum(3 * spec["finetune"]["epochs"] * n * runs_per_cell for n in lengths))
    assert emea.tokens > distemist.tokens
    assert not any("distemist" in n for n in proj.notes)
    assert any(n.startswith("examples assumed for emea") for n in proj.notes)


def test_a_fresh_checkout_leaves_the_missing_user_tasks_out_of_the_projection():
    config = _paper()
    proj = project_cost(config)
    names = {r.name for r in proj.rows if r.stage == "fine-tuning"}
    assert names == set(config["tasks"]) - set(USER_TASKS)


def _two_variants(shared: bool) -> dict:
    """A config of two variants; ``shared``: the second reuses the first's phase 1 (``phase1_from``)."""
    b = {"phase1_from": "a", "decay": {"tokens": 3_000_000_000}} if shared else {
        "phase1": {"objective": "clm"}, "decay": {"tokens": 3_000_000_000}}
    cfg = load_yaml(REPO / "config/config.yaml")
    cfg["pretraining"]["variants"] = {"a": {"phase1": {"objective": "clm"}}, "b": b}
    cfg["evaluation"]["baseline"] = "a"
    return validate_config(cfg)


@pytest.mark.parametrize("shared", [True, False])
def test_pretraining_gpu_hours_sum_tokens_over_rate_over_distinct_phase_jobs(shared):
    config = _two_variants(shared)
    rates = resolve_rates()
    jobs = phase_jobs(config)
    assert [(v, p) for v, p, _, _ in jobs] == ([("a", "phase1")] if shared else [("a", "phase1"), ("b", "phase1")]) + [
        ("a", "decay"), ("b", "decay")]
    expected = sum(resolve_phase(config, v, p)["tokens"] / rates["causal" if p == "phase1" else "masked"].tokens_per_s / 3600
                   for v, p, _, _ in jobs)
    proj = project_cost(config)
    assert proj.gpu_hours("pretraining") == pytest.approx(expected, rel=1e-12)
    assert proj.count("pretraining") == len(jobs)
    phase1 = [r for r in proj.rows if r.name == "phase 1 CLM"]
    assert [r.count for r in phase1] == [1 if shared else 2]
    # the shared phase 1 is counted once: exactly one phase 1's GPU-hours less than two own phases
    if shared:
        own = project_cost(_two_variants(False)).gpu_hours("pretraining")
        one_phase1 = config["pretraining"]["phase1"]["tokens"] / MEASURED_RATES["causal"].tokens_per_s / 3600
        assert own - proj.gpu_hours("pretraining") == pytest.approx(one_phase1, rel=1e-9)


def test_paper_pretraining_counts_eleven_phase_jobs_and_the_mlm_baseline_at_the_mlm_rate():
    proj = project_cost(_paper())
    rows = {(r.name, r.count): r for r in proj.rows if r.stage == "pretraining"}
    assert set(rows) == {("phase 1 CLM", 4), ("phase 1 MLM", 1), ("decay MLM", 5), ("decay MLM", 1)}
    assert rows["phase 1 MLM", 1].jobs == ("mlm-baseline/phase1",)
    assert rows["decay MLM", 1].jobs == ("clm-long-decay/decay",)
    assert rows["phase 1 CLM", 4].gpu_hours == pytest.approx(4 * 10e9 / 219_429 / 3600)
    assert rows["phase 1 CLM", 4].job_hours == pytest.approx(10e9 / 219_429 / 3600 / 4)  # 4 GPUs per phase job


def test_a_rate_override_scales_its_rows_only():
    config = _paper()
    base = project_cost(config)
    doubled = project_cost(config, rates={"causal": 2 * MEASURED_RATES["causal"].tokens_per_s})
    for before, after in zip(base.rows, doubled.rows, strict=True):
        factor = 0.5 if before.name == "phase 1 CLM" else 1.0
        assert after.gpu_hours == pytest.approx(before.gpu_hours * factor, rel=1e-12), before.name
    # measured fine-tuning rates given: the placeholder note goes, and GPU-hours scale by the ratio
    measured = project_cost(config, rates={"finetune_8192": 177_452, "finetune_512": Rate(300_000, 512, "bench")})
    assert any("not yet measured on a GPU, Trainer MLM rate assumed" in n for n in base.notes)
    assert not any("Trainer MLM" in n for n in measured.notes)
    emea = next(r for r in measured.rows if r.name == "emea")
    assert emea.rate == pytest.approx(300_000) and emea.gpu_hours == pytest.approx(
        next(r for r in base.rows if r.name == "emea").gpu_hours * 88_726 / 300_000)
    with pytest.raises(KeyError, match="unknown rate"):
        resolve_rates({"finetune_1024": 1.0})


def test_rates_scale_with_flops_per_token_of_the_planned_model():
    config = _paper()
    large = dict(REFERENCE_MODEL, hidden_size=1024, num_hidden_layers=28, intermediate_size=2624)
    proj = project_cost(config, architectures={"moderncamembert-base": large})
    row = next(r for r in proj.rows if r.name == "phase 1 CLM")
    ratio = flops_per_token(REFERENCE_MODEL, 8192, 1.0) / flops_per_token(large, 8192, 1.0)
    assert 0.2 < ratio < 0.6
    assert row.rate == pytest.approx(MEASURED_RATES["causal"].tokens_per_s * ratio, rel=1e-12)
    # an unreadable config: the 150M base assumed, and said
    assert any("150M base architecture assumed for moderncamembert-base" in n for n in project_cost(config).notes)


def test_evaluation_tokens_cost_a_third_and_examples_can_be_given():
    config = _paper()
    proj = project_cost(config, examples={"medline": {"train": 100, "dev": 10, "test": 20}})
    medline = next(r for r in proj.rows if r.name == "medline")
    spec = config["tasks"]["medline"]
    epochs, length = spec["finetune"]["epochs"], spec["max_length"]
    per_run = (100 * epochs * length + (10 * epochs + 20) * length / 3) / 88_726 / 3600
    assert medline.gpu_hours == pytest.approx(per_run * medline.count)
    assert ASSUMED_EXAMPLES == {"train": 1000, "dev": 200, "test": 200}  # docs/slurm.md's figures assume these


def test_the_cpu_demo_prints_nothing_and_the_paper_prints_the_block():
    demo = validate_config(deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml")))
    assert planning_cost_message(demo) == ""
    text = planning_cost_message(_paper())
    assert text.startswith(HEADER) and "fine-tuning rate: not yet measured on a GPU, Trainer MLM rate assumed" in text


# --- the block as `snakemake -n` prints it --------------------------------------------------------------------


def _fresh_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir(parents=True)
    for name in ("Snakefile", "workflow", "config", "profiles", "src"):
        (root / name).symlink_to(REPO / name)
    return root


def _dry_run(root: Path, *args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", *args], cwd=root, capture_output=True, text=True,
                       timeout=300, env=clean_env(), check=False)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return r.stdout + r.stderr


def _job_count(out: str, rule: str) -> int:
    return int(re.search(rf"^{rule}\s+(\d+)$", out, flags=re.MULTILINE).group(1))


@pytest.mark.slow  # two dry runs of the paper DAG and one of the demo: about 20 s
def test_snakemake_n_prints_the_projection_for_the_paper_and_not_for_the_demo(tmp_path):
    root = _fresh_checkout(tmp_path)
    out = _dry_run(root, "all", "--configfiles", "config/config.yaml")
    assert out.count(HEADER) == 1, out[-3000:]
    config = _paper()
    seeds_x_lrs = {t: config["tasks"][t]["seeds"] * len(config["evaluation"]["lr_grid"]) for t in config["tasks"]}
    assert len(set(seeds_x_lrs.values())) == 1  # every paper task: one seed count, the shared lr grid
    runs = _job_count(out, "finetune") * next(iter(seeds_x_lrs.values()))
    assert f"({runs:,} runs: models x seeds x lr grid points)" in out
    phases = _job_count(out, "pretrain_phase1") + _job_count(out, "pretrain_decay")
    assert f"({phases} phase jobs)" in out
    # with the user tasks' files the grid grows, and the printed runs follow the planned jobs
    extra = tmp_path / "user.yaml"
    extra.write_text(json.dumps({"tasks": _user_tasks(tmp_path / "user")}))
    out = _dry_run(root, "all", "--configfiles", "config/config.yaml", str(extra))
    runs = _job_count(out, "finetune") * next(iter(seeds_x_lrs.values()))
    assert out.count(HEADER) == 1 and f"({runs:,} runs: models x seeds x lr grid points)" in out
    demo = _dry_run(_fresh_checkout(tmp_path / "demo"), "--profile", "profiles/local")
    assert HEADER not in demo and "GPU-h" not in demo
    assert _job_count(demo, "finetune") > 0
