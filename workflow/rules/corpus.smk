# Stage: corpus. Demo text generation, Hub dataset fetch, and the packed pretraining corpus.
# Paths and input functions: clmdetour.pipeline (PIPELINE, common.smk).


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
        name=alternation(list(PIPELINE.hub_sources)),
    params:
        source=lambda w: canonical(PIPELINE.hub_sources[w.name]),
    script:
        "../scripts/fetch_dataset.py"


rule prepare_corpus:
    input:
        unpack(PIPELINE.corpus_inputs),
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
        tasks=canonical(PIPELINE.decontaminate_against),
        hub_dirs=canonical(PIPELINE.hub_source_dirs()),
        language=config["language"],
    script:
        "../scripts/prepare_corpus.py"
