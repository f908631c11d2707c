# Shared set-up: config validation, wildcard constraints, input functions.
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

VARIANTS = list(config["pretraining"]["variants"])
PHASE1_OWNERS = [v for v in VARIANTS if phase1_owner(config, v) == v]
DEMO = config["base_model"]["build"] is not None
BASE_KEY = config["base_model"]["key"]
CLUSTER = config["cluster"]
# Every rule but fetch / push runs offline: compute nodes usually have no internet
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
    """Folder of the base model: built demo model, a local folder, or the fetched Hub copy."""
    if DEMO:
        return "results/base/model"
    if config["base_model"]["path"]:
        return config["base_model"]["path"]
    return f"resources/models/{BASE_KEY}"


def final_model_dir(variant):
    """The final (post-decay) model of a variant."""
    return f"results/pretrain/{variant}/decay/model"


def phase_input_model(wildcards):
    """Model a phase starts from: the base model (phase 1) or its phase 1 (decay)."""
    if wildcards.phase == "phase1":
        return base_model_dir()
    return f"results/pretrain/{phase1_owner(config, wildcards.variant)}/phase1/model"


def phase_section(wildcards):
    """The resolved config section of one phase (the rule's only params)."""
    return resolve_phase(config, wildcards.variant, wildcards.phase)


def reference_model_dir(model):
    """Folder of a reference model key (fetched into resources/models/{model})."""
    refs = config.get("reference_models") or {}
    if model not in refs:
        raise WorkflowError(
            f"model {model!r} is neither a variant ({VARIANTS}), the base model ({BASE_KEY!r}) "
            f"nor a reference model ({sorted(refs)})"
        )
    spec = refs[model]
    if spec.get("path"):
        return spec["path"]
    if spec.get("build") == "random-init":
        return f"results/random-init/model"
    return f"resources/models/{model}"


def model_dir(model):
    """Folder of any evaluated model key: a variant's final model, the base model or a reference model."""
    if model in VARIANTS:
        return final_model_dir(model)
    if model == BASE_KEY:
        return base_model_dir()
    return reference_model_dir(model)


def phase_resources_gpus():
    return CLUSTER["pretrain_gpus"]
