"""Pretrain the built base model (demo, real-small) with MLM from its initialisation (rule base_init)."""
import os
import shutil
from pathlib import Path

from clmdetour.demo.base import build_base
from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)
os.environ["CLMDETOUR_THREADS"] = str(snakemake.threads)
out = Path(snakemake.output.model).parent
work = out.parent / ".base-work"
build_base(snakemake.params.build, snakemake.params.num_layers, snakemake.input.base_corpus, snakemake.params.corpus,
           snakemake.params.training, str(out), str(work), snakemake.params.training["checkpoint_root"],
           init_dir=snakemake.input.init)
shutil.rmtree(work, ignore_errors=True)
