"""Rule plot_eval_scores: per task, mean score over seeds with error bars, per model (PNG, SVG)."""

import sys

from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)

from clmdetour.analysis.plots import plot_eval_scores, read_eval_runs

runs = read_eval_runs(snakemake.input[0])
plot_eval_scores(runs, [snakemake.output.png, snakemake.output.svg], model_order=snakemake.params.model_order,
                 task_order=snakemake.params.task_order)
print(f"plotted {len(runs)} runs: {runs['model'].nunique()} models x {runs['task'].nunique()} tasks", file=sys.stderr)
