"""Write the documents reserved for building the base model (corpus.held_apart_fraction) as JSONL.

They are decontaminated against corpus.decontaminate_against like the corpus; the drops are
logged here and counted per source in results/corpus/manifest.json (held_apart_decontaminated).
"""
import json

from clmdetour.corpus.prepare import held_apart_texts
from clmdetour.corpus.scratch import job_scratch
from clmdetour.io import atomic_write_text
from clmdetour.smk import redirect_to_log
from clmdetour.tasks.prepare import tasks_eval_texts

redirect_to_log(snakemake)
eval_texts = tasks_eval_texts(list(snakemake.params.tasks), list(snakemake.input.tasks))
# datasets' cache files and temporary files in the run's scratch, removed on success (never under $HOME)
with job_scratch(snakemake.config["pretraining"]["checkpoint_root"], "held_apart_corpus"):
    texts, report = held_apart_texts(snakemake.params.corpus, hub_dirs=dict(snakemake.params.hub_dirs),
                                     eval_texts=eval_texts)
for name, r in report.items():
    print(f"held-apart documents of source {name!r}: {r['documents']} read, {r['decontaminated']} decontaminated "
          f"(per task: {r['decontaminated_per_task'] or '-'})")
if not texts:
    raise SystemExit("corpus.held_apart_fraction selected no document: raise it or use base_model.build.corpus: demo")
atomic_write_text(snakemake.output[0], "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts))
