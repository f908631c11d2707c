"""Dry run of the analysis rules on the demo config: one drift job per variant, right inputs, all figures."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TARGETS = ["results/analysis/layer_drift.tsv", "results/plots/layer_drift.png", "results/plots/training_curves.png",
           "results/plots/eval_scores.png", "results/config_used.yaml"]


def _jobs(text):
    """Parse a dry-run listing into [(rule, {field: value})]."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \S+:\n)", text):
        m = re.match(r"(?:local)?rule (\S+):\n", block)
        if m:
            fields = dict(re.findall(r"^    (\w+): (.*)$", block, flags=re.MULTILINE))
            jobs.append((m.group(1), fields))
    return jobs


@pytest.fixture(scope="module")
def dry_run():
    assert (REPO / "Snakefile").exists(), "no Snakefile in the repository"
    # Targets before --configfile, which takes every following word as a config file.
    cmd = [sys.executable, "-m", "snakemake", *TARGETS, "--dry-run", "--nolock", "--forceall", "--cores", "1",
           "--configfile", "config/demo.yaml"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return _jobs(proc.stdout)


def _demo_config():
    from clmdetour.config import deep_merge, load_yaml, validate_config

    cfg = validate_config(deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml")))
    return cfg


def test_one_drift_job_per_variant_with_its_phase_models(dry_run):
    cfg = _demo_config()
    variants = cfg["pretraining"]["variants"]
    drift = {f["wildcards"].split("=", 1)[1]: f for rule, f in dry_run if rule == "layer_drift"}
    assert sorted(drift) == sorted(variants)
    for name, v in variants.items():
        owner = v.get("phase1_from") or name
        inputs = drift[name]["input"].split(", ")
        assert f"results/pretrain/{owner}/phase1/model" in inputs
        assert f"results/pretrain/{owner}/phase1/run.json" in inputs
        assert f"results/pretrain/{name}/decay/model" in inputs
        assert "results/corpus/valid" in inputs and "results/base/model" in inputs
        assert drift[name]["output"] == f"results/analysis/{name}/layer_drift.tsv"
        assert drift[name]["log"] == f"logs/layer_drift/{name}.log"


def test_plot_jobs_read_every_phase_log_and_the_eval_runs(dry_run):
    cfg = _demo_config()
    variants = cfg["pretraining"]["variants"]
    (curves,) = [f for rule, f in dry_run if rule == "plot_training_curves"]
    logs = set(curves["input"].split(", "))
    owners = {v.get("phase1_from") or n for n, v in variants.items()}
    assert logs == ({f"results/pretrain/{o}/phase1/train_log.jsonl" for o in owners}
                    | {f"results/pretrain/{n}/decay/train_log.jsonl" for n in variants})
    (evalplot,) = [f for rule, f in dry_run if rule == "plot_eval_scores"]
    assert evalplot["input"] == "results/eval_runs.tsv"
    (drift_plot,) = [f for rule, f in dry_run if rule == "plot_layer_drift"]
    assert drift_plot["output"].count("results/plots/") == 4  # two figures, PNG and SVG
    assert any(rule == "config_used" for rule, _ in dry_run)
