# Stage: Hub release. stage_release -> results/release/{variant}/ (model, tokenizer,
# generated README.md card); push_release -> results/release/{variant}.push.json
# (opt-in: only when a repo id is configured and the receipt is requested).
# Library: clmdetour.release.{compat,records,licence,card,stage,push}.
# snakemake --lint "mixed rules and functions": this stage's input functions stay beside the rules they feed; paths and targets come from clmdetour.pipeline.
from clmdetour.release.licence import restricted_sources as _restricted_sources
from clmdetour.release.stage import repo_id_for as _repo_id_for

RELEASE = config["release"]


def _check_release_config(variant):
    """Fail at DAG build, before any job, on release settings staging would reject."""
    if not RELEASE["licence"]:
        raise WorkflowError(
            f"release of {variant!r}: config key release.licence is not set; give the Hub licence id "
            "of the released weights (e.g. apache-2.0, mit, cc-by-4.0, cc-by-nc-4.0, other)"
        )
    declared = {s["name"]: s.get("licence") for s in config["corpus"]["sources"]}
    restricted = _restricted_sources(declared)
    if restricted and not (RELEASE["licence_reason"] or "").strip():
        listed = ", ".join(
            f"{n} ({declared[n]}: {k})" for n, k in sorted(restricted.items())
        )
        raise WorkflowError(
            f"release of {variant!r}: corpus.sources include {listed}; set release.licence_reason "
            "to say why the release may be published (the model card states it)"
        )


def release_inputs(wildcards):
    """Final model, the records the card cites (phase 1 from its owner), corpus manifest, eval table."""
    _check_release_config(wildcards.variant)
    owner = phase1_owner(config, wildcards.variant)
    return {
        "model": final_model_dir(wildcards.variant),
        "phase1_run": pipeline.phase_run(owner, "phase1"),
        "decay_run": pipeline.phase_run(wildcards.variant, "decay"),
        "manifest": pipeline.CORPUS_MANIFEST,
        "eval_table": pipeline.EVAL_TABLE,
    }


def _card_tasks():
    """Per task only what the card states: fine-tuning edits never restage."""
    keys = ("type", "metric", "name", "hub_id", "description")
    tasks = config.get("tasks") or {}
    return {
        t: {k: tasks[t][k] for k in keys if k in tasks[t]} for t in PIPELINE.eval_tasks
    }


def _card_evaluation():
    ev = config.get("evaluation") or {}
    return {
        "allow_missing": bool(ev.get("allow_missing", False)),
        "baseline": ev.get("baseline", "mlm-baseline"),
        "left_out": LEFT_OUT_TASKS,
    }


def _card_release(wildcards):
    """The release keys the card states, with only this variant's repo id: editing another
    variant's repo, the push settings or job sizes never restages this one."""
    skip = ("repo_ids", "private", "commit_message", "mem_mb", "runtime_min")
    out = {k: v for k, v in RELEASE.items() if k not in skip}
    repo = _repo_id_for(RELEASE, wildcards.variant)
    out["repo_ids"] = {wildcards.variant: repo} if repo else {}
    out["repo_template"] = None
    return out


def _push_repo(wildcards):
    repo = _repo_id_for(RELEASE, wildcards.variant)
    if repo is None:
        raise WorkflowError(
            f"results/release/{wildcards.variant}.push.json: no Hub repo for {wildcards.variant!r}; "
            f"set release.repo_ids.{wildcards.variant} or release.repo_template"
        )
    return repo


rule stage_release:
    input:
        unpack(release_inputs),
    output:
        directory(pipeline.release_dir("{variant}")),
    log:
        "logs/stage_release/{variant}.log",
    benchmark:
        "results/benchmarks/stage_release/{variant}.tsv"
    threads: 1
    resources:
        mem_mb=RELEASE["mem_mb"],
        runtime=RELEASE["runtime_min"],
    params:
        release=lambda w: canonical(_card_release(w)),
        tasks=canonical(_card_tasks()),
        evaluation=canonical(_card_evaluation()),
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
    script:
        "../scripts/stage_release.py"


rule push_release:
    input:
        staged=pipeline.release_dir("{variant}"),
        decay_run=pipeline.phase_run("{variant}", "decay"),
    output:
        "results/release/{variant}.push.json",
    log:
        "logs/push_release/{variant}.log",
    localrule: True
    resources:
        runtime=RELEASE["runtime_min"],
    params:
        repo_id=_push_repo,
        private=RELEASE["private"],
        commit_message=lambda w: RELEASE["commit_message"],
    script:
        "../scripts/push_release.py"


for _variant in VARIANTS:

    rule:
        name:
            f"release_{variant_target(_variant)}"
        input:
            pipeline.release_dir(_variant),
        localrule: True


rule release_all:
    input:
        [pipeline.release_dir(v) for v in VARIANTS],
    localrule: True
