"""demo_task_source: write one generated demo task source in its real format (clmdetour.demo.tasks)."""
from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)  # noqa: F821 (injected by Snakemake)

from clmdetour.demo.tasks import write_demo_source

write_demo_source(snakemake.wildcards.demo_source, snakemake.output.folder, seed=snakemake.params.seed)  # noqa: F821
