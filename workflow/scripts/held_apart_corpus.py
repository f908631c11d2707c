"""Write the documents reserved for building the base model (corpus.held_apart_fraction) as JSONL."""
import json

from clmdetour.corpus.prepare import held_apart_texts
from clmdetour.io import atomic_write_text
from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)
texts = held_apart_texts(snakemake.params.corpus, hub_dirs=dict(snakemake.params.hub_dirs))
if not texts:
    raise SystemExit("corpus.held_apart_fraction selected no document: raise it or use base_model.build.corpus: demo")
atomic_write_text(snakemake.output[0], "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts))
