"""Rule claims: the paper's claims tested on this run -> results/claims.{tsv,md} and the claims figure."""

import sys

from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)

import pandas as pd

from clmdetour.analysis.drift import read_drift_table
from clmdetour.analysis.plots import plot_claims_drift
from clmdetour.evaluation.claims import ClaimsSpec, build_claims, low_layers, write_claims

inp, out = snakemake.input, snakemake.output
named = dict(inp.items())  # `in` on a Namedlist tests values, not names
spec = ClaimsSpec(**dict(snakemake.params.spec))
drift = read_drift_table(inp.drift)
table = pd.read_csv(inp.table, sep="\t") if "table" in named else None
other = read_drift_table(inp.other_drift) if "other_drift" in named else None
claims = build_claims(table, list(snakemake.params.tasks), drift, spec, other)
write_claims(claims, out.tsv, out.md)
plot_claims_drift(drift, low_layers(spec.num_layers), [out.png, out.svg], dict(snakemake.params.objectives))
for r in claims.to_dict("records"):
    print(f"{r['claim']}: {r['verdict']}", file=sys.stderr)
