# Stage: pretraining. The demo base model, phase 1 (CLM or MLM) and the MLM decay of every variant.
# snakemake --lint "mixed rules and functions": this stage's input functions stay beside the rules they feed; paths and targets come from clmdetour.pipeline.
import json as _json

from clmdetour.training.multinode import srun_prefix

PRE = config["pretraining"]


def _phase_resources(kind):
    gpus, nodes = CLUSTER["pretrain_gpus"], CLUSTER["pretrain_nodes"]
    res = {
        "cpus_per_task": (
            gpus * CLUSTER["cpus_per_gpu"] if gpus else CLUSTER["cpu_threads"]
        ),
        "mem_mb": gpus * CLUSTER["mem_mb_per_gpu"] if gpus else 8000,
        "runtime": CLUSTER["pretrain_runtime_min"],
    }
    if nodes == 1:
        res["gpu"] = gpus
        if gpus and CLUSTER.get("gpu_model"):
            res["gpu_model"] = CLUSTER["gpu_model"]
    else:
        # Several nodes: sbatch --nodes=K --ntasks=K (one launcher per node); cpus_per_task and
        # mem_mb are per node. `mpi` is the SLURM plugin's multi-node route: the rule's shell runs
        # in the batch script itself, so its `srun` (PHASE_SRUN) spans every node (otherwise the
        # plugin wraps the job in `srun -n1`, which SLURM confines to one node). GPUs as GRES, which
        # counts per node (the plugin's `gpu` is a total per job); tasks_per_gpu 0 keeps the plugin
        # from turning `tasks` into --ntasks-per-gpu for a GRES job. Checked on a real 2-node
        # allocation by tests/test_slurm_cluster.py.
        res.update(nodes=nodes, tasks=nodes, mpi="srun")
        if gpus:
            res["gres"] = (
                f"gpu:{CLUSTER['gpu_model']}:{gpus}"
                if CLUSTER.get("gpu_model")
                else f"gpu:{gpus}"
            )
            res["tasks_per_gpu"] = 0
    return res


PHASE_RESOURCES = _phase_resources("phase")
PHASE_THREADS = PHASE_RESOURCES["cpus_per_task"]
# One launcher per node through srun when a phase spans several nodes ('' for one node).
PHASE_SRUN = srun_prefix(CLUSTER["pretrain_nodes"], PHASE_THREADS)


def base_corpus_path():
    """Texts of the built base model: generated demo documents or the held-apart slice of the sources."""
    if config["base_model"]["build"]["corpus"] == "demo":
        return pipeline.DEMO_BASE_CORPUS
    return pipeline.HELD_APART_CORPUS


def held_apart_inputs(wildcards):
    """The sources and the tasks the held-apart text is decontaminated against (checked like the corpus's)."""
    _check_decontamination_tasks()
    return {
        "hub": [pipeline.dataset_dir(name) for name in HUB_SOURCES],
        "tasks": [pipeline.task_dir(task) for task in DECONTAMINATE_AGAINST],
    }


if DEMO:

    rule held_apart_corpus:
        input:
            unpack(held_apart_inputs),
        output:
            pipeline.HELD_APART_CORPUS,
        log:
            "logs/held_apart_corpus/held_apart_corpus.log",
        params:
            corpus=canonical(CORPUS),
            tasks=canonical(DECONTAMINATE_AGAINST),
            hub_dirs=canonical(
                {name: pipeline.dataset_dir(name) for name in HUB_SOURCES}
            ),
        script:
            "../scripts/held_apart_corpus.py"

    rule build_base:
        input:
            base_corpus=base_corpus_path(),
        output:
            model=directory(pipeline.BUILT_BASE_DIR),
            run="results/base/run.json",
            train_log="results/base/train_log.jsonl",
        log:
            "logs/build_base/build_base.log",
        benchmark:
            "results/benchmarks/build_base/build_base.tsv"
        priority: PRETRAIN_PRIORITY
        threads: CLUSTER["cpu_threads"]
        resources:
            mem_mb=4000,
            runtime=60,
        params:
            build=canonical(config["base_model"]["build"]),
            num_layers=config["base_model"]["num_layers"],
            corpus=canonical(CORPUS),
            training=canonical(base_build_section(config)),
        script:
            "../scripts/build_base.py"


def _section_json(wildcards, phase):
    return _json.dumps(resolve_phase(config, wildcards.variant, phase), sort_keys=True)


# snakemake --lint "shell command uses OFFLINE_ENV / PYTHON from outside the rule": one definition for every
# shell rule (common.smk); as params they would reschedule every finished phase.
_PHASE_CMD = (
    "{OFFLINE_ENV} CLMDETOUR_THREADS={threads} "
    + PHASE_SRUN
    + "{PYTHON} -m clmdetour.training.launch "
    f"--gpus {CLUSTER['pretrain_gpus']} --nodes {CLUSTER['pretrain_nodes']} -- "
    "-m clmdetour.training.cli --variant {wildcards.variant} --input-model {input.model} "
    f"--corpus {pipeline.CORPUS_DIR} "
    "--output-dir results/pretrain/{wildcards.variant}/{PHASE} "
    "--section {params.section:q} --allow-repeat {params.allow_repeat} {PREV} > {log} 2>&1"
)


rule pretrain_phase1:
    input:
        model=lambda w: base_model_dir(),
        train=f"{pipeline.CORPUS_DIR}/train",
        valid=pipeline.CORPUS_VALID,
        manifest=pipeline.CORPUS_MANIFEST,
    output:
        model=directory("results/pretrain/{variant}/phase1/model"),
        train_log="results/pretrain/{variant}/phase1/train_log.jsonl",
        run="results/pretrain/{variant}/phase1/run.json",
    log:
        "logs/pretrain_phase1/{variant}.log",
    benchmark:
        "results/benchmarks/pretrain_phase1/{variant}.tsv"
    wildcard_constraints:
        variant=_alternation(PHASE1_OWNERS),
    priority: PRETRAIN_PRIORITY
    threads: PHASE_THREADS
    resources:
        **PHASE_RESOURCES,
    params:
        section=lambda w: _section_json(w, "phase1"),
        allow_repeat="true" if CORPUS["allow_repeat"] else "false",
    shell:
        _PHASE_CMD.replace("{PHASE}", "phase1").replace("{PREV}", "")


rule pretrain_decay:
    input:
        model=lambda w: PIPELINE.phase_input_model(w.variant, "decay"),
        previous_run=lambda w: pipeline.phase_run(
            phase1_owner(config, w.variant), "phase1"
        ),
        train=f"{pipeline.CORPUS_DIR}/train",
        valid=pipeline.CORPUS_VALID,
        manifest=pipeline.CORPUS_MANIFEST,
    output:
        model=directory("results/pretrain/{variant}/decay/model"),
        train_log="results/pretrain/{variant}/decay/train_log.jsonl",
        run="results/pretrain/{variant}/decay/run.json",
    log:
        "logs/pretrain_decay/{variant}.log",
    benchmark:
        "results/benchmarks/pretrain_decay/{variant}.tsv"
    priority: PRETRAIN_PRIORITY
    threads: PHASE_THREADS
    resources:
        **PHASE_RESOURCES,
    params:
        section=lambda w: _section_json(w, "decay"),
        allow_repeat="true" if CORPUS["allow_repeat"] else "false",
    shell:
        _PHASE_CMD.replace("{PHASE}", "decay").replace(
            "{PREV}", "--previous-run {input.previous_run}"
        )
