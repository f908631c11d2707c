"""Rule plot_layer_drift: per-layer and per-module-type drift figures (PNG, SVG)."""

import sys

from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)

from clmdetour.analysis.drift import read_drift_table
from clmdetour.analysis.plots import plot_layer_drift, plot_module_drift

table = read_drift_table(snakemake.input[0])
out = snakemake.output
objectives = dict(snakemake.params.objectives)
plot_layer_drift(table, [out.layers_png, out.layers_svg], objectives)
plot_module_drift(table, [out.modules_png, out.modules_svg], objectives)
print(f"plotted {table['variant'].nunique()} variants", file=sys.stderr)
