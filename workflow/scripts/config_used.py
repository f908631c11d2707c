"""Rule config_used: the configuration this run used (config files and --config merged, schema
defaults filled in) as YAML, for the report and for a reader of results/."""
from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)

import logging

import yaml

from clmdetour.io import atomic_write_text

HEADER = "# The configuration this run used: config files and --config values merged, schema defaults filled in.\n"
config = snakemake.params.config
atomic_write_text(snakemake.output[0], HEADER + yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
logging.getLogger(__name__).info("wrote %s (sections: %s)", snakemake.output[0], ", ".join(config))
