"""Rule fetch_model: download a Hub model at a pinned commit into resources/models/{model}/."""
import logging

from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)

from clmdetour.modeling.reference import fetch_model

spec = snakemake.params.spec
sha = fetch_model(spec["hub_id"], spec["revision"], snakemake.output[0])
logging.getLogger(__name__).info("fetched %s@%s into %s", spec["hub_id"], sha, snakemake.output[0])
