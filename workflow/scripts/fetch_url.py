"""fetch_url: download (and extract) a task archive into resources/datasets/{dataset}/ (clmdetour.tasks.fetch)."""
from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)

import logging

from clmdetour.tasks.fetch import fetch_url

info = fetch_url(snakemake.params.url, snakemake.output.folder, snakemake.wildcards.dataset,
                 sha256=snakemake.params.sha256, record_dir=snakemake.params.record_dir)
logging.getLogger(__name__).info("fetched %s", info)
