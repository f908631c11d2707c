"""prepare_task: one evaluation task -> results/tasks/{task}/ (clmdetour.tasks.prepare)."""
from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)  # noqa: F821 (injected by Snakemake)

import logging

from clmdetour.tasks.prepare import prepare_task

manifest = prepare_task(snakemake.wildcards.task, snakemake.params.spec, snakemake.output[0])  # noqa: F821
logging.info("task %s: %s examples, labels %s", manifest["task"], manifest["counts"], manifest["label_set"]["labels"])
