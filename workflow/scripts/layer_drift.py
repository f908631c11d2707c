"""Rules layer_drift (one variant: weight change and CKA vs the base model) and layer_drift_table (all variants)."""

import sys

from clmdetour.smk import go_offline, redirect_to_log

redirect_to_log(snakemake)
go_offline()

from clmdetour.analysis.drift import PhaseModel, attention_mode, combine_drift_tables, layer_drift, write_tsv

if snakemake.rule == "layer_drift_table":
    table = combine_drift_tables(snakemake.input)
    write_tsv(table, snakemake.output[0])
    print(f"combined {len(snakemake.input)} tables, {len(table)} rows", file=sys.stderr)
    sys.exit(0)

import torch
import transformers

transformers.utils.logging.disable_progress_bar()
torch.set_num_threads(snakemake.threads)
a = snakemake.params.analysis
inp = snakemake.input
phases = [
    PhaseModel("phase1", inp.phase1, attention_mode(inp.phase1_run)),
    PhaseModel("decay", inp.decay, attention_mode(inp.decay_run)),
]
for pm in phases:
    print(f"{pm.phase}: {pm.model_dir} ({'causal' if pm.causal else 'bidirectional'})", file=sys.stderr)
table = layer_drift(snakemake.wildcards.variant, inp.base, phases, inp.valid, n_sequences=a["sample_sequences"],
                    seed=a["seed"], max_length=a["max_length"], batch_size=a["batch_size"],
                    attn_implementation=a["attn_implementation"])
write_tsv(table, snakemake.output[0])
cka = table[table["metric"] == "cka"]
print(f"{len(table)} rows; CKA on {cka['n_sequences'].iloc[0]} sequences ({cka['n_tokens'].iloc[0]} tokens), "
      f"seed {a['seed']}", file=sys.stderr)
