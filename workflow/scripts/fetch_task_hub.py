"""fetch_task_hub: a Hub dataset snapshot into resources/datasets/{dataset}/ (clmdetour.tasks.fetch)."""
from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)

import logging

from clmdetour.tasks.fetch import fetch_hub_dataset

sha = fetch_hub_dataset(snakemake.params.hub_id, snakemake.output.folder, snakemake.params.revision)
logging.getLogger(__name__).info("fetched %s at %s", snakemake.params.hub_id, sha)
