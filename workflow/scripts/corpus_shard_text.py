"""One corpus shard's text job: load, clean, deduplicate within the shard, decontamination matches."""
from pathlib import Path

from clmdetour.corpus.scratch import job_scratch
from clmdetour.corpus.shards import shard_text
from clmdetour.language import activate
from clmdetour.smk import redirect_to_log
from clmdetour.tasks.prepare import tasks_eval_texts

redirect_to_log(snakemake)
activate(snakemake.params.language)  # the decontamination's word rule (clmdetour.language)
eval_texts = tasks_eval_texts(list(snakemake.params.tasks), list(snakemake.input.tasks))
shard = snakemake.params.shard
# datasets' cache files in the run's scratch, removed on success (never under $HOME)
with job_scratch(snakemake.config["pretraining"]["checkpoint_root"], f"corpus_shard_text-{shard['id']}"):
    record = shard_text(snakemake.params.corpus, snakemake.params.source, shard, snakemake.output.folder,
                        eval_texts=eval_texts, demo_corpus=snakemake.input.get("demo_corpus"),
                        hub_dir=snakemake.params.hub_dir or None, num_proc=snakemake.threads)
print(f"shard {shard['id']} ({Path(shard.get('file') or snakemake.params.source['name']).name}): {record}")
