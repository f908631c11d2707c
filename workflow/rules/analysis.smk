# Analysis: which layers changed (weight change, CKA vs the base model), the
# report figures, and the config record shown in `snakemake --report`.
# Library: clmdetour.analysis.{cka,drift,plots}. CPU only, small jobs.

ANALYSIS = config["analysis"]
PLOT_EXTS = ["png", "svg"]
EVAL_RUNS = "results/eval_runs.tsv"


def eval_runs_declared():
    """True when some rule (evaluate.smk's eval_table) produces results/eval_runs.tsv.

    Checked lazily (from input functions or after every rule file is included),
    so the analysis stage works before the evaluation stage exists.
    """
    declared = globals().get(
        "eval_table_outputs"
    )  # evaluate.smk: [] when the config has no task
    if declared is not None:
        return EVAL_RUNS in declared()
    return hasattr(rules, "eval_table") or any(
        str(f) == EVAL_RUNS for r in workflow.rules for f in r.output
    )


def analysis_outputs():
    """Every analysis target for `rule all`: the combined drift table, all plots, the config record."""
    figures = ["layer_drift", "layer_drift_modules", "training_curves"]
    if eval_runs_declared():
        figures.append("eval_scores")
    return [
        "results/analysis/layer_drift.tsv",
        "results/config_used.yaml",
        *expand("results/plots/{figure}.{ext}", figure=figures, ext=PLOT_EXTS),
    ]


def layer_drift_inputs(wildcards):
    """Base model, the variant's phase-1 model (its owner's, for phase1_from) and decay model, their run.json, held-out text."""
    owner = phase1_owner(config, wildcards.variant)
    return {
        "base": base_model_dir(),
        "phase1": f"results/pretrain/{owner}/phase1/model",
        "phase1_run": f"results/pretrain/{owner}/phase1/run.json",
        "decay": f"results/pretrain/{wildcards.variant}/decay/model",
        "decay_run": f"results/pretrain/{wildcards.variant}/decay/run.json",
        "valid": "results/corpus/valid",
    }


def phase1_objectives():
    """Phase-1 objective (clm / mlm) of every variant, for the plots' line styles."""
    return {v: resolve_phase(config, v, "phase1")["objective"] for v in VARIANTS}


def training_log_runs():
    """(variant, phase) of every pretraining phase that trains (phase_from variants own no phase 1)."""
    return [[v, "phase1"] for v in PHASE1_OWNERS] + [[v, "decay"] for v in VARIANTS]


def eval_runs_input(wildcards):
    if not eval_runs_declared():
        raise WorkflowError(
            f"plot_eval_scores needs {EVAL_RUNS}, but no rule produces it (evaluation stage missing)"
        )
    return EVAL_RUNS


rule layer_drift:
    input:
        unpack(layer_drift_inputs),
    output:
        "results/analysis/{variant}/layer_drift.tsv",
    log:
        "logs/layer_drift/{variant}.log",
    benchmark:
        "results/benchmarks/layer_drift/{variant}.tsv"
    threads: ANALYSIS["threads"]
    resources:
        mem_mb=ANALYSIS["mem_mb"],
        runtime=ANALYSIS["runtime_min"],
    params:
        analysis=canonical(ANALYSIS),
    script:
        "../scripts/layer_drift.py"


rule layer_drift_table:
    input:
        expand("results/analysis/{variant}/layer_drift.tsv", variant=VARIANTS),
    output:
        report(
            "results/analysis/layer_drift.tsv",
            caption="../report/layer_drift_table.rst",
            category="Layer analysis",
        ),
    log:
        "logs/layer_drift_table/all.log",
    script:
        "../scripts/layer_drift.py"


rule plot_layer_drift:
    input:
        "results/analysis/layer_drift.tsv",
    output:
        layers_png=report(
            "results/plots/layer_drift.png",
            caption="../report/layer_drift.rst",
            category="Layer analysis",
        ),
        layers_svg=report(
            "results/plots/layer_drift.svg",
            caption="../report/layer_drift.rst",
            category="Layer analysis",
        ),
        modules_png=report(
            "results/plots/layer_drift_modules.png",
            caption="../report/layer_drift_modules.rst",
            category="Layer analysis",
        ),
        modules_svg=report(
            "results/plots/layer_drift_modules.svg",
            caption="../report/layer_drift_modules.rst",
            category="Layer analysis",
        ),
    log:
        "logs/plot_layer_drift/all.log",
    params:
        objectives=canonical(phase1_objectives()),
    script:
        "../scripts/plots_layer_drift.py"


rule plot_training_curves:
    input:
        [f"results/pretrain/{v}/{p}/train_log.jsonl" for v, p in training_log_runs()],
    output:
        png=report(
            "results/plots/training_curves.png",
            caption="../report/training_curves.rst",
            category="Training",
        ),
        svg=report(
            "results/plots/training_curves.svg",
            caption="../report/training_curves.rst",
            category="Training",
        ),
    log:
        "logs/plot_training_curves/all.log",
    params:
        runs=canonical(training_log_runs()),
        objectives=canonical(phase1_objectives()),
    script:
        "../scripts/plots_training.py"


rule plot_eval_scores:
    input:
        eval_runs_input,
    output:
        png=report(
            "results/plots/eval_scores.png",
            caption="../report/eval_scores.rst",
            category="Evaluation",
        ),
        svg=report(
            "results/plots/eval_scores.svg",
            caption="../report/eval_scores.rst",
            category="Evaluation",
        ),
    log:
        "logs/plot_eval_scores/all.log",
    params:
        # the table's orders (evaluation.models / evaluation.tasks), not the merge order of config files
        model_order=EVAL_MODELS,
        task_order=EVAL_TASKS,
    script:
        "../scripts/plots_eval.py"


rule config_used:
    output:
        report(
            "results/config_used.yaml",
            caption="../report/config.rst",
            category="Configuration",
        ),
    log:
        "logs/config_used/all.log",
    params:
        config=canonical(config),
    run:
        import yaml
        from clmdetour.io import atomic_write_text

        header = "# The configuration this run used: config files and --config values merged, schema defaults filled in.\n"
        atomic_write_text(
            output[0],
            header
            + yaml.safe_dump(params.config, sort_keys=False, allow_unicode=True),
        )
        with open(log[0], "w") as f:
            print(
                f"wrote {output[0]} (sections: {', '.join(params.config)})", file=f
            )
