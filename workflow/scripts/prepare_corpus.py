"""Prepare the packed pretraining corpus (train/valid) and its manifest."""
import os
import shutil
from pathlib import Path

from clmdetour.corpus.prepare import prepare_corpus
from clmdetour.corpus.scratch import job_scratch
from clmdetour.language import activate
from clmdetour.smk import redirect_to_log
from clmdetour.tasks.prepare import tasks_eval_texts

redirect_to_log(snakemake)
activate(snakemake.params.language)  # sentence splitting and word rules (clmdetour.language)
eval_texts = tasks_eval_texts(list(snakemake.params.tasks), list(snakemake.input.tasks))
out = Path(snakemake.output.manifest).parent
staging = out.parent / ".corpus.staging"
shutil.rmtree(staging, ignore_errors=True)
# datasets' cache files and temporary files in the run's scratch, removed on success (never under $HOME)
with job_scratch(snakemake.config["pretraining"]["checkpoint_root"], "prepare_corpus"):
    prepare_corpus(snakemake.params.corpus, snakemake.input.tokenizer, str(staging), eval_texts=eval_texts,
                   demo_corpus=snakemake.input.get("demo_corpus"), hub_dirs=dict(snakemake.params.hub_dirs),
                   num_proc=snakemake.threads)
out.mkdir(parents=True, exist_ok=True)
for name in ("train", "valid", "manifest.json"):  # manifest last: it marks a complete corpus
    target = out / name
    if target.is_dir():
        shutil.rmtree(target)
    os.replace(staging / name, target)
shutil.rmtree(staging, ignore_errors=True)
