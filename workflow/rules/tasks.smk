# Stage: evaluation task data. Fetch (url / hub), the demo task sources, and
# prepare_task: one task -> results/tasks/{task}/ (train/dev/test + labels.json + manifest.json).
# Paths and input functions: clmdetour.pipeline (PIPELINE, common.smk).
from clmdetour.demo.tasks import DEFINITION_VERSIONS as DEMO_DEFINITION_VERSIONS
from clmdetour.demo.tasks import DEMO_SOURCES as DEMO_TASK_SOURCES
from clmdetour.tasks.contract import output_columns

DEMO_TASKS_ROOT = paths.DEMO_TASKS_ROOT
URL_DATASETS = PIPELINE.url_datasets
HUB_DATASETS = PIPELINE.hub_datasets


localrules:
    fetch_url,
    fetch_task_hub,


rule fetch_url:
    # Network: runs on the submit host (localrule). sha256 recorded on first fetch, checked after.
    output:
        folder=directory(paths.dataset_dir("{dataset}")),
    log:
        "logs/fetch_url/{dataset}.log",
    wildcard_constraints:
        dataset=alternation(URL_DATASETS),
    params:
        url=lambda w: URL_DATASETS[w.dataset]["url"],
        sha256=lambda w: URL_DATASETS[w.dataset]["sha256"],
        record_dir="resources/checksums",
    script:
        "../scripts/fetch_url.py"


rule fetch_task_hub:
    # Network: a Hub dataset snapshot (parquet / arrow / json; loading scripts are refused).
    output:
        folder=directory(paths.dataset_dir("{dataset}")),
    log:
        "logs/fetch_task_hub/{dataset}.log",
    wildcard_constraints:
        dataset=alternation(HUB_DATASETS),
    params:
        hub_id=lambda w: HUB_DATASETS[w.dataset]["hub_id"],
        revision=lambda w: HUB_DATASETS[w.dataset]["revision"],
    script:
        "../scripts/fetch_task_hub.py"


# fetch_url / fetch_task_hub before corpus.smk's fetch_dataset (the same folder pattern): Snakefile.


rule demo_task_source:
    output:
        folder=directory(f"{DEMO_TASKS_ROOT}/{{demo_source}}"),
    log:
        "logs/demo_task_source/{demo_source}.log",
    wildcard_constraints:
        demo_source=alternation(DEMO_TASK_SOURCES),
    params:
        seed=config["demo"]["seed"],
        n_train=config["demo"]["task_train_examples"],
        n_eval=config["demo"]["task_eval_examples"],
        noise=config["demo"]["task_label_noise"],
        definition=lambda w: DEMO_DEFINITION_VERSIONS[w.demo_source],
    script:
        "../scripts/demo_tasks.py"


rule demo_tasks:
    input:
        expand(f"{DEMO_TASKS_ROOT}/{{demo_source}}", demo_source=DEMO_TASK_SOURCES),


rule prepare_task:
    input:
        unpack(PIPELINE.task_source_input),
    output:
        directory(paths.task_dir("{task}")),
    log:
        "logs/prepare_task/{task}.log",
    benchmark:
        "results/benchmarks/prepare_task/{task}.tsv"
    resources:
        mem_mb=8000,
        runtime=60,
    params:
        spec=lambda w: canonical(PIPELINE.task_data_params(w)),
        columns=lambda w: output_columns(PIPELINE.task_specs[w.task]["type"]),
        language=config["language"],
    script:
        "../scripts/prepare_task.py"
