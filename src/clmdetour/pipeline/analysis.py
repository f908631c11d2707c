"""The analysis (``analysis.smk``): layer drift, the report figures and the config record."""

from __future__ import annotations

# Snakemake's own error class (snakemake.exceptions re-exports it): input functions raise it so that
# Snakemake reports the message with the rule and wildcards, and nothing runs.
from snakemake_interface_common.exceptions import WorkflowError

from clmdetour.config import phase1_owner
from clmdetour.pipeline.paths import (
    ANALYSIS_FIGURES,
    CLAIMS_FIGURE,
    CLAIMS_MD,
    CLAIMS_TSV,
    CONFIG_RECORD,
    CORPUS_VALID,
    EVAL_FIGURE,
    EVAL_RUNS,
    EVAL_TABLE,
    LAYER_DRIFT_TABLE,
    PLOT_EXTS,
    phase_model,
    phase_run,
    plot_path,
)


class AnalysisStage:
    """The analysis (``analysis.smk``): layer drift, the report figures and the config record.

    One part of :class:`clmdetour.pipeline.Pipeline`, whose constructor sets the attributes used here.
    """

    def analysis_figures(self) -> list[str]:
        """The report figures (the evaluation scores only when there is a table)."""
        return [*ANALYSIS_FIGURES, *([EVAL_FIGURE] if self.eval_tasks else [])]

    def analysis_outputs(self) -> list[str]:
        """The combined drift table, every figure in every format, the config record and the claims."""
        return [LAYER_DRIFT_TABLE, CONFIG_RECORD,
                *[plot_path(f, ext) for f in self.analysis_figures() for ext in PLOT_EXTS], *self.claims_outputs()]

    def claims_outputs(self) -> list[str]:
        """The claims table (TSV, Markdown) and its figure (rule ``claims``, :mod:`clmdetour.evaluation.claims`)."""
        return [CLAIMS_TSV, CLAIMS_MD, *[plot_path(CLAIMS_FIGURE, ext) for ext in PLOT_EXTS]]

    def claims_inputs(self, wildcards=None) -> dict:
        """claims's input: the drift table, the evaluation table when the grid has tasks, and
        ``claims.compare_drift`` (another size's drift table) when set."""
        inputs = {"drift": LAYER_DRIFT_TABLE}
        if self.eval_tasks and self.eval_models:
            inputs["table"] = EVAL_TABLE
        other = (self.config.get("claims") or {}).get("compare_drift")
        if other:
            inputs["other_drift"] = other
        return inputs

    def claims_spec(self) -> dict:
        """The claims rule's params: who plays which part (:func:`clmdetour.evaluation.claims.spec_from_config`)."""
        from dataclasses import asdict

        from clmdetour.evaluation.claims import spec_from_config

        return asdict(spec_from_config(self.config))

    def layer_drift_inputs(self, wildcards) -> dict:
        """layer_drift's input: the base model, the variant's phase-1 model and record (its owner's for
        ``phase1_from``), its decay model and record, and the held-out corpus."""
        variant = wildcards.variant
        owner = phase1_owner(self.config, variant)
        return {"base": self.base_model_dir(), "phase1": phase_model(owner, "phase1"),
                "phase1_run": phase_run(owner, "phase1"), "decay": phase_model(variant, "decay"),
                "decay_run": phase_run(variant, "decay"), "valid": CORPUS_VALID}

    def eval_runs_input(self, wildcards) -> str:
        """plot_eval_scores's input.

        Raises:
            WorkflowError: the grid has no task, so no run table is written.
        """
        if not self.eval_tasks:
            raise WorkflowError(f"plot_eval_scores needs {EVAL_RUNS}, which only a grid with tasks writes (evaluation.tasks)")
        return EVAL_RUNS
