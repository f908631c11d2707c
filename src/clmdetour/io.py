"""Atomic writes, canonical JSON and hashing shared by every stage.

Nothing already computed may be lost or half-written: every file or folder a
stage produces is written under a temporary name in the same directory and
renamed into place only when complete (``os.replace`` is atomic on POSIX).
Hashes are sha256 over canonical JSON (sorted keys, no whitespace) or over
token ids, never over Arrow files, whose bytes depend on library versions.
A write that fills its disk raises :class:`DiskSpaceError`, naming the path and
the bytes free there, after removing what it had half-written.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from clmdetour.errors import ExpectedError, InputError


class DiskSpaceError(ExpectedError, OSError):
    """A write filled its disk (ENOSPC); the message names the path and the bytes free there.

    ``errno`` is ``errno.ENOSPC``; ``path`` is the file or folder being written (None when not given).
    """

    def __init__(self, message: str, path: str | os.PathLike | None = None):
        super().__init__(message)
        self.errno = errno.ENOSPC
        self.path = Path(path) if path is not None else None


#: What a full disk says when it does not arrive as ``OSError(ENOSPC)``: safetensors' SafetensorError
#: (``... os error 28``, ``Os { code: 28, kind: StorageFull, ... }``), pyarrow's and torch's RuntimeErrors.
_DISK_FULL_TEXT = re.compile(r"no space left on device|os error 28|code: 28, kind: StorageFull", re.IGNORECASE)


def disk_full(error: BaseException | None) -> bool:
    """Whether ``error`` (or an exception it was raised from or during) is a full disk (ENOSPC).

    Libraries wrap the ``OSError`` (errno 28) of the failed write: torch 2.14's ``torch.save`` raises
    ``RuntimeError: [enforce fail at inline_container.cc:...] unexpected pos ...`` while handling it,
    safetensors raises ``SafetensorError: Error while serializing: I/O error: No space left on device
    (os error 28)``. So the chain of ``__cause__`` / ``__context__`` is walked, and each message is read.
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return True
        if _DISK_FULL_TEXT.search(str(error)):
            return True
        error = error.__cause__ or error.__context__
    return False


def free_bytes(path: str | os.PathLike) -> int | None:
    """Bytes free (``shutil.disk_usage``) on the disk holding ``path``, or on its nearest existing
    folder when ``path`` is gone; None when none can be read."""
    path = Path(path)
    for where in (path, *path.parents):
        try:
            return shutil.disk_usage(where).free
        except OSError:
            continue
    return None


def disk_space_error(path: str | os.PathLike, error: BaseException) -> DiskSpaceError | None:
    """The :class:`DiskSpaceError` naming ``path`` and the bytes free there when ``error`` is a full disk
    (:func:`disk_full`), else None. Call it once what the write left is removed, so the free bytes count
    what remains. An error that already names ``path`` is not wrapped again (None)."""
    if not disk_full(error) or (isinstance(error, DiskSpaceError) and error.path == Path(path)):
        return None
    free = free_bytes(path)
    free_text = f"{free:,} bytes free there" if free is not None else "free space unknown"
    return DiskSpaceError(f"{path}: no space left on device while writing it ({free_text}; what the write had "
                          "written is removed); free space on that disk (or write to another one) and rerun", path)


@contextlib.contextmanager
def naming_full_disk(path: str | os.PathLike) -> Iterator[None]:
    """Raise :class:`DiskSpaceError` naming ``path`` (:func:`disk_space_error`) for a full disk inside the
    block; any other error passes unchanged. The block removes its own partial files first."""
    try:
        yield
    except BaseException as e:
        full = disk_space_error(path, e)
        if full is not None:
            raise full from e
        raise


def canonical_json(obj: Any) -> str:
    """JSON text with sorted keys and no insignificant whitespace (for hashing)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_json(obj: Any) -> str:
    """sha256 hex digest of ``canonical_json(obj)``."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def sha256_file(path: str | os.PathLike, chunk_bytes: int = 1 << 20) -> str:
    """sha256 hex digest of a file's bytes, read in ``chunk_bytes`` chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(chunk_bytes), b""):
            h.update(chunk)
    return h.hexdigest()


class TokenHasher:
    """Incremental sha256 over sequences of token ids (each id as 4 little-endian bytes).

    Feed it rows of ids in a fixed order; equal token streams give equal digests
    whatever the storage format.
    """

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def update(self, ids: Iterable[int]) -> None:
        """Add one sequence of token ids (a row separator is hashed too)."""
        import numpy as np

        arr = ids if isinstance(ids, np.ndarray) else np.asarray(list(ids))
        self._h.update(arr.astype("<u4", copy=False).tobytes())
        self._h.update(b"\xff\xff\xff\xff")

    def hexdigest(self) -> str:
        """The sha256 hex digest so far."""
        return self._h.hexdigest()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def remove_stale_temporaries(path: str | os.PathLike) -> list[str]:
    """Remove what an earlier, killed writer of ``path`` left beside it; return the names removed.

    The atomic writers below write ``.{name}.<random suffix>.tmp`` (a file or a folder) and, when replacing a
    folder, park the old one as ``.{name}.old``. A job killed in between (SIGKILL, a node lost, a
    SLURM time limit) leaves them behind, hidden, possibly gigabytes of weights; the next writer of
    the same path (its rerun: Snakemake never runs two jobs writing one output) removes them first.
    """
    path = Path(path)
    removed = []
    if not path.parent.is_dir():
        return removed
    for stale in [*path.parent.glob(f".{glob.escape(path.name)}.*.tmp"), path.with_name(f".{path.name}.old")]:
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        elif stale.exists() or stale.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        else:
            continue
        removed.append(stale.name)
    if removed:
        import logging

        logging.getLogger(__name__).warning("%s: removed what a killed earlier write left: %s", path, ", ".join(removed))
    return removed


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename (stale temporaries of an
    earlier, killed write of ``path`` are removed first: :func:`remove_stale_temporaries`).

    Raises:
        DiskSpaceError: the disk filled up (names ``path`` and the bytes free; the temporary file is removed).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    with naming_full_disk(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the usual mode
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, +-Infinity: not JSON numbers, RFC 8259 section 6) replaced by
    None, recursively through dicts, lists and tuples; other values as they are."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int = 2, strict: bool = False) -> None:
    """Write ``obj`` as pretty JSON (sorted keys) through a temporary file and a rename.

    Args:
        strict: write only standard JSON: non-finite floats become ``null`` (:func:`json_safe`); records that
            other tools read (the fine-tuning seed records) are written so.

    Raises:
        DiskSpaceError: the disk filled up (:func:`atomic_write_text`).
    """
    if strict:
        obj = json_safe(obj)
    atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=True, ensure_ascii=False, default=str,
                                       allow_nan=not strict) + "\n")


@contextlib.contextmanager
def atomic_output_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``path``.

    On an exception the temporary folder is removed and ``path`` is left as it
    was (an existing complete output is never half-overwritten). What a killed earlier
    write of ``path`` left (SIGKILL skips the cleanup) is removed first
    (:func:`remove_stale_temporaries`).

    Raises:
        DiskSpaceError: the disk filled up inside the block (e.g. ``save_pretrained``'s SafetensorError
            ``os error 28``): names ``path`` and the bytes free, once the temporary folder is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
        apply_umask_modes(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        full = disk_space_error(path, e)
        if full is not None:
            raise full from e
        raise


def apply_umask_modes(folder: str | os.PathLike) -> None:
    """Give every file and folder under ``folder`` the mode a plain ``open`` / ``mkdir`` gives under the
    process's umask (files ``0o666 & ~umask``, executables and folders ``0o777 & ~umask``).

    Writers such as transformers' ``save_pretrained`` (safetensors) create ``model.safetensors`` with
    mode 0600 whatever the umask, so a model shared with a group would be unreadable to it; the
    other outputs of a run are readable where the umask allows, and so are exported models.
    """
    mask = _umask()
    for root, dirs, files in os.walk(folder):
        os.chmod(root, 0o777 & ~mask)
        for name in files:
            p = os.path.join(root, name)
            if os.path.islink(p):
                continue
            executable = os.stat(p).st_mode & 0o100
            os.chmod(p, (0o777 if executable else 0o666) & ~mask)


#: Folder beside a versioned output that holds its complete versions (:func:`versioned_output_dir`).
VERSIONS_DIR = ".versions"
#: Suffix of the pointer to the newest complete version, which Snakemake never deletes.
LAST_GOOD_SUFFIX = ".last-good"


def _point(link: Path, target: Path) -> None:
    """Make ``link`` a relative symlink to ``target``, replacing what is there in one rename."""
    tmp = link.with_name(f".{link.name}.link.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(os.path.relpath(target, link.parent))
    os.replace(tmp, link)


@contextlib.contextmanager
def versioned_output_dir(path: str | os.PathLike, keep: int = 2) -> Iterator[Path]:
    """Yield a temporary folder; on success it becomes a new complete version and ``path`` points to it.

    For outputs a user keeps (a staged release, a finished phase's model): Snakemake deletes a
    ``directory()`` output before its job runs, so a replacement that fails or is killed would leave
    nothing. Here ``path`` is a symlink to ``{parent}/.versions/{name}/{version}/``; Snakemake's deletion
    removes only the link, never a version. Each success also points ``{path}.last-good`` (not an output,
    so never deleted) at the new version, and removes versions older than the ``keep`` newest. A folder
    left at ``path`` by an earlier layout becomes a version first.

    Args:
        path: the output folder as the rules name it.
        keep: how many complete versions to keep (at least 1; the newest is always kept).

    Raises:
        DiskSpaceError: the disk filled up inside the block (names ``path`` and the bytes free).
        whatever else the block raises; the temporary folder is removed and every version is kept.
    """
    path = Path(path)
    store = path.parent / VERSIONS_DIR / path.name
    store.mkdir(parents=True, exist_ok=True)
    for stale in store.glob(".*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    tmp = Path(tempfile.mkdtemp(prefix=f".{stamp}.", suffix=".tmp", dir=store))
    try:
        yield tmp
        apply_umask_modes(tmp)
        n = 0
        while (store / f"{stamp}-{n}").exists():
            n += 1
        version = store / f"{stamp}-{n}"
        os.replace(tmp, version)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        full = disk_space_error(path, e)
        if full is not None:
            raise full from e
        raise
    if path.is_dir() and not path.is_symlink():  # a folder of the layout before versions
        os.replace(path, store / f"{stamp}-{n}-earlier")
    _point(path, version)
    _point(path.with_name(path.name + LAST_GOOD_SUFFIX), version)
    versions_kept = sorted((p for p in store.iterdir() if p.is_dir() and not p.name.startswith(".")),
                           key=lambda p: p.stat().st_mtime)
    for old in versions_kept[:-max(1, keep)]:
        if old != version:
            shutil.rmtree(old, ignore_errors=True)


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file; errors name the file.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not valid JSON (message names file, line and column).
    """
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None


def versions() -> dict[str, str]:
    """Versions of Python and of the libraries that shape training and evaluation results.

    Recorded in every phase's ``run.json`` and every fine-tuning seed record.
    Read from the installed distributions' metadata (``importlib.metadata``), so a package that
    sets no ``__version__`` attribute (seqeval) or runs from a checkout installed in editable mode
    (clmdetour) still reports its version; ``"not installed"`` when a distribution is absent.
    """
    import platform
    from importlib.metadata import PackageNotFoundError, version

    def of(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "not installed"

    import torch  # its own string carries the build (``2.14.1+cu130``), which the metadata drops

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": of("transformers"),
            "composer": of("mosaicml"), "datasets": of("datasets"), "tokenizers": of("tokenizers"),
            "seqeval": of("seqeval"), "scikit-learn": of("scikit-learn"), "clmdetour": of("clmdetour")}
