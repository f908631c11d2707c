"""The analysis (``analysis.smk``): layer drift, the report figures and the config record."""

from __future__ import annotations

# Snakemake's own error class (snakemake.exceptions re-exports it): input functions raise it so that
# Snakemake reports the message with the rule and wildcards, and nothing runs.
from snakemake_interface_common.exceptions import WorkflowError

from clmdetour.config import phase1_owner
from clmdetour.pipeline.paths import (
    ANALYSIS_FIGURES,
    CONFIG_RECORD,
    CORPUS_VALID,
    EVAL_FIGURE,
    EVAL_RUNS,
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
        """The combined drift table, every figure in every format, the config record."""
        return [LAYER_DRIFT_TABLE, CONFIG_RECORD,
                *[plot_path(f, ext) for f in self.analysis_figures() for ext in PLOT_EXTS]]

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
