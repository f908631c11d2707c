"""The paths of the pipeline's contract, the rule names, and small helpers the rule files use.

Every file a stage reads or writes is named here once (the rule files and the stage classes of
:mod:`clmdetour.pipeline` build their paths with these functions), relative to the working
directory. ``{model}`` is a config key (``[a-z0-9][a-z0-9-]*``), never a Hub id.
"""

from __future__ import annotations

import json
import re

# ---------------------------------------------------------------- paths of the contract

CORPUS_DIR = "results/corpus"
CORPUS_MANIFEST = f"{CORPUS_DIR}/manifest.json"
CORPUS_VALID = f"{CORPUS_DIR}/valid"
DEMO_CORPUS = "results/demo/corpus.jsonl"
DEMO_BASE_CORPUS = "results/demo/base_corpus.jsonl"
DEMO_TASKS_ROOT = "results/demo/tasks"
HELD_APART_CORPUS = "results/base/held_apart.jsonl"
BUILT_BASE_DIR = "results/base/model"
# The built base before its MLM pretraining (tokenizer + seeded initialisation): what the corpus is
# tokenised with and random-init is drawn from, so that neither waits for the pretraining.
BUILT_BASE_INIT_DIR = "results/base/init"
BUILT_BASE_RUN = "results/base/run.json"
BUILT_BASE_LOG = "results/base/train_log.jsonl"
RANDOM_INIT_DIR = "results/random-init/model"
EVAL_TABLE = "results/eval_table.tsv"
EVAL_RUNS = "results/eval_runs.tsv"
EVAL_TABLE_MD = "results/eval_table.md"
EVAL_RANKING = "results/eval_ranking.tsv"
EVAL_TABLE_FILES = {"table": EVAL_TABLE, "runs": EVAL_RUNS, "md": EVAL_TABLE_MD, "ranking": EVAL_RANKING}
LAYER_DRIFT_TABLE = "results/analysis/layer_drift.tsv"
CLAIMS_TSV = "results/claims.tsv"
CLAIMS_MD = "results/claims.md"
CONFIG_RECORD = "results/config_used.yaml"
PLOT_EXTS = ("png", "svg")
ANALYSIS_FIGURES = ("layer_drift", "layer_drift_modules", "training_curves")
EVAL_FIGURE = "eval_scores"
CLAIMS_FIGURE = "claims"

# The pretraining chain (corpus -> base -> phase 1 -> decay) is the DAG's critical path: its
# jobs go before ready fine-tunes, so that a variant's fine-tunes are not all left for the end.
# The reference models' jobs (random_init, fetch_model) share it: a priority-0 job waits until no
# fine-tune is ready (Snakemake does not pass priority on to a job's inputs), which left random-init's
# 6-minute FrACCO-30 job of real-small to the end.
PRETRAIN_PRIORITY = 10

# Every rule the rule files declare by a fixed name. Per-variant targets (pretrain_{v}, {v},
# release_{v}) and the fine-tuning rules of a config with several seed lists are added by
# Pipeline.rule_names(); tests/test_pipeline_dags.py compares the two with workflow.rules.
STATIC_RULES = frozenset({
    "all", "pretrain_all", "eval_all", "analysis_all", "release_all",
    "demo_corpus", "fetch_dataset", "corpus_shard_text", "corpus_shard_tokens", "prepare_corpus", "held_apart_corpus", "base_init", "build_base",
    "pretrain_phase1", "pretrain_decay",
    "fetch_url", "fetch_task_hub", "demo_task_source", "demo_tasks", "prepare_task",
    "fetch_model", "random_init", "eval_table",
    "layer_drift", "layer_drift_table", "plot_layer_drift", "plot_training_curves", "plot_eval_scores",
    "config_used", "stage_release", "push_release", "claims",
})
# Declared only when the config builds its base model (base_model.build: demo, real-small).
BASE_BUILD_RULES = frozenset({"held_apart_corpus", "base_init", "build_base"})


def phase_dir(variant: str, phase: str) -> str:
    """``results/pretrain/{variant}/{phase}``: a phase's model and records."""
    return f"results/pretrain/{variant}/{phase}"


def phase_model(variant: str, phase: str) -> str:
    """The HF model folder a phase writes."""
    return f"{phase_dir(variant, phase)}/model"


def phase_run(variant: str, phase: str) -> str:
    """The phase's ``run.json`` record."""
    return f"{phase_dir(variant, phase)}/run.json"


def phase_train_log(variant: str, phase: str) -> str:
    """The phase's ``train_log.jsonl`` (one line per logged step)."""
    return f"{phase_dir(variant, phase)}/train_log.jsonl"


def final_model_dir(variant: str) -> str:
    """The final (post-decay) model of a variant."""
    return phase_model(variant, "decay")


def task_dir(task: str) -> str:
    """A prepared task: ``train``/``dev``/``test``, ``labels.json``, ``manifest.json``."""
    return f"results/tasks/{task}"


def seed_json(model: str, task: str, seed: int) -> str:
    """One fine-tuning seed's record."""
    return f"results/eval/{model}/{task}/seed{seed}.json"


def layer_drift_path(variant: str) -> str:
    """A variant's per-layer drift table."""
    return f"results/analysis/{variant}/layer_drift.tsv"


def release_dir(variant: str) -> str:
    """A variant's staged Hub release (model, tokenizer, card)."""
    return f"results/release/{variant}"


def push_record(variant: str) -> str:
    """The record of a variant's push to the Hub (repo id, commit)."""
    return f"{release_dir(variant)}.push.json"


def plot_path(figure: str, ext: str) -> str:
    """A report figure, ``results/plots/{figure}.{ext}``."""
    return f"results/plots/{figure}.{ext}"


def fetched_model_dir(key: str) -> str:
    """A model fetched from the Hub (the base model or a reference model)."""
    return f"resources/models/{key}"


def dataset_dir(name: str) -> str:
    """A fetched dataset (a Hub corpus source, or a task's url / hub download)."""
    return f"resources/datasets/{name}"


def alternation(names) -> str:
    """A wildcard constraint matching exactly ``names`` (regex-escaped); one that matches nothing when empty."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


def json_param(fn):
    """A params function returning ``fn(wildcards)`` as canonical JSON (sorted keys)."""
    return lambda wildcards: json.dumps(fn(wildcards), sort_keys=True)


def phase_resources(cluster: dict) -> dict:
    """Snakemake resources of a pretraining phase job, from the ``cluster`` config section.

    One node: ``gpu`` (and ``gpu_model``), ``cpus_per_task`` = GPUs x ``cpus_per_gpu`` (or
    ``cpu_threads`` on CPU), ``mem_mb`` = GPUs x ``mem_mb_per_gpu`` (8,000 MB on CPU), ``runtime``
    in minutes. Several nodes: sbatch ``--nodes=K --ntasks=K`` (one launcher per node;
    ``cpus_per_task`` and ``mem_mb`` per node) through the SLURM executor plugin's ``mpi`` route,
    whose job script runs the rule's shell itself, so that its ``srun`` spans every node (otherwise
    the plugin wraps the job in ``srun -n1``, which SLURM confines to one node); GPUs as GRES, which
    counts per node (the plugin's ``gpu`` is a total per job), with ``tasks_per_gpu: 0`` so that the
    plugin does not turn ``tasks`` into ``--ntasks-per-gpu``. Checked on a real 2-node allocation by
    tests/test_slurm_cluster.py.
    """
    gpus, nodes = cluster["pretrain_gpus"], cluster["pretrain_nodes"]
    res = {
        "cpus_per_task": gpus * cluster["cpus_per_gpu"] if gpus else cluster["cpu_threads"],
        "mem_mb": gpus * cluster["mem_mb_per_gpu"] if gpus else 8000,
        "runtime": cluster["pretrain_runtime_min"],
    }
    if nodes == 1:
        res["gpu"] = gpus
        if gpus and cluster.get("gpu_model"):
            res["gpu_model"] = cluster["gpu_model"]
        return res
    res.update(nodes=nodes, tasks=nodes, mpi="srun")
    if gpus:
        res["gres"] = f"gpu:{cluster['gpu_model']}:{gpus}" if cluster.get("gpu_model") else f"gpu:{gpus}"
        res["tasks_per_gpu"] = 0
    return res


def finetune_rule_name(seeds: tuple[int, ...], groups: int) -> str:
    """``finetune`` when every task has the same seed list (``groups == 1``), else one rule per list."""
    return "finetune" if groups == 1 else f"finetune_{len(seeds)}seeds_from{seeds[0]}"


