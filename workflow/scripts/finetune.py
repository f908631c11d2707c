"""Rule finetune: one model on one task, every seed and grid point (clmdetour.finetune.run.run_task).

Params are JSON strings (the task's fine-tuning keys, the evaluation settings, the seeds), as the
rule records them; the exit status is 1 only when every seed failed.
"""
import json
import os
import sys
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"

from clmdetour.smk import go_offline, redirect_to_log

redirect_to_log(snakemake)
go_offline()

from clmdetour.runtime.composer_setup import import_training_libraries

import_training_libraries()  # Composer, then gc.freeze(): docs/performance.md, "Fixed cost of a training process"

from clmdetour.finetune.run import exit_status, run_task

seeds = json.loads(snakemake.params.seeds)
# each finished (seed, lr) run is kept here until the records are written: a killed job's rerun trains the rest
scratch = Path(snakemake.config["pretraining"]["checkpoint_root"]) / "finetune" / snakemake.wildcards.model
records = run_task(model=snakemake.wildcards.model, task=snakemake.wildcards.task, model_dir=snakemake.input.model,
                   task_dir=snakemake.input.task, task_config=json.loads(snakemake.params.task),
                   settings=json.loads(snakemake.params.settings), outputs=dict(zip(seeds, snakemake.output)),
                   gpus=int(snakemake.resources.gpu), threads=snakemake.threads,
                   model_max_length=int(snakemake.params.model_max_length) or None,
                   scratch_dir=scratch / snakemake.wildcards.task,
                   # the cap pretraining plans under; read here, not a param: it splits a batch, never changes results
                   memory_limit_gib=float(snakemake.config["pretraining"]["memory_limit_gib"]))
sys.exit(exit_status(records))
