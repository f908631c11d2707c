"""Every rule's last complete output outlives a rerun that fails: one hook for all rules.

Snakemake deletes a job's outputs before the job runs and again when it fails, so a rerun that a check
refuses (a prepared task whose new overlay leaks an id, a phase killed by its time limit) would leave
nothing where a complete output stood. The Snakefile's ``onstart`` hook calls :func:`snapshot_jobs` with
the jobs about to run: each output of theirs that exists is copied as hard links (no bytes copied) to
``{output}.last-good`` beside it; Snakemake's deletion then removes only the output's own name. When the
run ends (``onsuccess`` / ``onerror``), :func:`settle` removes every snapshot whose output exists again (a
complete new one replaced it, or its job never ran) and prints one line for each it keeps.

Outputs that are links into a ``.versions/`` folder (a staged release, a phase's model:
:func:`clmdetour.io.versioned_output_dir`) keep their own ``{name}.last-good`` and are left alone here.
The snapshots are listed in :data:`REGISTRY` so that nothing else named ``*.last-good`` is ever removed.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

from clmdetour.io import LAST_GOOD_SUFFIX, atomic_write_json

#: The snapshots this hook made and has not settled yet, relative to the workflow's working directory.
REGISTRY = Path(".snakemake") / "clmdetour-last-good.json"


def _read_registry(registry: Path) -> dict[str, str]:
    import json

    try:
        data = json.loads(registry.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def snapshot_of(output: str | os.PathLike) -> Path:
    """``{output}.last-good``: where :func:`snapshot_jobs` keeps the last complete ``output``."""
    output = Path(output)
    return output.with_name(output.name + LAST_GOOD_SUFFIX)


def _hard_link_copy(src: Path, dst: Path) -> None:
    """Copy ``src`` (file or folder) to ``dst`` as hard links, through a temporary name.

    Raises:
        OSError: the file system refuses hard links (``EXDEV``, ``EPERM``, ``EMLINK``) or another error;
            the temporary copy is removed.
    """
    tmp = dst.with_name(f".{dst.name}.tmp")
    if tmp.is_dir() and not tmp.is_symlink():
        shutil.rmtree(tmp)
    elif tmp.exists() or tmp.is_symlink():
        tmp.unlink()
    try:
        if src.is_dir():
            shutil.copytree(src, tmp, symlinks=True, copy_function=os.link)
        else:
            os.link(src, tmp)
        if dst.is_dir() and not dst.is_symlink():
            shutil.rmtree(dst)
        os.replace(tmp, dst)
    except BaseException:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()
        raise


def snapshot_outputs(outputs: Iterable[tuple[str, str]], registry: str | os.PathLike = REGISTRY) -> list[str]:
    """Keep each existing output as ``{output}.last-good`` before its job deletes it.

    Args:
        outputs: ``(rule name, output path)`` of the jobs about to run.
        registry: the JSON list of snapshots made (output path -> rule name), updated in place.

    Returns:
        The snapshots made, as paths. An output that does not exist keeps an earlier run's snapshot
        (its job failed then and has not succeeded since); a link (a versioned output) is skipped.
        A file system without hard links gives a warning on stderr and no snapshot: nothing is copied.
    """
    registry = Path(registry)
    kept = _read_registry(registry)
    made: list[str] = []
    for rule, output in outputs:
        path = Path(output)
        if path.is_symlink() or not path.exists():
            continue
        snap = snapshot_of(path)
        try:
            _hard_link_copy(path, snap)
        except OSError as e:
            reason = os.strerror(e.errno) if e.errno else str(e)
            hint = " (this file system has no hard links)" if e.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK) else ""
            print(f"clmdetour: {path}: not kept as {snap.name} before rule {rule} reruns: {reason}{hint}",
                  file=sys.stderr)
            continue
        kept[str(path)] = rule
        made.append(str(snap))
    if kept:
        registry.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(registry, kept)
    return made


def snapshot_jobs(jobs: Iterable, registry: str | os.PathLike = REGISTRY) -> list[str]:
    """:func:`snapshot_outputs` for Snakemake jobs (``workflow.dag.needrun_jobs()`` in ``onstart``):
    each job's ``rule.name`` and ``output`` (every path of it)."""
    return snapshot_outputs(((job.rule.name, str(out)) for job in jobs for out in job.output), registry)


def settle(registry: str | os.PathLike = REGISTRY, file=None) -> list[str]:
    """End of a run: remove the snapshots whose output exists again; name the ones kept.

    Args:
        registry: as in :func:`snapshot_outputs`.
        file: where the lines go (default: stderr).

    Returns:
        One line per snapshot kept (its output is missing: its job failed or was stopped), also printed.
    """
    registry = Path(registry)
    kept = _read_registry(registry)
    lines: list[str] = []
    still: dict[str, str] = {}
    for output, rule in sorted(kept.items()):
        path, snap = Path(output), snapshot_of(output)
        if not (snap.exists() or snap.is_symlink()):
            continue
        if path.exists() or path.is_symlink():
            if snap.is_dir() and not snap.is_symlink():
                shutil.rmtree(snap, ignore_errors=True)
            else:
                snap.unlink(missing_ok=True)
            continue
        still[output] = rule
        lines.append(f"kept: {snap} is the last complete output of rule {rule}; its rerun did not finish, so "
                     f"{path} is gone. To use it again, go back to the config that made it and rename it to "
                     f"{path.name}; the next complete {path.name} replaces it.")
    if still:
        atomic_write_json(registry, still)
    elif registry.exists():
        registry.unlink()
    for line in lines:
        print(line, file=file or sys.stderr)
    return lines
