# Stage: corpus. Demo text generation, Hub dataset fetch, and the packed pretraining corpus.
# Paths and input functions: clmdetour.pipeline (PIPELINE, common.smk).


localrules:
    fetch_dataset,


rule demo_corpus:
    output:
        corpus=paths.DEMO_CORPUS,
        base_corpus=paths.DEMO_BASE_CORPUS,
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
        folder=directory(paths.dataset_dir("{name}")),
    log:
        "logs/fetch_dataset/{name}.log",
    wildcard_constraints:
        name=alternation(list(PIPELINE.hub_sources)),
    params:
        source=lambda w: canonical(PIPELINE.hub_sources[w.name]),
    script:
        "../scripts/fetch_dataset.py"


# The corpus step, cut into shards (clmdetour.corpus.shards): per shard a text job (load, clean,
# deduplicate within the shard, decontamination matches) and a token job, then one merge. Shard
# outputs are temporary, in the run's scratch: removed once the merge (and held_apart_corpus) read them.
rule corpus_shard_text:
    input:
        unpack(PIPELINE.shard_text_inputs),
    output:
        folder=temp(directory(PIPELINE.shard_dir("{shard}", "text"))),
    log:
        "logs/corpus_shard_text/{shard}.log",
    benchmark:
        "results/benchmarks/corpus_shard_text/{shard}.tsv"
    wildcard_constraints:
        shard="[a-z0-9][a-z0-9_-]*-[0-9]{5}[0-9]*",
    priority: PRETRAIN_PRIORITY
    threads: CORPUS["num_proc"]
    resources:
        cpus_per_task=CORPUS["num_proc"],
        mem_mb=CLUSTER["corpus_shard_mem_mb"],
        runtime=CLUSTER["corpus_shard_runtime_min"],
    params:
        corpus=canonical(PIPELINE.shard_text_section()),
        shard=lambda w: canonical(PIPELINE.shard(w.shard)),
        source=lambda w: canonical(PIPELINE.shard_source(w.shard)),
        tasks=canonical(PIPELINE.decontaminate_against),
        hub_dir=lambda w: PIPELINE.shard_hub_dir(w.shard),
        language=config["language"],
    script:
        "../scripts/corpus_shard_text.py"


rule corpus_shard_tokens:
    input:
        text=PIPELINE.shard_dir("{shard}", "text"),
        tokenizer=PIPELINE.base_init_dir(),
    output:
        folder=temp(directory(PIPELINE.shard_dir("{shard}", "tokens"))),
    log:
        "logs/corpus_shard_tokens/{shard}.log",
    benchmark:
        "results/benchmarks/corpus_shard_tokens/{shard}.tsv"
    wildcard_constraints:
        shard="[a-z0-9][a-z0-9_-]*-[0-9]{5}[0-9]*",
    priority: PRETRAIN_PRIORITY
    threads: CORPUS["num_proc"]
    resources:
        cpus_per_task=CORPUS["num_proc"],
        mem_mb=CLUSTER["corpus_shard_mem_mb"],
        runtime=CLUSTER["corpus_shard_runtime_min"],
    params:
        batch_size=CORPUS["batch_size"],
    script:
        "../scripts/corpus_shard_tokens.py"


rule prepare_corpus:
    input:
        unpack(PIPELINE.corpus_inputs),
    output:
        train=directory(f"{paths.CORPUS_DIR}/train"),
        valid=directory(paths.CORPUS_VALID),
        manifest=paths.CORPUS_MANIFEST,
    log:
        "logs/prepare_corpus/prepare_corpus.log",
    benchmark:
        "results/benchmarks/prepare_corpus/prepare_corpus.tsv"
    priority: PRETRAIN_PRIORITY
    threads: 1
    resources:
        cpus_per_task=CLUSTER["corpus_cpus"],
        mem_mb=CLUSTER["corpus_mem_mb"],
        runtime=CLUSTER["corpus_runtime_min"],
    params:
        corpus=canonical(CORPUS),
        shards=canonical(PIPELINE.shards),
        tasks=canonical(PIPELINE.decontaminate_against),
        language=config["language"],
    script:
        "../scripts/prepare_corpus.py"
