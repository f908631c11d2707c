# Shared set-up: config validation, the PIPELINE object (clmdetour.pipeline: paths, targets and the
# input functions every rule file uses), the wildcard constraints, the shell rules' prefix.
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from snakemake.exceptions import WorkflowError

from clmdetour.config import (
    ConfigError,
    base_build_section,
    canonical,
    check_config_files,
    frozen_encoder_warning,
    lr_grid_warning,
    load_yaml,
    max_length_warning,
    phase1_owner,
    validate_config,
    variant_target,
)
from clmdetour.pipeline.check_config import forgotten_profile_files
from clmdetour.pipeline.cost import gpu_work_planned
from clmdetour.runtime.driver import (
    DriverError,
    check_driver_at_planning,
    container_driver_note,
)

# The launch itself: --cores 0, another user's .snakemake (clmdetour.pipeline.preflight)
if workflow.is_main_process:
    from clmdetour.pipeline.preflight import cores_problem, snakemake_folder_problem

    _launch = (
        cores_problem(workflow.resource_settings.cores) or snakemake_folder_problem()
    )
    if _launch:
        raise WorkflowError(_launch)

# --configfiles that replaced the profile's files without repeating them (the paper DAG under the CPU profile)
if workflow.is_main_process:
    _forgotten = forgotten_profile_files(
        sys.argv, os.environ, workflow.configfiles, workflow.basedir
    )
    if _forgotten:
        raise WorkflowError(_forgotten)

try:
    # each file Snakemake merged, read again with bounded aliases before anything walks the merged config
    for _path in workflow.configfiles:
        load_yaml(_path)
    validate_config(config)
    # the files Snakemake merged, read again: a repeated key, or a yte template (code) unless allowed
    check_config_files(workflow.configfiles, allow_yte=config["allow_yte_configs"])
except ConfigError as _e:
    raise WorkflowError(f"invalid configuration: {_e}") from None

from snakemake.logging import logger

from clmdetour.tasks.spec import TaskError, left_out_tasks, left_out_warning

# A local model folder the config names that does not exist: one line naming the key, not a MissingInputException
if workflow.is_main_process:
    from clmdetour.pipeline.preflight import missing_model_paths

    _missing = missing_model_paths(config)
    if _missing:
        raise WorkflowError("invalid configuration: " + "; ".join(_missing))

try:
    # User-provided tasks whose files are missing: left out of the grid and the release (one warning).
    LEFT_OUT_TASKS = left_out_tasks(config)
except TaskError as _e:
    raise WorkflowError(f"invalid configuration: {_e}") from None
if LEFT_OUT_TASKS:
    logger.warning(left_out_warning(LEFT_OUT_TASKS))

from clmdetour.pipeline import Pipeline, paths
from clmdetour.pipeline.paths import PRETRAIN_PRIORITY, alternation

try:
    # The wiring: paths, target lists, rule names and input functions as functions of the config.
    PIPELINE = Pipeline(config, LEFT_OUT_TASKS)
except ConfigError as _e:
    raise WorkflowError(f"invalid configuration: {_e}") from None
# Configured tasks whose dev/test texts are not removed from the training text (their files are missing).
if PIPELINE.decontamination_warning:
    logger.warning(PIPELINE.decontamination_warning)
# `all` without release.licence stages no release: said once, as the missing user tasks are.
if PIPELINE.release_warning():
    logger.warning(PIPELINE.release_warning())
# Task inputs longer than the base model's positions (capped at fine-tuning), said once.
if max_length_warning(config):
    logger.warning(max_length_warning(config))
# A variant phase that freezes every encoder layer (only the head trains), said once.
if frozen_encoder_warning(config):
    logger.warning(frozen_encoder_warning(config))

if lr_grid_warning(config):
    logger.warning(lr_grid_warning(config))

# GPU profiles: the driver against the torch build, once, in the planning process and where this machine has
# one. With a container image the jobs' torch is the image's, not this venv's: each GPU job checks its own.
if gpu_work_planned(config) and workflow.is_main_process:
    if config.get("container"):
        logger.info(container_driver_note(config["container"]))
    else:
        try:
            _driver_warning = check_driver_at_planning()
            if _driver_warning:
                logger.warning(_driver_warning)
        except DriverError as e:
            raise WorkflowError(str(e)) from None
# evaluation.tasks: [] (no table, plots, claims or releases) is refused: pretrain_all is the pretraining-only run.
if PIPELINE.empty_grid_error():
    raise WorkflowError(f"invalid configuration: {PIPELINE.empty_grid_error()}")
# A grid emptied by user tasks whose files are missing, said once.
if PIPELINE.empty_grid_warning():
    logger.warning(PIPELINE.empty_grid_warning())
# The GPU-hours of `all` at measured rates (clmdetour.pipeline.cost), said once by the planning process
# (not again by each cluster job's Snakemake); nothing when the config asks for no GPU (the CPU demo).
if workflow.is_main_process:
    from clmdetour.pipeline.cost import planning_cost_message

    # a projection never stops planning
    try:
        _cost = planning_cost_message(config)
    except (KeyError, TypeError, ValueError, OSError) as _e:
        _cost = f"GPU-hour projection skipped: {type(_e).__name__}: {_e}"
    if _cost:
        logger.info(_cost)
VARIANTS = PIPELINE.variants
BUILDS_BASE = PIPELINE.builds_base
CLUSTER = config["cluster"]
CORPUS = config["corpus"]


wildcard_constraints:
    variant=alternation(VARIANTS),
    phase="phase1|decay",
    model="[a-z0-9][a-z0-9-]*",
    task="[a-z0-9][a-z0-9-]*",
    seed="[0-9]+",
