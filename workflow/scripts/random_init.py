"""Rule random_init: the base model's architecture and tokenizer with fresh, seeded weights."""
from clmdetour.smk import go_offline, redirect_to_log

redirect_to_log(snakemake)
go_offline()

import logging

from clmdetour.modeling.reference import build_random_init

build_random_init(snakemake.input[0], snakemake.output[0], int(snakemake.params.seed))
logging.getLogger(__name__).info("wrote %s (random init of %s, seed %s)", snakemake.output[0], snakemake.input[0],
                                 snakemake.params.seed)
