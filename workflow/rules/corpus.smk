# Stage: corpus. Demo text generation, Hub dataset fetch, and the packed pretraining corpus.
# snakemake --lint "mixed rules and functions": this stage's input functions stay beside the rules they feed; paths and targets come from clmdetour.pipeline.

# CORPUS, HUB_SOURCES and PRETRAIN_PRIORITY (common.smk, clmdetour.pipeline) are shared with pretrain.smk.
DEMO_SOURCES = [s for s in CORPUS["sources"] if s["format"] == "demo"]


localrules:
    fetch_dataset,


rule demo_corpus:
    output:
        corpus=pipeline.DEMO_CORPUS,
        base_corpus=pipeline.DEMO_BASE_CORPUS,
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
        folder=directory(pipeline.dataset_dir("{name}")),
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
        inputs["demo_corpus"] = pipeline.DEMO_CORPUS
    inputs["hub"] = [pipeline.dataset_dir(name) for name in HUB_SOURCES]
    inputs["tasks"] = [pipeline.task_dir(task) for task in DECONTAMINATE_AGAINST]
    return inputs


rule prepare_corpus:
    input:
        unpack(corpus_inputs),
    output:
        train=directory(f"{pipeline.CORPUS_DIR}/train"),
        valid=directory(pipeline.CORPUS_VALID),
        manifest=pipeline.CORPUS_MANIFEST,
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
        hub_dirs=canonical({name: pipeline.dataset_dir(name) for name in HUB_SOURCES}),
    script:
        "../scripts/prepare_corpus.py"
