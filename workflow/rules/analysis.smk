# Analysis: which layers changed (weight change, CKA vs the base model), the
# report figures, and the config record shown in `snakemake --report`.
# Library: clmdetour.analysis.{cka,drift,plots}. CPU only, small jobs.
# Paths and input functions: clmdetour.pipeline (PIPELINE, common.smk).

ANALYSIS = config["analysis"]


rule layer_drift:
    input:
        unpack(PIPELINE.layer_drift_inputs),
    output:
        paths.layer_drift_path("{variant}"),
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
        [paths.layer_drift_path(v) for v in VARIANTS],
    output:
        report(
            paths.LAYER_DRIFT_TABLE,
            caption="../report/layer_drift_table.rst",
            category="Layer analysis",
        ),
    log:
        "logs/layer_drift_table/all.log",
    script:
        "../scripts/layer_drift.py"


rule plot_layer_drift:
    input:
        paths.LAYER_DRIFT_TABLE,
    output:
        layers_png=report(
            paths.plot_path("layer_drift", "png"),
            caption="../report/layer_drift.rst",
            category="Layer analysis",
        ),
        layers_svg=report(
            paths.plot_path("layer_drift", "svg"),
            caption="../report/layer_drift.rst",
            category="Layer analysis",
        ),
        modules_png=report(
            paths.plot_path("layer_drift_modules", "png"),
            caption="../report/layer_drift_modules.rst",
            category="Layer analysis",
        ),
        modules_svg=report(
            paths.plot_path("layer_drift_modules", "svg"),
            caption="../report/layer_drift_modules.rst",
            category="Layer analysis",
        ),
    log:
        "logs/plot_layer_drift/all.log",
    params:
        objectives=canonical(PIPELINE.phase1_objectives()),
    script:
        "../scripts/plots_layer_drift.py"


rule plot_training_curves:
    input:
        [paths.phase_train_log(v, p) for v, p in PIPELINE.training_log_runs()],
    output:
        png=report(
            paths.plot_path("training_curves", "png"),
            caption="../report/training_curves.rst",
            category="Training",
        ),
        svg=report(
            paths.plot_path("training_curves", "svg"),
            caption="../report/training_curves.rst",
            category="Training",
        ),
    log:
        "logs/plot_training_curves/all.log",
    params:
        runs=canonical(PIPELINE.training_log_runs()),
        objectives=canonical(PIPELINE.phase1_objectives()),
    script:
        "../scripts/plots_training.py"


rule plot_eval_scores:
    input:
        PIPELINE.eval_runs_input,
    output:
        png=report(
            paths.plot_path("eval_scores", "png"),
            caption="../report/eval_scores.rst",
            category="Evaluation",
        ),
        svg=report(
            paths.plot_path("eval_scores", "svg"),
            caption="../report/eval_scores.rst",
            category="Evaluation",
        ),
    log:
        "logs/plot_eval_scores/all.log",
    params:
        # the table's orders (evaluation.models / evaluation.tasks), not the merge order of config files
        model_order=PIPELINE.eval_models,
        task_order=PIPELINE.eval_tasks,
    script:
        "../scripts/plots_eval.py"


rule config_used:
    output:
        report(
            paths.CONFIG_RECORD,
            caption="../report/config.rst",
            category="Configuration",
        ),
    log:
        "logs/config_used/all.log",
    params:
        config=canonical(config),
    script:
        "../scripts/config_used.py"


# The paper's claims tested on this run's results (docs/claims.md): `snakemake claims`.
rule claims:
    input:
        unpack(PIPELINE.claims_inputs),
    output:
        tsv=report(paths.CLAIMS_TSV, caption="../report/claims.rst", category="Claims"),
        md=paths.CLAIMS_MD,
        png=report(
            paths.plot_path("claims", "png"),
            caption="../report/claims_figure.rst",
            category="Claims",
        ),
        svg=report(
            paths.plot_path("claims", "svg"),
            caption="../report/claims_figure.rst",
            category="Claims",
        ),
    log:
        "logs/claims/all.log",
    localrule: True
    params:
        spec=canonical(PIPELINE.claims_spec()),
        tasks=PIPELINE.eval_tasks,
        objectives=canonical(PIPELINE.phase1_objectives()),
    script:
        "../scripts/claims.py"
