"""Rule finetune: one model on one task, every seed and grid point (clmdetour.finetune.run.run_task).

The rule's params (JSON strings: the task's fine-tuning keys, the evaluation settings, the seeds) become one
typed job here, once (clmdetour.finetune.job.FinetuneJob.from_rule); the exit status is 1 only when every
seed failed.
"""
import os
import sys

os.environ["TOKENIZERS_PARALLELISM"] = "false"

from clmdetour.smk import go_offline, redirect_to_log

redirect_to_log(snakemake)
go_offline()

from clmdetour.runtime.composer_setup import import_training_libraries

import_training_libraries()  # Composer, then gc.freeze(): docs/performance.md, "Fixed cost of a training process"

from clmdetour.finetune.job import FinetuneJob
from clmdetour.finetune.records import exit_status
from clmdetour.finetune.run import run_task

sys.exit(exit_status(run_task(FinetuneJob.from_rule(snakemake))))
