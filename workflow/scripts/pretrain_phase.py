"""Rules pretrain_phase1 and pretrain_decay: one pretraining phase (clmdetour.training.phase_job).

A ``script:`` rule, so that Snakemake picks the interpreter when the job runs (the image's under a container):
the job's command is built here, from the rule's params, with this interpreter, and the launcher replaces this
process (its output in the rule's log).
"""
import sys

from clmdetour.training.phase_job import PhaseJob, PhaseJobError, exec_phase

try:
    exec_phase(PhaseJob.from_rule(snakemake))
except PhaseJobError as e:
    with open(snakemake.log[0], "w", encoding="utf-8") as log:
        print(f"error: {e}", file=log)
    sys.exit(f"error: {e}")
