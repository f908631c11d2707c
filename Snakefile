# CLM-detour continued pretraining of ModernBERT encoders (cpt-fr-base recipe).
# Stages: workflow/rules/{common,corpus,pretrain,evaluate,analysis,release,targets}.smk
from snakemake.utils import min_version

min_version("9.20")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


# The image every job runs in under --software-deployment-method apptainer (config key `container`: an OCI or
# .sif reference, docs/slurm.md "A container image"); empty (the default): the jobs run in the venv.
if config.get("container"):

    container: config["container"]


# The default target: every final model, the evaluation table, the analysis and the staged releases
# (clmdetour.pipeline.Pipeline.all_targets, evaluated when the DAG is built).
rule all:
    default_target: True
    input:
        lambda wildcards: PIPELINE.all_targets(),
    localrule: True


# snakemake --lint "conda environment or container for each rule": every rule runs the project's one environment
# (scripts/setup.sh's venv, environment.yml, or the Containerfile's image by config key `container`): the rules
# share the clmdetour library, so each rule's would be that one.
include: "workflow/rules/common.smk"
include: "workflow/rules/corpus.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/tasks.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/release.smk"
include: "workflow/rules/targets.smk"


# Before any job: the folders the jobs write to accept writes (clmdetour.pipeline.writable).
# Every rule's last complete output outlives a rerun that fails (clmdetour.pipeline.last_good): the outputs of
# the jobs about to run are kept as hard links at {output}.last-good before Snakemake deletes them; at the end
# of the run the snapshots whose output is back are removed and the others are named.
onstart:
    from clmdetour.pipeline.last_good import snapshot_jobs
    from clmdetour.pipeline.writable import ReadOnlyError, check_jobs_writable

    try:  # a read-only results/ (or checkpoint root): one line before any job, not a traceback in the first one
        check_jobs_writable(workflow.dag.needrun_jobs(), PIPELINE.scratch_writers())
    except ReadOnlyError as e:
        raise WorkflowError(str(e)) from None
    snapshot_jobs(workflow.dag.needrun_jobs())


onerror:
    from clmdetour.pipeline.last_good import settle
    from clmdetour.pipeline.summary import print_killed_jobs

    # a job killed by SIGKILL (the OOM killer, a cluster's memory limit): its rule, mem_mb and the key to change
    print_killed_jobs(
        log, {r.name: r.resources.get("mem_mb") for r in workflow.rules}
    )
    settle()


# What a run must not end without saying again (the corpus manifest's warnings: a source drawn far over its
# share of corpus.train_tokens, ...): they are in the jobs' logs, which nobody reads after a green run.
onsuccess:
    from clmdetour.pipeline.summary import print_run_warnings

    print_run_warnings()
    from clmdetour.pipeline.last_good import settle

    settle()


# corpus.smk's Hub fetch also writes resources/datasets/{name}: task datasets (tasks.smk) use their
# own fetch rules. Here, beside the includes, so that a workflow of some stage files only still loads.
ruleorder: fetch_url > fetch_dataset
ruleorder: fetch_task_hub > fetch_dataset
