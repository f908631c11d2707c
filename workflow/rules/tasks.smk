# Stage: evaluation task data. Fetch (url / hub), the demo task sources, and
# prepare_task: one task -> results/tasks/{task}/ (train/dev/test + labels.json + manifest.json).
# snakemake --lint "mixed rules and functions": this stage's input functions stay beside the rules they feed; paths and targets come from clmdetour.pipeline.
from clmdetour.demo.tasks import DEFINITION_VERSIONS as DEMO_DEFINITION_VERSIONS
from clmdetour.demo.tasks import DEMO_SOURCES as DEMO_TASK_SOURCES
from clmdetour.tasks.prepare import (
    TaskError,
    expected_files,
    format_description,
    missing_files,
    output_columns,
    resolve_task_spec,
    user_task_message,
)

DEMO_TASKS_ROOT = pipeline.DEMO_TASKS_ROOT
# Keys that do not change the prepared data: editing them never reruns prepare_task.
_TASK_TRAINING_KEYS = ("finetune", "seeds", "max_length", "instructions")

try:
    TASK_SPECS = {
        name: resolve_task_spec(name, spec)
        for name, spec in (config.get("tasks") or {}).items()
    }
except TaskError as _e:
    raise WorkflowError(f"invalid configuration: {_e}") from None


def _fetched(kind):
    """dataset name -> spec of the tasks fetched by `kind` (url / hub); tasks sharing a dataset must agree."""
    out = {}
    keys = ("url", "sha256") if kind == "url" else ("hub_id", "hub_config", "revision")
    for name, spec in TASK_SPECS.items():
        if spec["source"] != kind or not spec["fetch"]:
            continue  # a hub task with a local path is read there: no fetch
        ds = spec["dataset"]
        if ds in out and any(out[ds][k] != spec[k] for k in keys):
            raise WorkflowError(
                f"tasks.{name}: dataset {ds!r} is fetched by another task with a different {keys}"
            )
        out[ds] = spec
    return out


URL_DATASETS = _fetched("url")
HUB_DATASETS = _fetched("hub")


def task_names():
    """Every configured task."""
    return list(TASK_SPECS)


def task_data_params(task):
    """The part of a task's config that shapes its data (prepare_task's only params)."""
    return {k: v for k, v in TASK_SPECS[task].items() if k not in _TASK_TRAINING_KEYS}


def _demo_source_dir(path):
    parts = Path(path).parts
    root = Path(DEMO_TASKS_ROOT).parts
    if (
        DEMO
        and parts[: len(root)] == root
        and len(parts) > len(root)
        and parts[len(root)] in DEMO_TASK_SOURCES
    ):
        return str(Path(*parts[: len(root) + 1]))
    return None


def task_source_input(wildcards):
    """Input of prepare_task: the fetched folder, the demo source folder, or the task's local files.

    A `user` task whose files are missing raises WorkflowError here (naming the task, the
    files and their format), so only targets that need it fail, before any job runs.
    """
    task = wildcards.task
    if task not in TASK_SPECS:
        raise WorkflowError(
            f"task {task!r} is not in config tasks; tasks: {sorted(TASK_SPECS)}"
        )
    spec = TASK_SPECS[task]
    if spec["source"] in ("url", "hub") and spec["fetch"]:
        return {"source": pipeline.dataset_dir(spec["dataset"])}
    demo_dir = _demo_source_dir(spec["path"])
    if demo_dir:
        return {"source": demo_dir}
    missing = missing_files(spec)
    if missing:
        if spec["source"] == "user":
            raise WorkflowError(user_task_message(task, spec, missing))
        raise WorkflowError(
            f"task {task!r}: source files missing: {missing}; expected: {format_description(spec)}"
        )
    return {"source": expected_files(spec)}


localrules:
    fetch_url,
    fetch_task_hub,


rule fetch_url:
    # Network: runs on the submit host (localrule). sha256 recorded on first fetch, checked after.
    output:
        folder=directory(pipeline.dataset_dir("{dataset}")),
    log:
        "logs/fetch_url/{dataset}.log",
    wildcard_constraints:
        dataset=_alternation(URL_DATASETS),
    params:
        url=lambda w: URL_DATASETS[w.dataset]["url"],
        sha256=lambda w: URL_DATASETS[w.dataset]["sha256"],
        record_dir="resources/checksums",
    script:
        "../scripts/fetch_url.py"


rule fetch_task_hub:
    # Network: a Hub dataset snapshot (parquet / arrow / json; loading scripts are refused).
    output:
        folder=directory(pipeline.dataset_dir("{dataset}")),
    log:
        "logs/fetch_task_hub/{dataset}.log",
    wildcard_constraints:
        dataset=_alternation(HUB_DATASETS),
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
        demo_source=_alternation(DEMO_TASK_SOURCES),
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
        unpack(task_source_input),
    output:
        directory(pipeline.task_dir("{task}")),
    log:
        "logs/prepare_task/{task}.log",
    benchmark:
        "results/benchmarks/prepare_task/{task}.tsv"
    resources:
        mem_mb=8000,
        runtime=60,
    params:
        spec=lambda w: canonical(task_data_params(w.task)),
        columns=lambda w: output_columns(TASK_SPECS[w.task]["type"]),
    script:
        "../scripts/prepare_task.py"
