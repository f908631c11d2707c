# Stage: pretraining. The demo base model, phase 1 (CLM or MLM) and the MLM decay of every variant.
# Paths, resources and input functions: clmdetour.pipeline (PIPELINE, common.smk).
from clmdetour.demo.base import init_build
from clmdetour.pipeline.paths import phase_resources

PHASE_RESOURCES = phase_resources(CLUSTER)
PHASE_THREADS = PHASE_RESOURCES["cpus_per_task"]


if BUILDS_BASE:

    rule held_apart_corpus:
        input:
            unpack(PIPELINE.held_apart_inputs),
        output:
            paths.HELD_APART_CORPUS,
        log:
            "logs/held_apart_corpus/held_apart_corpus.log",
        params:
            corpus=canonical(CORPUS),
            shards=canonical(PIPELINE.shards),
            tasks=canonical(PIPELINE.decontaminate_against),
            language=config["language"],
        script:
            "../scripts/held_apart_corpus.py"

    # The tokenizer and the untrained model (INIT_KEYS of base_model.build): prepare_corpus and
    # random_init read it, and so run beside build_base's MLM pretraining.
    rule base_init:
        input:
            base_corpus=PIPELINE.base_corpus_path(),
        output:
            model=directory(paths.BUILT_BASE_INIT_DIR),
        log:
            "logs/base_init/base_init.log",
        priority: PRETRAIN_PRIORITY
        threads: 1
        resources:
            mem_mb=4000,
            runtime=30,
        params:
            build=canonical(
                init_build(
                    config["base_model"]["build"], config["base_model"]["num_layers"]
                )
            ),
        script:
            "../scripts/base_init.py"

    rule build_base:
        input:
            base_corpus=PIPELINE.base_corpus_path(),
            init=paths.BUILT_BASE_INIT_DIR,
        output:
            model=directory(paths.BUILT_BASE_DIR),
            run=paths.BUILT_BASE_RUN,
            train_log=paths.BUILT_BASE_LOG,
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


# The two phase rules are script: rules (workflow/scripts/pretrain_phase.py, clmdetour.training.phase_job):
# Snakemake picks the interpreter when the job runs (the image's under a container), so no interpreter path or
# other launch detail is part of their code or params. The script builds the launcher's command, one argument per
# value (a model folder named with a space, `$`, quotes or `;` reaches the phase as one argument), sets the
# offline variables and CLMDETOUR_THREADS, and writes the launcher's output to the rule's log.
PHASE_LAUNCH = {
    "gpus": int(CLUSTER["pretrain_gpus"]),
    "nodes": int(CLUSTER["pretrain_nodes"]),
}


rule pretrain_phase1:
    input:
        model=lambda w: PIPELINE.base_model_dir(),
        train=f"{paths.CORPUS_DIR}/train",
        valid=paths.CORPUS_VALID,
        manifest=paths.CORPUS_MANIFEST,
    output:
        model=directory(paths.phase_model("{variant}", "phase1")),
        train_log=paths.phase_train_log("{variant}", "phase1"),
        run=paths.phase_run("{variant}", "phase1"),
    log:
        "logs/pretrain_phase1/{variant}.log",
    benchmark:
        "results/benchmarks/pretrain_phase1/{variant}.tsv"
    wildcard_constraints:
        variant=alternation(PIPELINE.phase1_owners),
    priority: PRETRAIN_PRIORITY
    threads: PHASE_THREADS
    resources:
        **PHASE_RESOURCES,
    params:
        **PHASE_LAUNCH,
        section=lambda w: PIPELINE.phase_section_json(w.variant, "phase1"),
        allow_repeat=CORPUS["allow_repeat"],
    script:
        "../scripts/pretrain_phase.py"


rule pretrain_decay:
    input:
        model=lambda w: PIPELINE.phase_input_model(w.variant, "decay"),
        previous_run=lambda w: paths.phase_run(
            phase1_owner(config, w.variant), "phase1"
        ),
        train=f"{paths.CORPUS_DIR}/train",
        valid=paths.CORPUS_VALID,
        manifest=paths.CORPUS_MANIFEST,
    output:
        model=directory(paths.phase_model("{variant}", "decay")),
        train_log=paths.phase_train_log("{variant}", "decay"),
        run=paths.phase_run("{variant}", "decay"),
    log:
        "logs/pretrain_decay/{variant}.log",
    benchmark:
        "results/benchmarks/pretrain_decay/{variant}.tsv"
    priority: PRETRAIN_PRIORITY
    threads: PHASE_THREADS
    resources:
        **PHASE_RESOURCES,
    params:
        **PHASE_LAUNCH,
        section=lambda w: PIPELINE.phase_section_json(w.variant, "decay"),
        allow_repeat=CORPUS["allow_repeat"],
    script:
        "../scripts/pretrain_phase.py"
