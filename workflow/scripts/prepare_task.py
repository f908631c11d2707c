"""prepare_task: one evaluation task -> results/tasks/{task}/ (clmdetour.tasks.prepare)."""
from clmdetour.language import activate
from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)
# sentence splitting and word rules (clmdetour.language): the task's own language, else the run's
activate(snakemake.params.spec.get("language") or snakemake.params.language)

import logging

from clmdetour.tasks.prepare import prepare_task

manifest = prepare_task(snakemake.wildcards.task, snakemake.params.spec, snakemake.output[0])
logging.getLogger(__name__).info("task %s: %s examples, labels %s", manifest["task"], manifest["counts"], manifest["label_set"]["labels"])
