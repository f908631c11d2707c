"""Rule plot_training_curves: loss, learning rate and tokens/s against tokens seen, every phase (PNG, SVG)."""

import sys

from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)

from clmdetour.analysis.plots import plot_training_curves, read_train_log

runs = [tuple(r) for r in snakemake.params.runs]
if len(runs) != len(snakemake.input):
    raise ValueError(f"{len(snakemake.input)} training logs but {len(runs)} (variant, phase) labels")
logs = {run: read_train_log(path) for run, path in zip(runs, snakemake.input)}
plot_training_curves(logs, [snakemake.output.png, snakemake.output.svg], dict(snakemake.params.objectives))
print(f"plotted {len(logs)} phases", file=sys.stderr)
