# Stage: evaluation. Reference models (fetch_model, random_init), one fine-tune job
# per (model, task) running every seed, and the results table (eval_table).
# Paths and input functions: clmdetour.pipeline (PIPELINE, common.smk).
import json
import re

from clmdetour.evaluation.grid import (
    finetune_settings,
    finetune_task_params,
    reference_max_length,
)
from clmdetour.pipeline.paths import EVAL_TABLE_FILES, json_param, seed_json

EVAL = config["evaluation"]


# The only rule that uses the network: pins the revision to a commit and downloads it.
rule fetch_model:
    output:
        directory(paths.fetched_model_dir("{model}")),
    log:
        "logs/fetch_model/{model}.log",
    # a reference model gates its fine-tunes: it goes first, like the pretraining chain (clmdetour.pipeline.paths.PRETRAIN_PRIORITY)
    priority: PRETRAIN_PRIORITY
    localrule: True
    params:
        spec=lambda w: canonical(PIPELINE.hub_spec(w)),
    script:
        "../scripts/fetch_model.py"


rule random_init:
    input:
        PIPELINE.base_init_dir(),
    output:
        directory(paths.RANDOM_INIT_DIR),
    log:
        "logs/random_init/random-init.log",
    priority: PRETRAIN_PRIORITY
    params:
        seed=lambda w: PIPELINE.random_init_seed(),
    script:
        "../scripts/random_init.py"


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
            model=PIPELINE.model_input,
            task=PIPELINE.finetune_task_input,
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
        priority: PIPELINE.finetune_priority
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
            task=json_param(lambda w: finetune_task_params(config, w.task)),
            settings=json.dumps(finetune_settings(config), sort_keys=True),
            seeds=json.dumps(list(_seeds)),
            model_max_length=lambda w: reference_max_length(config, w.model) or 0,
        script:
            "../scripts/finetune.py"


rule eval_table:
    input:
        records=PIPELINE.eval_table_records,
        tasks=PIPELINE.eval_table_task_dirs,
    output:
        table=report(
            EVAL_TABLE_FILES["table"],
            caption="../report/eval_table.rst",
            category="Evaluation",
        ),
        runs=EVAL_TABLE_FILES["runs"],
        ranking=EVAL_TABLE_FILES["ranking"],
        md=report(
            EVAL_TABLE_FILES["md"],
            caption="../report/eval_table.rst",
            category="Evaluation",
        ),
    log:
        "logs/eval_table/all.log",
    localrule: True
    params:
        models=PIPELINE.eval_models,
        tasks=PIPELINE.eval_tasks,
        runs=PIPELINE.eval_table_runs(),
        baseline=EVAL["baseline"],
        allow_missing=EVAL["allow_missing"],
        scale=EVAL["report_scale"],
        tie_tolerance=EVAL["tie_tolerance"],
        task_dirs=PIPELINE.eval_task_dirs(),
        task_metrics=PIPELINE.task_metrics,
        table_metrics=PIPELINE.task_table_metrics,
        left_out=canonical(LEFT_OUT_TASKS),
        control=PIPELINE.control_model(),
    script:
        "../scripts/eval_table.py"
