"""Write the embedded demo corpus: pretraining documents and the held-apart base-model documents."""
import json

from clmdetour.demo.generator import generate_corpus
from clmdetour.io import atomic_write_text
from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)
p = snakemake.params.demo
for path, n, seed in [(snakemake.output.corpus, p["corpus_documents"], p["seed"]),
                      (snakemake.output.base_corpus, p["base_documents"], p["seed"] + 1000)]:
    rows = generate_corpus(n, seed)
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
