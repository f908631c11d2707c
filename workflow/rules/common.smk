# Shared set-up: config validation, the PIPELINE object (clmdetour.pipeline), wildcard constraints, thin input functions.
import json
import re
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from snakemake.exceptions import WorkflowError

from clmdetour.config import (
    ConfigError,
    base_build_section,
    canonical,
    phase1_owner,
    resolve_phase,
    validate_config,
    variant_target,
)

try:
    validate_config(config)
except ConfigError as _e:
    raise WorkflowError(f"invalid configuration: {_e}") from None

from snakemake.logging import logger

from clmdetour.smk import OFFLINE_VARS

from clmdetour.tasks.prepare import TaskError, left_out_tasks, left_out_warning

try:
    # User-provided tasks whose files are missing: left out of the grid and the release (one warning).
    LEFT_OUT_TASKS = left_out_tasks(config)
except TaskError as _e:
    raise WorkflowError(f"invalid configuration: {_e}") from None
if LEFT_OUT_TASKS:
    logger.warning(left_out_warning(LEFT_OUT_TASKS))

from clmdetour.corpus.decontaminate import decontamination_tasks

# corpus.decontaminate_against resolved (`all` = every configured task with its files): the tasks whose
# dev/test texts are removed from the corpus and from the held-apart text of a built base model.
DECONTAMINATE_AGAINST, _undecontaminated = decontamination_tasks(config, LEFT_OUT_TASKS)
if _undecontaminated:
    logger.warning(_undecontaminated)

from clmdetour import pipeline
from clmdetour.pipeline import PRETRAIN_PRIORITY, Pipeline, final_model_dir

try:
    # The wiring: paths, target lists and rule names as functions of the config (clmdetour.pipeline).
    PIPELINE = Pipeline(config, LEFT_OUT_TASKS)
except ConfigError as _e:
    raise WorkflowError(f"invalid configuration: {_e}") from None
VARIANTS = PIPELINE.variants
PHASE1_OWNERS = PIPELINE.phase1_owners
DEMO = PIPELINE.demo
BASE_KEY = PIPELINE.base_key
CLUSTER = config["cluster"]
CORPUS = config["corpus"]
HUB_SOURCES = {s["name"]: s for s in CORPUS["sources"] if s["format"] == "hub"}
# Every job but the fetch and push jobs runs offline: compute nodes usually have no internet
# (the shell form of clmdetour.smk.go_offline).
OFFLINE_ENV = " ".join(f"{var}=1" for var in OFFLINE_VARS)
# shell: rules run the interpreter that runs Snakemake (as script: rules do), never `python` from PATH.
PYTHON = shlex.quote(sys.executable)


def _alternation(names):
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


wildcard_constraints:
    variant=_alternation(VARIANTS),
    phase="phase1|decay",
    model="[a-z0-9][a-z0-9-]*",
    task="[a-z0-9][a-z0-9-]*",
    seed="[0-9]+",


def base_model_dir():
    """Folder of the base model (clmdetour.pipeline.Pipeline.base_model_dir)."""
    return PIPELINE.base_model_dir()


def phase_input_model(wildcards):
    """Model a phase starts from: the base model (phase 1) or its phase 1 (decay)."""
    return PIPELINE.phase_input_model(wildcards.variant, wildcards.phase)


def model_dir(model):
    """Folder of any evaluated model key: a variant's final model, the base model or a reference model."""
    try:
        return PIPELINE.model_dir(model)
    except ConfigError as e:
        raise WorkflowError(str(e)) from None
