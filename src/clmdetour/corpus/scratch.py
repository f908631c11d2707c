"""Where a corpus job keeps its intermediates: a scratch folder of the run, never the home directory.

``datasets`` writes a cache file for every ``load_dataset`` and ``map`` (six to nine times the
input text, measured on the corpus step: issue 40), by default under
``~/.cache/huggingface/datasets``, and never removes it; on a cluster that is the home directory,
often quota-limited to 10-100 GB. :func:`job_scratch` points ``datasets``' cache and the Hugging Face
home of the job at ``{pretraining.checkpoint_root}/scratch/{job}``
(the run's scratch, beside its checkpoints), and removes that folder when the job succeeds; a job
that fails leaves it for the rerun and for inspection. No rule param changes: the folder is an
execution detail, read from the run's config.

``TMPDIR`` is left alone: ``datasets``' worker processes (``num_proc``) talk over Unix sockets created
there, whose path may not exceed 107 bytes, which a run's scratch path can (measured: ``OSError:
AF_UNIX path too long``); the caches that grow with the corpus are ``datasets``' own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

#: The environment variables a job's scratch sets (each restored when the job's block ends).
SCRATCH_ENV = ("HF_HOME", "HF_DATASETS_CACHE")


def job_scratch_dir(checkpoint_root: str | Path, job: str) -> Path:
    """``{checkpoint_root}/scratch/{job}``: the scratch folder of one job of the run."""
    return Path(checkpoint_root) / "scratch" / job


@contextlib.contextmanager
def job_scratch(checkpoint_root: str | Path, job: str) -> Iterator[Path]:
    """Run a block with every ``datasets`` / Hugging Face intermediate and temporary file in the job's
    scratch folder (:func:`job_scratch_dir`); remove the folder when the block succeeds.

    Sets ``HF_HOME`` (``hf/``) and ``HF_DATASETS_CACHE`` (``hf/datasets/``) for the block, and ``datasets.config.HF_DATASETS_CACHE`` when ``datasets`` was already imported
    (it reads the variable once, at import). A block that raises leaves the folder (a rerun starts
    from a clean cache: ``datasets`` rebuilds what it finds incomplete).

    Args:
        checkpoint_root: ``pretraining.checkpoint_root`` (relative paths: the workflow's working directory).
        job: the job's name (``prepare_corpus``, ``held_apart_corpus``).

    Yields:
        The scratch folder (absolute).
    """
    folder = job_scratch_dir(checkpoint_root, job).resolve()
    paths = {"HF_HOME": folder / "hf", "HF_DATASETS_CACHE": folder / "hf" / "datasets"}
    for p in paths.values():
        p.mkdir(parents=True, exist_ok=True)
    before = {k: os.environ.get(k) for k in SCRATCH_ENV}
    os.environ.update({k: str(v) for k, v in paths.items()})
    ds_config = sys.modules.get("datasets.config")
    ds_before = getattr(ds_config, "HF_DATASETS_CACHE", None)
    if ds_config is not None:
        ds_config.HF_DATASETS_CACHE = paths["HF_DATASETS_CACHE"]
    try:
        yield folder
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if ds_config is not None:
            ds_config.HF_DATASETS_CACHE = ds_before
    shutil.rmtree(folder, ignore_errors=True)  # reached only when the block succeeded
