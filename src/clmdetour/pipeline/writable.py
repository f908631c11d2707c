"""Before any job runs: every folder the run's jobs write to accepts writes (a read-only ``results/``).

Without this check the first job to write dies with a raw ``OSError: [Errno 30] Read-only file system``
traceback (and Snakemake names a read-only output "write-protected" only when the output exists). The
Snakefile's ``onstart`` hook (real runs only: a dry run of a finished run mounted read-only stays possible)
calls :func:`check_jobs_writable` with the jobs about to run.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from clmdetour.errors import ExpectedError


class ReadOnlyError(ExpectedError):
    """A folder that the run's jobs must write to refuses writes (read-only mount or no permission)."""


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def unwritable(paths: Iterable[str | os.PathLike]) -> dict[str, str]:
    """The folders among ``paths``' nearest existing ancestors that refuse writes, with the reason.

    Args:
        paths: files or folders a job will create (they need not exist).

    Returns:
        ``{folder: reason}``: ``"read-only file system"`` (``access(2)`` gives ``EROFS``, also for root) or
        ``"no write permission"``; empty when every one accepts writes.
    """
    found: dict[str, str] = {}
    seen: set[Path] = set()
    for p in paths:
        p = Path(p)
        folder = _nearest_existing(p.parent if not p.is_dir() else p)
        if folder in seen:
            continue
        seen.add(folder)
        try:
            ok = os.access(folder, os.W_OK | os.X_OK)
            reason = "no write permission"
        except OSError as e:  # pragma: no cover - access(2) reports through its return value on Linux
            ok, reason = False, os.strerror(e.errno or errno.EACCES)
        if not ok:
            probe = folder / f".clmdetour-write-probe-{os.getpid()}"
            try:  # access() answers for the mount's flags only on Linux: a write tells the rest
                probe.touch()
                probe.unlink()
                continue
            except OSError as e:
                reason = "read-only file system" if e.errno == errno.EROFS else "no write permission"
            found[str(folder)] = reason
    return found


def check_jobs_writable(jobs: Iterable, scratch: Mapping[str, Iterable[str | os.PathLike]] | None = None) -> None:
    """Refuse the run, in one line, when a job's output or log folder, or a scratch folder of a job's rule,
    refuses writes.

    Args:
        jobs: Snakemake jobs (``workflow.dag.needrun_jobs()``): their ``output`` and ``log`` paths.
        scratch: rule name -> folders its jobs write to besides their outputs
            (:meth:`clmdetour.pipeline.Pipeline.scratch_writers`: ``pretraining.checkpoint_root``, for the phases'
            checkpoints and the corpus and fine-tuning scratch); checked when a job of that rule is to run.

    Raises:
        ReadOnlyError: names each folder, why, and the jobs' rules; nothing has run yet.
    """
    jobs = list(jobs)
    scratch = scratch or {}
    paths: list[str] = []
    rules: dict[str, set[str]] = {}
    for job in jobs:
        name = job.rule.name
        for out in [*job.output, *job.log]:
            paths.append(str(out))
            rules.setdefault(str(_nearest_existing(Path(str(out)).parent)), set()).add(name)
        for folder in scratch.get(name, ()):
            paths.append(str(Path(folder) / "x"))  # the folder itself is written into (created when missing)
            rules.setdefault(str(_nearest_existing(Path(folder))), set()).add(name)
    bad = unwritable(paths)
    if bad:
        where = "; ".join(f"{folder}: {reason}" + (f" (rules {', '.join(sorted(rules[folder]))})" if folder in rules
                                                   else "") for folder, reason in bad.items())
        raise ReadOnlyError(f"nothing was run: the jobs would write where writes are refused: {where}. "
                            "Remount it read-write, or run in a writable copy (--directory DIR, or another "
                            "pretraining.checkpoint_root for the scratch); a dry run (-n) of a read-only run still "
                            "works.")
