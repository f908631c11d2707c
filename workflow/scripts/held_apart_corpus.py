"""Write the documents reserved for building the base model (corpus.held_apart_fraction) as JSONL.

They come from the corpus shards' text jobs and are decontaminated against
corpus.decontaminate_against like the corpus; the drops are logged here and counted per source in
results/corpus/manifest.json (held_apart_decontaminated).
"""
import json

from clmdetour.corpus.merge import merge_held_apart
from clmdetour.io import atomic_write_text
from clmdetour.language import activate
from clmdetour.smk import redirect_to_log
from clmdetour.tasks.prepare import tasks_eval_texts

redirect_to_log(snakemake)
activate(snakemake.params.language)  # the decontamination index's word rule (clmdetour.language)
eval_texts = tasks_eval_texts(list(snakemake.params.tasks), list(snakemake.input.tasks))
texts, report = merge_held_apart(snakemake.params.corpus, list(snakemake.params.shards), list(snakemake.input.shards),
                                 eval_texts=eval_texts)
for name, r in report.items():
    print(f"held-apart documents of source {name!r}: {r['documents']} read, {r['decontaminated']} decontaminated "
          f"(per task: {r['decontaminated_per_task'] or '-'})")
if not texts:
    raise SystemExit("corpus.held_apart_fraction selected no document: raise it or use base_model.build.corpus: demo")
atomic_write_text(snakemake.output[0], "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts))
