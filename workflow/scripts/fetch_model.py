"""Rule fetch_model: download a Hub model at a pinned commit into resources/models/{model}/."""
import logging
import sys

sys.stderr = open(snakemake.log[0], "w", encoding="utf-8")
logging.basicConfig(level=logging.INFO, stream=sys.stderr)

from clmdetour.finetune.reference import fetch_model

spec = snakemake.params.spec
sha = fetch_model(spec["hub_id"], spec["revision"], snakemake.output[0])
logging.info("fetched %s@%s into %s", spec["hub_id"], sha, snakemake.output[0])
