"""Train the built base model's tokenizer and save its seeded, untrained initialisation (rule base_init)."""
from clmdetour.demo.base import init_model_dir, read_texts
from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)
init_model_dir(dict(snakemake.params.build), read_texts(snakemake.input.base_corpus), snakemake.output.model)
