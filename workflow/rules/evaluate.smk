# Stage: evaluation. Reference models (fetch_model, random_init), one fine-tune job
# per (model, task) running every seed, and the results table (eval_table).
# snakemake --lint "mixed rules and functions": this stage's input functions stay beside the rules they feed; paths and targets come from clmdetour.pipeline.
from clmdetour.finetune.grid import (
    expected_runs,
    finetune_settings,
    finetune_task_params,
    reference_max_length,
)
from clmdetour.pipeline import EVAL_TABLE_FILES, seed_json

EVAL_MODELS = PIPELINE.eval_models
EVAL_TASKS = PIPELINE.eval_tasks
EVAL = config["evaluation"]


def _hub_spec(model):
    """Hub id and revision of a fetchable model key (a Hub reference model, or the base model)."""
    refs = config.get("reference_models") or {}
    if model in refs and refs[model].get("hub_id"):
        return {"hub_id": refs[model]["hub_id"], "revision": refs[model]["revision"]}
    base = config["base_model"]
    if model == BASE_KEY and base.get("hub_id") and not DEMO and not base.get("path"):
        return {"hub_id": base["hub_id"], "revision": base["revision"]}
    fetchable = [k for k, v in refs.items() if v.get("hub_id")] + (
        [BASE_KEY] if base.get("hub_id") and not DEMO else []
    )
    raise WorkflowError(
        f"resources/models/{model}: {model!r} is not a Hub model of the config; fetchable: {fetchable}"
    )


# The only rule that uses the network: pins the revision to a commit and downloads it.
rule fetch_model:
    output:
        directory(pipeline.fetched_model_dir("{model}")),
    log:
        "logs/fetch_model/{model}.log",
    localrule: True
    params:
        spec=lambda w: canonical(_hub_spec(w.model)),
    script:
        "../scripts/fetch_model.py"


rule random_init:
    input:
        base_model_dir(),
    output:
        directory(pipeline.RANDOM_INIT_DIR),
    log:
        "logs/random_init/random-init.log",
    params:
        seed=lambda w: next(
            (
                v.get("seed", 0)
                for v in (config.get("reference_models") or {}).values()
                if v.get("build") == "random-init"
            ),
            0,
        ),
    script:
        "../scripts/random_init.py"


def _finetune_task_dir(wildcards):
    # The task name is checked here so an unknown task fails with the configured list.
    try:
        finetune_task_params(config, wildcards.task)
    except ConfigError as e:
        raise WorkflowError(str(e)) from None
    return pipeline.task_dir(wildcards.task)


def _json_param(fn):
    return lambda w: json.dumps(fn(w), sort_keys=True)


# One rule per distinct seed list (outputs cannot be functions): with the usual
# config (every task the same seed count) there is exactly one, named `finetune`
# (names: clmdetour.pipeline.Pipeline.finetune_rules).
for (_seeds, _tasks), _rule_name in zip(
    PIPELINE.seed_groups.items(), PIPELINE.finetune_rules()
):

    rule:
        name:
            _rule_name
        input:
            model=lambda w: model_dir(w.model),
            task=_finetune_task_dir,
        output:
            [seed_json("{model}", "{task}", s) for s in _seeds],
        log:
            "logs/finetune/{model}/{task}.log",
        benchmark:
            "results/benchmarks/finetune/{model}/{task}.tsv"
        wildcard_constraints:
            task=(
                "|".join(re.escape(t) for t in _tasks)
                if len(PIPELINE.seed_groups) > 1
                else "[a-z0-9][a-z0-9-]*"
            ),
        threads:
            CLUSTER["cpu_threads"]
            if CLUSTER["finetune_gpus"] == 0
            else CLUSTER["cpus_per_gpu"] * CLUSTER["finetune_gpus"]
        resources:
            gpu=CLUSTER["finetune_gpus"],
            mem_mb=(
                CLUSTER["mem_mb_per_gpu"] * max(1, CLUSTER["finetune_gpus"])
                if CLUSTER["finetune_gpus"]
                else 4000
            ),
            runtime=CLUSTER["finetune_runtime_min"],
        params:
            task=_json_param(lambda w: finetune_task_params(config, w.task)),
            settings=json.dumps(finetune_settings(config), sort_keys=True),
            seeds=json.dumps(list(_seeds)),
            model_max_length=lambda w: reference_max_length(config, w.model) or 0,
        script:
            "../scripts/finetune.py"


def eval_table_inputs(wildcards):
    """Every expected seed record; with evaluation.allow_missing only those that exist.

    With allow_missing the table never waits for (or fails on) a missing run:
    run the grid first (e.g. `snakemake --keep-going` on the `{v}` targets), then the table.
    """
    if EVAL["allow_missing"]:
        return [p for p in PIPELINE.eval_grid_outputs() if Path(p).exists()]
    return PIPELINE.eval_grid_outputs()


EVAL_TASK_DIRS = {t: pipeline.task_dir(t) for t in sorted(EVAL_TASKS)}


def eval_table_task_dirs(wildcards):
    """The task folders (trivial baseline, document groups from the manifests); with allow_missing those that exist."""
    if EVAL["allow_missing"]:
        return [d for d in EVAL_TASK_DIRS.values() if Path(d).exists()]
    return list(EVAL_TASK_DIRS.values())


rule eval_table:
    input:
        records=eval_table_inputs,
        tasks=eval_table_task_dirs,
    output:
        table=report(
            EVAL_TABLE_FILES["table"],
            caption="../report/eval_table.rst",
            category="Evaluation",
        ),
        runs=EVAL_TABLE_FILES["runs"],
        md=report(
            EVAL_TABLE_FILES["md"],
            caption="../report/eval_table.rst",
            category="Evaluation",
        ),
    log:
        "logs/eval_table/all.log",
    localrule: True
    params:
        models=EVAL_MODELS,
        tasks=EVAL_TASKS,
        runs=[[m, t, s, seed_json(m, t, s)] for m, t, s in expected_runs(config)],
        baseline=EVAL["baseline"],
        allow_missing=EVAL["allow_missing"],
        scale=EVAL["report_scale"],
        tie_tolerance=EVAL["tie_tolerance"],
        task_dirs=EVAL_TASK_DIRS,
        task_metrics=lambda w: {
            t: finetune_task_params(config, t)["metric"] for t in sorted(EVAL_TASKS)
        },
        left_out=canonical(LEFT_OUT_TASKS),
        control=next(
            (
                k
                for k, v in (config.get("reference_models") or {}).items()
                if v.get("build") == "random-init" and k in EVAL_MODELS
            ),
            None,
        ),
    script:
        "../scripts/eval_table.py"
