# Stage: Hub release. stage_release -> results/release/{variant}/ (model, tokenizer,
# generated README.md card); push_release -> results/release/{variant}.push.json
# (opt-in: only when a repo id is configured and the receipt is requested).
# Library: clmdetour.release.{compat,records,licence,card,stage,push}.
# Paths and input functions: clmdetour.pipeline (PIPELINE, common.smk).

RELEASE = config["release"]


rule stage_release:
    input:
        unpack(PIPELINE.release_inputs),
    output:
        directory(paths.release_dir("{variant}")),
    log:
        "logs/stage_release/{variant}.log",
    benchmark:
        "results/benchmarks/stage_release/{variant}.tsv"
    threads: 1
    resources:
        mem_mb=RELEASE["mem_mb"],
        runtime=RELEASE["runtime_min"],
    params:
        release=lambda w: canonical(PIPELINE.card_release(w)),
        tasks=canonical(PIPELINE.card_tasks()),
        evaluation=canonical(PIPELINE.card_evaluation()),
        base_model=canonical(
            {k: config["base_model"][k] for k in ("key", "hub_id", "revision")}
        ),
        description=lambda w: config["pretraining"]["variants"][w.variant].get(
            "description"
        ),
        reference_models=canonical(
            {
                k: {"hub_id": v.get("hub_id")}
                for k, v in (config.get("reference_models") or {}).items()
            }
        ),
        phase1_owner=lambda w: phase1_owner(config, w.variant),
        language=config["language"],
    script:
        "../scripts/stage_release.py"


rule push_release:
    input:
        staged=paths.release_dir("{variant}"),
        decay_run=paths.phase_run("{variant}", "decay"),
    output:
        paths.push_record("{variant}"),
    log:
        "logs/push_release/{variant}.log",
    localrule: True
    resources:
        runtime=RELEASE["runtime_min"],
    params:
        repo_id=PIPELINE.push_repo,
        private=RELEASE["private"],
        commit_message=lambda w: RELEASE["commit_message"],
    script:
        "../scripts/push_release.py"


for _variant in VARIANTS:

    rule:
        name:
            f"release_{variant_target(_variant)}"
        input:
            paths.release_dir(_variant),
        localrule: True


rule release_all:
    input:
        [paths.release_dir(v) for v in VARIANTS],
    localrule: True
