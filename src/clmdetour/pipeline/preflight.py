"""Checks of the launch itself, at planning, before Snakemake raises its own errors in their raw form: the cores
given, the working directory's Snakemake folder, the local model folders the config names.

Called by workflow/rules/common.smk in the planning process; each problem is one line naming the option, folder
or key. What Snakemake checks before the workflow is read (a held lock, a config file it cannot parse) is
answered by ``python -m clmdetour.pipeline.check_config`` and README's first-aid table instead.
"""

from __future__ import annotations

import os
from pathlib import Path


def cores_problem(cores: int | None) -> str | None:
    """``--cores 0`` (or a negative count) starts no job, and Snakemake then waits for ever: the line that says
    so (None when ``cores`` is None, as under a cluster executor, or at least 1)."""
    if cores is not None and cores < 1:
        return (f"--cores {cores}: no job could ever start (Snakemake would wait for ever); give at least 1, e.g. "
                "--cores 2, or --cores all for every core of this machine")
    return None


def snakemake_folder_problem(workdir: str | os.PathLike = ".") -> str | None:
    """A ``.snakemake`` folder in the working directory that this user cannot write (another user's checkout or
    run): Snakemake's records, locks and scripts go there, and it fails with a PermissionError on its first
    write. None when it is missing or writable."""
    folder = Path(workdir) / ".snakemake"
    if not folder.is_dir() or os.access(folder, os.W_OK | os.X_OK):
        return None
    try:
        owner = folder.owner()
    except (KeyError, OSError):
        owner = f"uid {folder.stat().st_uid}"
    return (f"{folder.absolute()} belongs to {owner} and this user cannot write it (Snakemake keeps its records "
            "and locks there): run in your own copy of the checkout or working directory (--directory DIR), or "
            "ask its owner to run it")


def missing_model_paths(config: dict, workdir: str | os.PathLike = ".") -> list[str]:
    """One line per local model folder the config names that does not exist: ``base_model.path`` (unless the
    base is built) and ``reference_models.<name>.path`` (relative paths: the working directory)."""
    keys = []
    base = config["base_model"]
    if base.get("path") and not base.get("build"):
        keys.append(("base_model.path", base["path"]))
    for name, ref in (config.get("reference_models") or {}).items():
        if (ref or {}).get("path"):
            keys.append((f"reference_models.{name}.path", ref["path"]))
    lines = []
    for key, value in keys:
        path = Path(value) if Path(value).is_absolute() else Path(workdir) / value
        if not path.exists():
            lines.append(f"{key}: {value!r} does not exist (relative paths are read from the working directory, "
                         f"{Path(workdir).absolute()}); give an existing model folder, or remove the key for the "
                         "Hub id")
    return lines
