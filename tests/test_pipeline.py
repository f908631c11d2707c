"""clmdetour.pipeline: the wiring as functions of the config (paths, targets, rule names)."""
import pytest
from helpers import REPO

from clmdetour.config import ConfigError, _deep_merge, load_yaml, validate_config
from clmdetour.pipeline import Pipeline, paths


def _config(*overlays: dict) -> dict:
    cfg = _deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml"))
    for o in overlays:
        cfg = _deep_merge(cfg, o)
    return validate_config(cfg)


def test_demo_targets_follow_the_config():
    p = Pipeline(_config())
    assert p.builds_base and p.base_model_dir() == paths.BUILT_BASE_DIR
    assert p.eval_models == ["clm-detour", "mlm-baseline", "random-init"]
    # clm-long-decay reuses clm-detour's phase 1: its outputs name the owner's record
    assert p.pretrain_outputs("clm-long-decay") == [
        "results/pretrain/clm-long-decay/decay/model", "results/pretrain/clm-long-decay/decay/run.json",
        "results/pretrain/clm-detour/phase1/run.json"]
    assert p.phase_input_model("clm-long-decay", "decay") == "results/pretrain/clm-detour/phase1/model"
    assert p.model_dir("random-init") == paths.RANDOM_INIT_DIR
    n_runs = sum(len(p.task_seeds[t]) for t in p.eval_tasks) * len(p.eval_models)
    assert len(p.eval_grid_outputs()) == n_runs and p.model_eval_outputs("clm-freeze-low") == []
    everything = p.all_targets()
    assert paths.EVAL_TABLE in everything and paths.LAYER_DRIFT_TABLE in everything
    assert "results/plots/eval_scores.png" in everything
    # the demo sets a licence: releases of the evaluated variants only
    assert [t for t in everything if t.startswith("results/release/")] == [
        "results/release/clm-detour", "results/release/mlm-baseline"]


def test_no_task_means_no_table_no_eval_figure_no_release():
    p = Pipeline(_config({"evaluation": {"tasks": []}}))
    assert p.eval_tasks == [] and p.eval_table_outputs() == [] and p.eval_grid_outputs() == []
    assert "eval_scores" not in p.analysis_figures()
    assert p.release_outputs("clm-detour") == []
    assert not any(r.startswith("finetune") for r in p.rule_names())


def test_no_licence_means_no_release_in_all():
    p = Pipeline(_config({"release": {"licence": None}}))
    assert not any(t.startswith("results/release/") for t in p.all_targets())
    assert "release_clm_detour" in p.rule_names()  # the named target still stages on request


def test_unknown_model_key_names_the_candidates():
    with pytest.raises(ConfigError, match="neither a variant"):
        Pipeline(_config()).model_dir("no-such-model")


def test_every_task_has_a_named_preparation_target():
    p = Pipeline(_config())
    assert p.task_target("fracco-30") == "prepare_task_fracco_30"
    names = p.rule_names()
    assert {p.task_target(t) for t in p.task_specs} <= names and "prepare_task_emea" in names
    assert len(p.task_specs) == 8  # the demo configures the paper's 8 tasks, each with its target


def test_one_finetune_rule_per_seed_list():
    p = Pipeline(_config({"tasks": {"emea": {"seeds": 2}}}))
    rules = p.finetune_rules()
    assert len(rules) == 2 and "finetune" not in rules
    assert rules["finetune_2seeds_from0"] == ["emea"]


@pytest.mark.parametrize("name", ["eval-table", "build-base"])
def test_a_variant_named_like_a_rule_is_refused(name):
    overlay = {"pretraining": {"variants": {name: {"phase1": {"objective": "clm"}}}}}
    with pytest.raises(ConfigError, match="collides with the rule"):
        Pipeline(_config(overlay))


class _W(dict):
    """Wildcards as Snakemake passes them to input functions (attribute access)."""
    __getattr__ = dict.__getitem__


def test_input_functions_raise_workflow_errors_that_name_the_fix():
    from snakemake.exceptions import WorkflowError

    p = Pipeline(_config({"release": {"repo_ids": {}, "repo_template": None}}))
    with pytest.raises(WorkflowError, match=r"task 'nosuch' is not in config tasks"):
        p.task_source_input(_W(task="nosuch"))
    with pytest.raises(WorkflowError, match="neither a variant"):
        p.model_input(_W(model="no-such-model"))
    with pytest.raises(WorkflowError, match=r"'random-init' is not a Hub model of the config; fetchable: \['drbert"):
        p.hub_spec(_W(model="random-init"))  # built, not fetched
    with pytest.raises(WorkflowError, match="set release.repo_ids.clm-detour or release.repo_template"):
        p.push_repo(_W(variant="clm-detour"))
    with pytest.raises(WorkflowError, match="release.licence is not set"):
        Pipeline(_config({"release": {"licence": None}})).release_inputs(_W(variant="clm-detour"))


def test_release_and_drift_inputs_take_phase1_from_its_owner():
    p = Pipeline(_config())
    drift = p.layer_drift_inputs(_W(variant="clm-long-decay"))
    assert drift["phase1"] == "results/pretrain/clm-detour/phase1/model"
    assert drift["decay"] == "results/pretrain/clm-long-decay/decay/model"
    release = p.release_inputs(_W(variant="clm-long-decay"))
    assert release["phase1_run"] == "results/pretrain/clm-detour/phase1/run.json"
    assert release["eval_table"] == paths.EVAL_TABLE
    # the card's release keys carry only this variant's repo id
    q = Pipeline(_config({"release": {"repo_ids": {"clm-detour": "org/a", "mlm-baseline": "org/b"}}}))
    assert q.card_release(_W(variant="clm-detour"))["repo_ids"] == {"clm-detour": "org/a"}


def test_phase_resources_one_node_and_several():
    cluster = {"pretrain_gpus": 4, "pretrain_nodes": 1, "cpus_per_gpu": 16, "cpu_threads": 1,
               "mem_mb_per_gpu": 120000, "pretrain_runtime_min": 2880, "gpu_model": "h100"}
    one = paths.phase_resources(cluster)
    assert one == {"cpus_per_task": 64, "mem_mb": 480000, "runtime": 2880, "gpu": 4, "gpu_model": "h100"}
    two = paths.phase_resources({**cluster, "pretrain_nodes": 2})
    assert two["nodes"] == 2 and two["tasks"] == 2 and two["mpi"] == "srun"
    assert two["gres"] == "gpu:h100:4" and two["tasks_per_gpu"] == 0 and "gpu" not in two
    cpu = paths.phase_resources({**cluster, "pretrain_gpus": 0})
    assert cpu["cpus_per_task"] == 1 and cpu["mem_mb"] == 8000 and cpu["gpu"] == 0


def test_two_tasks_fetching_one_dataset_differently_are_refused():
    url = "https://example.org/quaero.zip"
    with pytest.raises(ConfigError, match="dataset 'quaero' is fetched by another task"):
        Pipeline(_config({"tasks": {
            "emea": {"source": "url", "url": url, "dataset": "quaero", "path": "resources/datasets/quaero",
                     "format": "brat", "subfolder": "EMEA", "type": "ner"},
            "medline": {"source": "url", "url": url + "?v=2", "dataset": "quaero", "path": "resources/datasets/quaero",
                        "format": "brat", "subfolder": "MEDLINE", "type": "ner"}}}))


def test_finetune_priority_is_longest_first_below_the_pretraining_chain():
    from types import SimpleNamespace as W

    p = Pipeline(_config({"tasks": {"diamed": {"finetune": {"epochs": 1}}}}))
    prio = {t: p.finetune_priority(W(model="random-init", task=t)) for t in p.eval_tasks}
    work = {t: p.finetune_work(t) for t in p.eval_tasks}
    # demo: 3 seeds x 3 grid points x 64 tokens; 5 epochs on emea, medline, meddialog, 2 on distemist, 1 on diamed
    assert work["meddialog"] == 5 * 3 * 3 * 64 and work["diamed"] == 1 * 3 * 3 * 64
    assert max(prio.values()) == paths.PRETRAIN_PRIORITY - 1 == prio["meddialog"] == prio["emea"]
    assert prio["meddialog"] > prio["distemist"] > prio["diamed"] > 0
    assert sorted(prio, key=prio.get) == sorted(work, key=work.get)
    assert p.finetune_priority(W(model="random-init", task="no-such-task")) == 0.0
    # a task outside the grid, asked for by its file, is ranked against the grid's tasks
    assert 0 < p.finetune_priority(W(model="random-init", task="fracco-30")) < paths.PRETRAIN_PRIORITY - 1
