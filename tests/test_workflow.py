"""Workflow tests: dry-runs of the paper and demo configs, and checks on the shared demo run."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO, jobs
from safetensors.torch import load_file

SNAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
DEMO_CFG = ["--configfiles", str(REPO / "config/config.yaml"), str(REPO / "config/demo.yaml")]
VARIANTS = ["clm-detour", "mlm-baseline", "clm-freeze-low", "clm-freeze-mid", "clm-long-decay"]


def user_task_fixtures(tmp_path: Path) -> list[str]:
    """--config overrides pointing the paper's user-provided tasks at small local files."""
    folder = tmp_path / "user_tasks"
    folder.mkdir(exist_ok=True)
    for split in ("train", "dev", "test"):
        (folder / f"{split}.jsonl").write_text(f'{{"id": "{split}", "text": "t", "label": "a", "labels": ["a"]}}\n')
    # targets must come before --configfiles/--config (both take several values)
    return ["--config", "tasks={" + ", ".join(f"{t}: {{path: {folder}}}" for t in ("distemist", "meddialog", "diamed")) + "}"]


def dry(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SNAKE, "--directory", str(workdir), "-n", "--cores", "2", *args], capture_output=True,
                          text=True, timeout=300, check=False)


def test_dry_run_paper_config_all(tmp_path):
    t0 = time.perf_counter()
    r = dry(tmp_path, "all", "--configfile", str(REPO / "config/config.yaml"), *user_task_fixtures(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    j = jobs(r.stdout)
    # 5 phase-1 jobs (clm-long-decay reuses clm-detour's), 6 decays: clm-freeze-low-emb included
    assert j["pretrain_phase1"] == 5 and j["pretrain_decay"] == 6 and j["prepare_corpus"] == 1
    assert j["corpus_shard_text"] == j["corpus_shard_tokens"] == 4 * 16  # 4 Hub sources x corpus.hub_shards
    assert time.perf_counter() - t0 < 120
    # decontaminate_against: all -> the corpus waits for every task (user tasks given here)
    r = dry(tmp_path, "clm_freeze_low_emb", "--configfile", str(REPO / "config/config.yaml"), *user_task_fixtures(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    j = jobs(r.stdout)
    assert j["pretrain_phase1"] == 1 and j["pretrain_decay"] == 1 and j["prepare_task"] == 8


def test_dry_run_paper_pretrain_all_needs_no_user_task(tmp_path):
    r = dry(tmp_path, "pretrain_all", "--configfile", str(REPO / "config/config.yaml"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "fetch_model" in r.stdout and "fetch_dataset" in r.stdout


def test_dry_run_demo_named_targets(tmp_path):
    r = dry(tmp_path, "clm_freeze_low", *DEMO_CFG)
    assert r.returncode == 0, r.stderr[-3000:]
    j = jobs(r.stdout)
    assert j["pretrain_phase1"] == 1 and j["pretrain_decay"] == 1 and j.get("build_base") == 1
    r = dry(tmp_path, "results/pretrain/clm-long-decay/decay/model", *DEMO_CFG)
    j = jobs(r.stdout)
    assert j["pretrain_phase1"] == 1  # clm-detour's phase 1, reused
    assert "results/pretrain/clm-detour/phase1/model" in r.stdout


# ---------------------------------------------------------------- the shared demo run (slow)


def run_record(demo_run: Path, variant: str, phase: str) -> dict:
    return json.loads((demo_run / f"results/pretrain/{variant}/{phase}/run.json").read_text())


@pytest.mark.slow
def test_demo_phases_learn_and_record_the_run(demo_run):
    for variant in VARIANTS:
        phases = ["decay"] if variant == "clm-long-decay" else ["phase1", "decay"]
        for phase in phases:
            r = run_record(demo_run, variant, phase)
            assert r["valid_loss_end"] < r["valid_loss_start"], (variant, phase)
            assert r["tokens"] >= r["tokens_budget"]
            assert r["attention"]["causal"] == (r["objective"] == "clm")
            assert r["grad_accum"] == r["global_batch_sequences"] // r["micro_batch_sequences"]
            folder = demo_run / f"results/pretrain/{variant}/{phase}/model"
            assert (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()
            log = [json.loads(x) for x in (folder.parent / "train_log.jsonl").read_text().splitlines()]
            assert {"step", "tokens", "loss", "lr", "tokens_per_s"} <= set(log[0])
    p1, decay = run_record(demo_run, "clm-detour", "phase1"), run_record(demo_run, "clm-detour", "decay")
    assert p1["objective"] == "clm" and p1["attention"]["causality_check_max_diff"] <= 1e-4
    assert decay["offset_tokens"] == p1["tokens"]  # the decay continues the data stream
    long_decay = run_record(demo_run, "clm-long-decay", "decay")
    assert long_decay["input_model"].endswith("results/pretrain/clm-detour/phase1/model")
    assert not (demo_run / "results/pretrain/clm-long-decay/phase1").exists()


@pytest.mark.slow
def test_demo_freeze_low_keeps_frozen_layers_bit_identical(demo_run):
    base = load_file(demo_run / "results/base/model/model.safetensors")
    p1 = load_file(demo_run / "results/pretrain/clm-freeze-low/phase1/model/model.safetensors")
    run = run_record(demo_run, "clm-freeze-low", "phase1")
    frozen = set(run["frozen_parameters"])
    assert frozen and all(n.startswith(("model.layers.0.", "model.layers.1.")) for n in frozen)
    for name, tensor in p1.items():
        if name in frozen:
            assert torch.equal(tensor, base[name]), name
    assert not torch.equal(p1["model.layers.3.mlp.Wi.weight"], base["model.layers.3.mlp.Wi.weight"])


@pytest.mark.slow
def test_demo_editing_decay_reschedules_only_decay_jobs(demo_run, tmp_path):
    overlay = tmp_path / "decay_lr.yaml"
    overlay.write_text("pretraining:\n  decay:\n    lr: 2.5e-4\n    final_lr_fraction: 0.2\n")
    r = dry(demo_run, "pretrain_all", *DEMO_CFG, str(overlay))
    assert r.returncode == 0, r.stderr[-3000:]
    j = jobs(r.stdout)
    assert j.get("pretrain_decay") == 5
    assert "prepare_corpus" not in j and "pretrain_phase1" not in j and "build_base" not in j
    r = dry(demo_run, "pretrain_all", *DEMO_CFG)
    assert "Nothing to be done" in r.stdout + r.stderr


#: README "What a config edit reruns": an edit of a finished demo -> the jobs `all` then plans (rule -> count).
_AFTER_TABLE = {"config_used": 1, "eval_table": 1, "claims": 1, "plot_eval_scores": 1, "stage_release": 2, "all": 1}
_AFTER_PHASES = {**_AFTER_TABLE, "finetune": 10, "layer_drift": 5, "plot_training_curves": 1, "layer_drift_table": 1,
                 "plot_layer_drift": 1}
CONFIG_EDITS = {
    "evaluation: {report_scale: 1}\n": _AFTER_TABLE,
    "tasks: {diamed: {finetune: {epochs: 4}}}\n": {**_AFTER_TABLE, "finetune": 3},
    "pretraining: {decay: {lr: 2.5e-4}}\n": {**_AFTER_PHASES, "pretrain_decay": 5},
    "pretraining: {loss_chunk_tokens: 1024}\n": {**_AFTER_PHASES, "build_base": 1, "pretrain_phase1": 4,
                                                 "pretrain_decay": 5},
}


@pytest.mark.slow  # four dry runs of the finished demo: 40 s
@pytest.mark.parametrize("edit", list(CONFIG_EDITS))
def test_a_config_edit_between_two_runs_reruns_what_the_readme_says(demo_run, tmp_path, edit):
    """Issue 58, a fault never tried: a config edited between two runs. The rerun plans exactly the jobs the
    README's table names for that edit (a table setting: the table and what reads it; a task's fine-tuning:
    that task's fine-tunes; the decay: the decays and everything after them)."""
    overlay = tmp_path / "edit.yaml"
    overlay.write_text(edit)
    r = dry(demo_run, "all", *DEMO_CFG, str(overlay))
    assert r.returncode == 0, r.stderr[-3000:]
    assert jobs(r.stdout) == CONFIG_EDITS[edit]


@pytest.mark.slow
def test_demo_run_replans_nothing_with_the_upgrade_command(demo_run):
    """README's upgrade command keeps a finished run: nothing is planned (and nothing by default)."""
    for triggers in (["--rerun-triggers", "mtime", "params", "input"], []):
        r = dry(demo_run, "all", *DEMO_CFG, *triggers)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "Nothing to be done" in r.stdout + r.stderr, (triggers, jobs(r.stdout))


@pytest.mark.slow
def test_demo_corpus_manifest(demo_run):
    m = json.loads((demo_run / "results/corpus/manifest.json").read_text())
    assert set(m["sources"]) == {"clinical_cases", "scientific_articles", "drug_leaflets"}
    assert m["train"]["packing_efficiency"] > 0.99
    assert len(m["hashes"]["train_token_ids"]) == 64
    for s in m["sources"].values():
        assert s["licence"] and s["epochs"] > 0 and s["tokens_train"] > 0
    # one shard per demo source (issue 40); the shards' counts add up to the sources'
    assert sorted(m["shards"]) == sorted(f"{name}-00000" for name in m["sources"])
    for name, s in m["sources"].items():
        shard = m["shards"][f"{name}-00000"]
        assert shard["documents_read"] == s["documents_read"] and shard["tokens"] >= s["tokens_available"]
    assert not (demo_run / "checkpoints" / "scratch" / "corpus-shards").exists() or not any(
        p.is_file() for p in (demo_run / "checkpoints" / "scratch" / "corpus-shards").rglob("*"))  # temporary


@pytest.mark.slow
def test_run_summary_of_the_demo_run(demo_run, tmp_path):
    from clmdetour.run_summary import main, summarize

    text = summarize(demo_run)
    for name in ("clinical_cases", "scientific_articles", "drug_leaflets", "base / base MLM"):
        assert name in text
    for variant in VARIANTS:
        assert f"| {variant} / decay | mlm |" in text
    assert "| clm-detour / phase1 | clm |" in text
    assert "| mlm-baseline |" in text  # the evaluation table's baseline row
    assert "## The paper's claims on this run" in text and "| C1 |" in text
    out = tmp_path / "summary.md"
    assert main([str(demo_run), "--out", str(out)]) == 0 and out.read_text() == text
    assert main([str(tmp_path / "absent")]) == 1


@pytest.mark.slow
def test_demo_tasks_are_learnable(demo_run):
    """The demo tasks carry signal a model can learn within the demo budget (docs/tasks.md, 'What the demo grid shows')."""
    def mean_score(model, task):
        recs = [json.loads(p.read_text()) for p in sorted((demo_run / f"results/eval/{model}/{task}").glob("seed*.json"))]
        assert len(recs) == 3 and all(r["status"] == "ok" for r in recs)
        return sum(r["metrics"][r["metric"]] for r in recs) / len(recs)

    assert mean_score("mlm-baseline", "emea") > 0.6  # held-out entity terms: placed by what pretraining taught
    assert mean_score("mlm-baseline", "medline") > 0.5
    assert mean_score("random-init", "emea") > 0.2  # context alone still finds some entities



@pytest.mark.slow
def test_demo_eval_table_tells_the_truth(demo_run):
    """The demo table's statistics columns, trivial row, document groups and eval_runs' other metric."""
    import math

    import pandas as pd
    import yaml

    from clmdetour.evaluation.table import table_columns

    demo = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    tasks = demo["evaluation"].get("tasks") or list(demo["tasks"])
    models = demo["evaluation"]["models"]
    fracco = [t for t in ("fracco-30", "fracco-100", "cantemist") if t in tasks]  # one document group
    n_groups = len(tasks) - max(0, len(fracco) - 1)
    table = pd.read_csv(demo_run / "results/eval_table.tsv", sep="\t")
    assert list(table.columns) == table_columns(tasks)
    assert list(table["model"]) == models + ["trivial"]
    table = table.set_index("model")
    trivial = table.loc["trivial"]
    others = [c for c in table.columns if not c.endswith("_mean")]
    assert trivial[others].isna().all()
    for t in tasks:
        assert 0 <= trivial[f"{t}_mean"] <= 1, t
        assert table.loc[models, f"{t}_trivial"].tolist() == pytest.approx([trivial[f"{t}_mean"]] * len(models))
        assert table[f"{t}_p_wilcoxon"].isna().all()                       # 3 seeds: below 6
        mdd = table.loc[models, f"{t}_mdd"]
        assert ((mdd > 0) | mdd.isna()).all(), t                             # never 0
        for m in models:
            row = table.loc[m]
            if m != "mlm-baseline" and row[f"{t}_std"] == 0 and table.loc["mlm-baseline", f"{t}_std"] == 0:
                assert math.isnan(row[f"{t}_p_welch"]) and math.isnan(row[f"{t}_mdd"]), (m, t)
    for t in ("emea", "medline"):
        assert trivial[f"{t}_mean"] == 0  # no entities
    base = table.loc["mlm-baseline"]
    assert base[["sign_wins", "sign_p", "sign_groups_wins", "sign_groups_p"]].isna().all()
    for m in models:
        if m == "mlm-baseline":
            continue
        row = table.loc[m]
        assert row["sign_wins"] + row["sign_ties"] <= len(tasks)
        assert row["sign_groups_wins"] + row["sign_groups_ties"] <= n_groups
        for t in tasks:
            if abs(row[f"{t}_delta"]) < 0.0005:
                assert row["sign_ties"] >= 1
    md = (demo_run / "results/eval_table.md").read_text()
    assert "| trivial |" in md and "| model | task | seeds | Δ | p paired | p Wilcoxon | p Welch | MDD |" in md
    if len(fracco) > 1:
        assert " + ".join(f"`{t}`" for t in fracco) in md and f"{n_groups} groups in all" in md
    runs = pd.read_csv(demo_run / "results/eval_runs.tsv", sep="\t")
    ok = runs[runs["status"] == "ok"]
    assert set(ok["metric_other"]) <= {"f1_macro", "f1_micro"}
    assert (ok["metric_other"] != ok["metric"]).all() and ok["score_other"].between(0, 1).all()


def _demo_records(demo_run, model):
    out = {}
    for p in sorted((demo_run / f"results/eval/{model}").glob("*/seed*.json")):
        rec = json.loads(p.read_text())
        out.setdefault(rec["task"], []).append(rec)
    return out


@pytest.mark.slow
def test_demo_sweep_chooses_inside_the_grid_for_random_init(demo_run):
    """Issue 16: random-init's chosen lr is at neither end of the grid on every task whose curve is not flat."""
    for task, recs in _demo_records(demo_run, "random-init").items():
        sweeps = [r["lr_sweep"] for r in recs]
        assert len({(s["chosen_lr"], tuple(s["dev_mean"])) for s in sweeps}) == 1, task  # one choice per job
        sw = sweeps[0]
        assert len(sw["grid"]) >= 3 and sw["chosen_lr"] in sw["grid"]
        assert all(r["hyperparameters"]["lr"] == sw["chosen_lr"] for r in recs)
        if max(sw["dev_mean"]) - min(sw["dev_mean"]) > sw["tie_tolerance"]:
            assert 0 < sw["chosen_index"] < len(sw["grid"]) - 1, (task, sw["grid"], sw["dev_mean"])


@pytest.mark.slow
def test_demo_positive_control(demo_run):
    """Issue 16: the demo detects pretraining: mlm-baseline beats random-init on at least 7 of 8 tasks
    (or on every task, at least 5, when the demo keeps fewer), and eval_table.md ends with the control line."""
    import pandas as pd

    table = pd.read_csv(demo_run / "results/eval_table.tsv", sep="\t").set_index("model")
    tasks = [c[:-len("_mean")] for c in table.columns if c.endswith("_mean")]
    tol = 0.0005
    d = {t: table.loc["mlm-baseline", f"{t}_mean"] - table.loc["random-init", f"{t}_mean"] for t in tasks}
    wins = sum(v > tol for v in d.values())
    losses = sum(v < -tol for v in d.values())
    last = (demo_run / "results/eval_table.md").read_text().rstrip("\n").splitlines()[-1]
    assert last.startswith(f"positive control: mlm-baseline vs random-init: {wins} wins / {len(tasks) - wins - losses} ties / "
                           f"{losses} losses, sign p = "), last
    assert (wins >= 7) if len(tasks) >= 8 else (wins == len(tasks) >= 5), d


@pytest.mark.slow
def test_demo_claims_match_the_table_and_the_drift(demo_run):
    """results/claims.tsv says what the demo's own table and drift file say: C1's sign test is the table's,
    C2 and C3 are stated with numbers, C4 is not measured (the demo grid keeps 3 models) and names the key."""
    import math

    import pandas as pd

    claims = pd.read_csv(demo_run / "results/claims.tsv", sep="\t", keep_default_na=False).set_index("claim")
    assert list(claims.index) == ["C1", "C2", "C3", "C4", "C5"]
    table = pd.read_csv(demo_run / "results/eval_table.tsv", sep="\t").set_index("model")
    detour = table.loc["clm-detour"]
    c1 = claims.loc["C1"]
    assert c1["this_run"].startswith(f"{int(detour['sign_wins'])} / {int(detour['sign_ties'])} / ")
    assert math.isclose(float(c1["p"]), float(detour["sign_p"]), rel_tol=1e-9)
    wins, ties = int(detour["sign_wins"]), int(detour["sign_ties"])
    losses = len([c for c in table.columns if c.endswith("_mean")]) - wins - ties
    if wins <= losses:
        assert c1["verdict"] in ("not supported",) or c1["verdict"].startswith("cannot be read")
    for claim in ("C2", "C3"):
        assert claims.loc[claim]["verdict"].split(" (")[0] in ("supported", "not supported", "inconclusive")
        assert any(ch.isdigit() for ch in claims.loc[claim]["this_run"])
    assert claims.loc["C4"]["verdict"].startswith("not measured (add clm-freeze-low and clm-freeze-mid to evaluation.models")
    assert claims.loc["C5"]["verdict"].startswith("not measured (one model size")
    md = (demo_run / "results/claims.md").read_text()
    assert md.count("\n| C") == 5 and (demo_run / "results/plots/claims.png").stat().st_size > 1000
