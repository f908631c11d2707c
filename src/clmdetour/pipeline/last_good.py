"""Every rule's last complete output outlives a rerun that fails, and comes back by itself: one hook for all rules.

Snakemake deletes a job's outputs before the job runs and again when it fails, and with them its record of the
job (params, code, input: ``.snakemake/metadata``), so a rerun that a check refuses (a prepared task whose new
overlay leaks an id, a phase under its quality floor) would leave nothing where a complete output stood.

- Before any job runs, the Snakefile's ``onstart`` hook calls :func:`snapshot_jobs` with the jobs about to run:
  each output of theirs that exists is copied as hard links (no bytes copied) to ``{output}.last-good`` beside it,
  and Snakemake's record of the output is kept beside the registry. Outputs that are links into a ``.versions/``
  folder (a staged release, a phase's model: :func:`clmdetour.io.versioned_output_dir`) already keep
  ``{name}.last-good`` pointing at their newest complete version: only their record is kept.
- When the run ends (``onsuccess`` / ``onerror``), :func:`settle` removes the snapshots whose output exists again
  (a complete new one replaced it) and **restores** the others: the output is back under its own name and
  Snakemake's record of the run that made it is back too, so a run under the config that made it plans nothing
  for it, and a run under the config that was refused plans it again (its params differ) and its check refuses
  again. One line per job restored, for this run's snapshots only.
- Where the run did not reach its end hook (Snakemake killed, a second Ctrl-C), ``python -m
  clmdetour.pipeline.last_good restore [OUTPUT ...]`` does the same for the given outputs, or every one whose
  own name is missing; ``list`` shows what is kept.

The snapshots are listed in :data:`REGISTRY` so that nothing else named ``*.last-good`` is ever touched. The
records are Snakemake 9's file persistence (``.snakemake/metadata``, ``.snakemake/incomplete``: the file of a
key is :meth:`snakemake.persistence.file.FilePersistence._record_path`'s); without that folder (another
persistence back-end) outputs are restored without their records and the line says so.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import shutil
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from clmdetour.io import LAST_GOOD_SUFFIX, atomic_write_json

#: The snapshots this hook made and has not settled yet, relative to the workflow's working directory.
REGISTRY = Path(".snakemake") / "clmdetour-last-good.json"
#: The id of the run this process snapshotted for (set by :func:`snapshot_outputs`): :func:`settle` names only
#: this run's snapshots.
CURRENT_RUN: str | None = None


def _read_registry(registry: Path) -> dict[str, dict]:
    """``{output: {"rule", "run", "versioned", "record"}}``; the format before records (``{output: rule}``) is
    read as entries without a run or a record."""
    try:
        data = json.loads(registry.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    out = {}
    for k, v in data.items():
        entry = v if isinstance(v, dict) else {"rule": str(v)}
        out[str(k)] = {"rule": str(entry.get("rule")), "run": entry.get("run"),
                       "versioned": bool(entry.get("versioned")), "record": entry.get("record")}
    return out


def _write_registry(registry: Path, entries: dict[str, dict]) -> None:
    if entries:
        registry.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(registry, entries)
    elif registry.exists():
        registry.unlink()


def snapshot_of(output: str | os.PathLike) -> Path:
    """``{output}.last-good``: where :func:`snapshot_jobs` keeps the last complete ``output``."""
    output = Path(output)
    return output.with_name(output.name + LAST_GOOD_SUFFIX)


def record_file(folder: str | os.PathLike, key: str) -> Path:
    """The file in which Snakemake's file persistence keeps the record of ``key`` (an output path as the rule
    names it) under ``folder`` (``.snakemake/metadata`` or ``.snakemake/incomplete``): Snakemake's own
    :meth:`snakemake.persistence.file.FilePersistence._record_path` (URL-safe base64 of the key, cut to the
    file system's name length)."""
    from snakemake.persistence.file import FilePersistence

    persistence = object.__new__(FilePersistence)
    existing = Path(folder).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    persistence._max_len = os.pathconf(existing, "PC_NAME_MAX")  # what _record_path reads of the folder
    return Path(persistence._record_path(str(folder), key))


def _read_record(snakemake_dir: Path, key: str) -> dict | None:
    if not (snakemake_dir / "metadata").is_dir():
        return None
    try:
        return json.loads(record_file(snakemake_dir / "metadata", key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


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
    """Keep each existing output, and Snakemake's record of it, before its job deletes them.

    Args:
        outputs: ``(rule name, output path)`` of the jobs about to run.
        registry: the JSON list of snapshots made (output path -> rule, run, record), updated in place; the
            Snakemake folder is its parent (``.snakemake``).

    Returns:
        The snapshots made, as paths. An output that does not exist keeps an earlier run's snapshot
        (its job failed then and has not succeeded since); a versioned output (a link) keeps its own
        ``{name}.last-good``: only its record is kept. A file system without hard links gives a warning on
        stderr and no snapshot: nothing is copied.
    """
    global CURRENT_RUN
    registry = Path(registry)
    CURRENT_RUN = f"{os.getpid()}-{time.time_ns()}"
    kept = _read_registry(registry)
    made: list[str] = []
    for rule, output in outputs:
        path = Path(output)
        if not (path.exists() or path.is_symlink()):
            continue
        snap = snapshot_of(path)
        versioned = path.is_symlink()
        if versioned and not snap.is_symlink():
            continue  # a link of another kind: not ours to restore
        if not versioned:
            try:
                _hard_link_copy(path, snap)
            except OSError as e:
                reason = os.strerror(e.errno) if e.errno else str(e)
                hint = " (this file system has no hard links)" if e.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK) else ""
                print(f"clmdetour: {path}: not kept as {snap.name} before rule {rule} reruns: {reason}{hint}",
                      file=sys.stderr)
                continue
        kept[str(path)] = {"rule": rule, "run": CURRENT_RUN, "versioned": versioned,
                           "record": _read_record(registry.parent, str(output))}
        made.append(str(snap))
    _write_registry(registry, kept)
    return made


def snapshot_jobs(jobs: Iterable, registry: str | os.PathLike = REGISTRY) -> list[str]:
    """:func:`snapshot_outputs` for Snakemake jobs (``workflow.dag.needrun_jobs()`` in ``onstart``):
    each job's ``rule.name`` and ``output`` (every path of it)."""
    return snapshot_outputs(((job.rule.name, str(out)) for job in jobs for out in job.output), registry)


def restore(output: str, entry: dict, snakemake_dir: Path) -> str:
    """Put ``output`` back from its snapshot, with Snakemake's record of the run that made it.

    Returns:
        What was restored: ``"with its record"`` or ``"without a record"`` (none was kept).

    Raises:
        FileNotFoundError: no snapshot (or a versioned output's ``.last-good`` link) is left to restore from.
        FileExistsError: the output's own name exists.
    """
    path, snap = Path(output), snapshot_of(output)
    if path.exists() or path.is_symlink():
        raise FileExistsError(f"{path} exists: nothing to restore")
    if not (snap.exists() or snap.is_symlink()):
        raise FileNotFoundError(f"{snap} is gone: nothing to restore {path} from")
    if entry.get("versioned"):
        tmp = path.with_name(f".{path.name}.link.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(os.readlink(snap))
        os.replace(tmp, path)
    else:
        os.replace(snap, path)
    record = entry.get("record")
    if record is None or not (snakemake_dir / "metadata").is_dir():
        return "without a record"
    target = record_file(snakemake_dir / "metadata", output)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(target, record)
    with contextlib.suppress(FileNotFoundError):
        record_file(snakemake_dir / "incomplete", output).unlink()
    return "with its record"


def _drop_snapshot(output: str, entry: dict) -> None:
    """Remove the snapshot of an output that exists again (a versioned output's link stays: it is the version's)."""
    snap = snapshot_of(output)
    if entry.get("versioned") or not (snap.exists() or snap.is_symlink()):
        return
    if snap.is_dir() and not snap.is_symlink():
        shutil.rmtree(snap, ignore_errors=True)
    else:
        snap.unlink(missing_ok=True)


def settle(registry: str | os.PathLike = REGISTRY, file=None, only: Iterable[str] | None = None) -> list[str]:
    """End of a run (or ``restore``): drop the snapshots whose output exists again; restore the others.

    Args:
        registry: as in :func:`snapshot_outputs`.
        file: where the lines go (default: stderr).
        only: restore these outputs only (the ``restore`` command's arguments); default every one whose
            output is missing.

    Returns:
        One line per rule and run whose outputs were restored (or could not be), printed; only this run's
        (:data:`CURRENT_RUN`) when it is set, so earlier runs' snapshots are not named again.
    """
    registry = Path(registry)
    kept = _read_registry(registry)
    wanted = {str(Path(o)) for o in only} if only is not None else None
    still: dict[str, dict] = {}
    restored: dict[tuple[str, str | None, str], list[str]] = {}
    failed: list[str] = []
    for output, entry in sorted(kept.items()):
        path = Path(output)
        if path.exists() or path.is_symlink():
            _drop_snapshot(output, entry)
            continue
        if wanted is not None and str(path) not in wanted:
            still[output] = entry
            continue
        try:
            how = restore(output, entry, registry.parent)
        except (FileNotFoundError, FileExistsError, OSError) as e:
            if not (snapshot_of(output).exists() or snapshot_of(output).is_symlink()):
                continue  # nothing left to restore from: forget it
            still[output] = entry
            if CURRENT_RUN is None or entry.get("run") == CURRENT_RUN:
                failed.append(f"kept: {snapshot_of(output)} (rule {entry['rule']}) could not be put back as "
                              f"{path.name}: {e}; run `python -m clmdetour.pipeline.last_good restore {output}`")
            continue
        restored.setdefault((entry["rule"], entry.get("run"), how), []).append(output)
    _write_registry(registry, still)
    lines = []
    for (rule, run, how), outputs in restored.items():
        if CURRENT_RUN is not None and run != CURRENT_RUN:
            continue
        lines.append(f"restored: {', '.join(outputs)} (rule {rule}): its rerun did not finish, so the last complete "
                     f"output is back under its own name, {how} of the run that made it (a run under the config that "
                     "made it plans nothing for it; one under another config plans it again, and a check that "
                     "refused it refuses it again)")
    lines += failed
    for line in lines:
        print(line, file=file or sys.stderr)
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m clmdetour.pipeline.last_good list|restore [OUTPUT ...]`` in the workflow's working directory:
    ``list`` prints each kept snapshot; ``restore`` puts back the given outputs (default: every one whose own
    name is missing), with Snakemake's records. Exit 1 when an output asked for has no snapshot."""
    global CURRENT_RUN
    parser = argparse.ArgumentParser(prog="python -m clmdetour.pipeline.last_good", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["list", "restore"])
    parser.add_argument("outputs", nargs="*", help="output paths as the rules name them (restore; default: all)")
    parser.add_argument("--registry", default=str(REGISTRY), help=f"the registry (default {REGISTRY})")
    args = parser.parse_args(argv)
    registry = Path(args.registry)
    kept = _read_registry(registry)
    if args.command == "list":
        for output, entry in sorted(kept.items()):
            state = "output present" if Path(output).exists() else "output missing: restore puts it back"
            print(f"{snapshot_of(output)}: rule {entry['rule']}, {state}")
        if not kept:
            print("no snapshot kept")
        return 0
    unknown = [o for o in args.outputs if str(Path(o)) not in kept]
    for o in unknown:
        print(f"restore: {o}: no snapshot kept for it (see `list`)", file=sys.stderr)
    CURRENT_RUN = None
    settle(registry, file=sys.stdout, only=args.outputs or None)
    return 1 if unknown else 0


if __name__ == "__main__":
    sys.exit(main())
