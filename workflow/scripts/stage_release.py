"""Rule stage_release: one variant's final model -> results/release/{variant}/ (model, tokenizer, README.md card)."""

import sys

from clmdetour.smk import go_offline, redirect_to_log

redirect_to_log(snakemake)
go_offline()

import torch

from clmdetour.release.stage import stage_release

torch.set_num_threads(snakemake.threads)
variant = snakemake.wildcards.variant
inp, p = snakemake.input, snakemake.params
summary = stage_release(
    variant,
    model_dir=inp.model,
    phase_runs=[("phase1", inp.phase1_run, p.phase1_owner), ("decay", inp.decay_run, variant)],
    manifest=inp.manifest,
    eval_table=inp.eval_table,
    claims=inp.claims,
    out_dir=snakemake.output[0],
    release=dict(p.release),
    tasks=dict(p.tasks),
    evaluation=dict(p.evaluation),
    base_model=dict(p.base_model),
    description=p.description,
    reference_models=dict(p.reference_models),
    language=p.language,
)
print(f"staged {summary['files']} ({summary['n_parameters']:,} parameters); repo {summary['repo_id']}; "
      f"restricted sources {summary['restricted_sources'] or 'none'}; missing cells {summary['missing_cells'] or 'none'}",
      file=sys.stderr)
