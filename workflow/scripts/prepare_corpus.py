"""Merge the corpus shards into the packed pretraining corpus (train/valid) and its manifest."""
from clmdetour.corpus.merge import merge_corpus
from clmdetour.corpus.scratch import job_scratch
from clmdetour.language import activate
from clmdetour.modeling.folders import check_model_folder
from clmdetour.smk import redirect_to_log
from clmdetour.tasks.prepare import tasks_eval_texts

redirect_to_log(snakemake)
activate(snakemake.params.language)  # the decontamination index's word rule (clmdetour.language)
eval_texts = tasks_eval_texts(list(snakemake.params.tasks), list(snakemake.input.tasks))
check_model_folder(snakemake.input.tokenizer)
out = snakemake.output.manifest.rsplit("/", 1)[0]
# datasets' write cache in the run's scratch, removed on success (never under $HOME); the output
# folder is replaced atomically, its manifest written last
with job_scratch(snakemake.config["pretraining"]["checkpoint_root"], "prepare_corpus") as scratch:
    manifest = merge_corpus(snakemake.params.corpus, list(snakemake.params.shards), list(snakemake.input.shards),
                            snakemake.input.tokenizer, out, eval_texts=eval_texts, scratch=scratch)
print(f"corpus: {manifest['train']['sequences']:,} train rows, {manifest['train']['tokens']:,} tokens "
      f"from {len(manifest['shards'])} shards")
