# Stage: corpus. Demo text generation, Hub dataset fetch, and the packed pretraining corpus.

CORPUS = config["corpus"]
DEMO_SOURCES = [s for s in CORPUS["sources"] if s["format"] == "demo"]
HUB_SOURCES = {s["name"]: s for s in CORPUS["sources"] if s["format"] == "hub"}
# The pretraining chain (corpus -> base -> phase 1 -> decay) is the DAG's critical path: its
# jobs go before ready fine-tunes, so that a variant's fine-tunes are not all left for the end.
PRETRAIN_PRIORITY = 10


localrules:
    fetch_dataset,


rule demo_corpus:
    output:
        corpus="results/demo/corpus.jsonl",
        base_corpus="results/demo/base_corpus.jsonl",
    log:
        "logs/demo_corpus/demo_corpus.log",
    priority: PRETRAIN_PRIORITY
    params:
        demo=canonical(config["demo"]),
    script:
        "../scripts/demo_corpus.py"


rule fetch_dataset:
    # Network: runs on the submit host (localrule). Every other rule reads local files only.
    output:
        folder=directory("resources/datasets/{name}"),
    log:
        "logs/fetch_dataset/{name}.log",
    wildcard_constraints:
        name=_alternation(list(HUB_SOURCES)),
    params:
        source=lambda w: canonical(HUB_SOURCES[w.name]),
    script:
        "../scripts/fetch_dataset.py"


def _check_decontamination_tasks():
    """Stop planning of the corpus (and all it feeds) when a task to decontaminate against is missing.

    Whatever evaluation.missing_user_tasks says: a corpus silently built without the
    decontamination the config asks for would leak that task's dev/test text.
    """
    from clmdetour.tasks.prepare import (
        missing_files,
        resolve_task_spec,
        user_task_message,
    )

    for task in DECONTAMINATE_AGAINST:
        spec = resolve_task_spec(task, (config.get("tasks") or {})[task])
        missing = missing_files(spec) if spec["source"] == "user" else []
        if missing:
            listed = (
                "lists"
                if CORPUS["decontaminate_against"] != "all"
                else "(all) includes"
            )
            raise WorkflowError(
                f"corpus.decontaminate_against {listed} task {task!r}, whose files are missing, so results/corpus/ "
                f"cannot be built: {user_task_message(task, spec, missing)}; provide them, or remove {task!r} "
                "from corpus.decontaminate_against (and say so when you report results)"
            )


def corpus_inputs(wildcards):
    _check_decontamination_tasks()
    inputs = {"tokenizer": base_model_dir()}
    if DEMO_SOURCES:
        inputs["demo_corpus"] = "results/demo/corpus.jsonl"
    inputs["hub"] = [f"resources/datasets/{name}" for name in HUB_SOURCES]
    inputs["tasks"] = [f"results/tasks/{task}" for task in DECONTAMINATE_AGAINST]
    return inputs


rule prepare_corpus:
    input:
        unpack(corpus_inputs),
    output:
        train=directory("results/corpus/train"),
        valid=directory("results/corpus/valid"),
        manifest="results/corpus/manifest.json",
    log:
        "logs/prepare_corpus/prepare_corpus.log",
    benchmark:
        "results/benchmarks/prepare_corpus/prepare_corpus.tsv"
    priority: PRETRAIN_PRIORITY
    threads: CORPUS["num_proc"]
    resources:
        cpus_per_task=CLUSTER["corpus_cpus"],
        mem_mb=CLUSTER["corpus_mem_mb"],
        runtime=CLUSTER["corpus_runtime_min"],
    params:
        corpus=canonical(CORPUS),
        tasks=canonical(DECONTAMINATE_AGAINST),
        hub_dirs=canonical({name: f"resources/datasets/{name}" for name in HUB_SOURCES}),
    script:
        "../scripts/prepare_corpus.py"
