"""A phase's resumable checkpoints: their names, what may be loaded, and the resume point.

Composer writes ``ep{E}-ba{B}-rank{R}.pt`` into ``{checkpoint_root}/{variant}/{phase}/{run_hash}`` and
points ``latest-rank0.pt`` at the newest finished one; its autoresume loads what that link names.
The scratch folder is often shared on a cluster, so nothing in it is trusted:

- every load is a ``weights_only`` load (:func:`safe_loading`): tensors, containers, numbers,
  strings and the few plain-data types a Composer state holds (:data:`SAFE_GLOBALS`), so a file
  whose pickle names any other callable (a ``__reduce__`` payload) is refused, never run;
- a checkpoint resumes a phase only if it belongs to it (:class:`RunBinding`: the run name Composer
  stored, which is the run hash of the phase's config, input model, data and stream offset; and a
  step that matches its file name and lies within the phase's budget). Any other file, damaged or
  foreign, is moved aside as ``{name}.damaged`` with the reason (:func:`repair_resume_point`).
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.torch_version import TorchVersion

from clmdetour.errors import ExpectedError

log = logging.getLogger(__name__)

#: Composer's autoresume link (rank 0 writes every file of a DDP run).
LATEST_LINK = "latest-rank0.pt"
#: Composer's ``save_filename`` for a phase (``{epoch}``, ``{batch}``, ``{rank}`` filled by Composer).
SAVE_FILENAME = "ep{epoch}-ba{batch}-rank{rank}.pt"
CHECKPOINT_GLOB = "ep*-ba*-rank*.pt"
RANK0_GLOB = "ep*-ba*-rank0.pt"
#: Suffix of a file moved aside (damaged, foreign or unsafe); kept for a look, never loaded.
ASIDE_SUFFIX = ".damaged"

#: The non-tensor types a Composer 0.32 checkpoint of this project pickles, found with
#: ``torch.serialization.get_unsafe_globals_in_checkpoint`` on a real one: the torch version in its
#: metadata, the wall-clock durations of its timestamp, and numpy's RNG state (an ndarray of uint32).
#: Each is plain data: none runs code when unpickled.
SAFE_GLOBALS = [
    TorchVersion,
    datetime.timedelta,
    np.ndarray,
    np.dtype,
    np._core.multiarray._reconstruct,
    *(type(np.dtype(t)) for t in (np.uint32, np.int64, np.float32, np.float64, np.bool_)),
]


class CheckpointPathError(ExpectedError, NotADirectoryError):
    """A phase's checkpoint folder, or a folder above it, is a file; the message names it."""


def check_checkpoint_dir(ckpt_dir: str | Path) -> None:
    """Refuse a checkpoint folder that cannot be created or used because a file stands where a folder goes.

    Called before the phase loads anything (a model of 150M parameters takes a while), so that a
    ``checkpoints/`` or run-hash folder replaced by a file is named at once, not as a raw
    ``FileExistsError`` after the model is in memory.

    Raises:
        CheckpointPathError: naming the file, the folder expected there and the key that places it.
    """
    ckpt_dir = Path(ckpt_dir)
    for p in (ckpt_dir, *ckpt_dir.parents):
        if p.is_dir():
            return
        if p.exists() or p.is_symlink():
            raise CheckpointPathError(f"{p}: is a file, but the phase keeps its checkpoints in the folder {ckpt_dir} "
                                      "(pretraining.checkpoint_root/{variant}/{phase}/{run hash}); move the file "
                                      "away or set pretraining.checkpoint_root to another folder")


def step_of(path: str | Path) -> int:
    """The batch number in a checkpoint file name (``ep0-ba40-rank0.pt`` -> 40), or -1 when it has none."""
    m = re.search(r"-ba(\d+)-rank", Path(path).name)
    return int(m.group(1)) if m else -1


@contextlib.contextmanager
def safe_loading():
    """Within the block, every ``torch.load`` in this process is a ``weights_only`` load that also
    accepts :data:`SAFE_GLOBALS`, including Composer's own (which asks for ``weights_only=False``).

    Uses torch's documented switches: the ``TORCH_FORCE_WEIGHTS_ONLY_LOAD`` environment variable
    (read at each call) and ``torch.serialization.safe_globals``. A refused file raises
    ``pickle.UnpicklingError`` naming the global it holds.
    """
    old = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            yield
    finally:
        if old is None:
            os.environ.pop("TORCH_FORCE_WEIGHTS_ONLY_LOAD", None)
        else:
            os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = old


def safe_load(path: str | Path):
    """``torch.load`` of ``path`` to the CPU under :func:`safe_loading`.

    Raises:
        pickle.UnpicklingError: the file's pickle names a callable outside :data:`SAFE_GLOBALS`.
        OSError, RuntimeError: the file is unreadable or not a torch archive.
    """
    with safe_loading():
        return torch.load(path, map_location="cpu", weights_only=True)


@dataclass(frozen=True)
class RunBinding:
    """What a checkpoint must carry to resume this phase.

    Attributes:
        run_name: the phase's run hash (:func:`clmdetour.training.phase.run_hash`), which the phase gives
            Composer as ``run_name`` and Composer stores in every checkpoint (``state.run_name``).
        max_steps: the phase's budget in optimizer steps; a checkpoint past it is from another budget.
    """

    run_name: str
    max_steps: int

    def problem(self, state: dict, path: Path) -> str | None:
        """Why a loaded Composer ``state`` does not belong to this run, or None when it does."""
        if not isinstance(state, dict) or "run_name" not in state:
            return "not a Composer checkpoint (it stores no state.run_name)"
        stored = state["run_name"]
        if stored != self.run_name:
            return (f"belongs to another run (stored run name {stored!r}, this run is {self.run_name!r}: another "
                    "config, input model, corpus or stream offset)")
        timestamp = state.get("timestamp")
        fields = timestamp.get("Timestamp", {}) if isinstance(timestamp, dict) else {}
        step = fields.get("batch")
        if not isinstance(step, int):
            return "holds no step count (state.timestamp.batch)"
        if step != step_of(path):
            return f"stores step {step}, its file name says {step_of(path)}"
        if step > self.max_steps:
            return f"stores step {step}, past this phase's budget of {self.max_steps} steps"
        return None


def checkpoint_problem(path: str | Path, binding: RunBinding | None = None) -> str | None:
    """Why a Composer checkpoint file cannot resume the phase, or None when it can.

    ``torch.save`` writes a zip archive; a file cut short (a full disk, a node lost mid-copy) has no
    central directory, and a damaged one fails a member's CRC-32 (``zipfile.ZipFile.testzip``, which
    unpickles nothing). A complete archive is then loaded with :func:`safe_load` (refused when it holds
    code) and, given a ``binding``, checked against it (:meth:`RunBinding.problem`).
    """
    import pickle
    import zipfile

    path = Path(path)
    try:
        size = path.stat().st_size
        if size == 0:
            return "empty file"
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
        if bad:
            return f"member {bad!r} fails its CRC check"
    except zipfile.BadZipFile as e:
        return f"not a complete checkpoint archive ({e}; {size:,} bytes)"
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    try:
        saved = safe_load(path)
    except pickle.UnpicklingError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if "global" in ln.lower() and "unsupported" in ln.lower()]
        what = lines[0] if lines else type(e).__name__
        return f"refused: its pickle holds more than tensors and plain data, so it is not loaded ({what[:200]})"
    except (RuntimeError, OSError, EOFError, ValueError) as e:
        return f"does not load ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
    if binding is None:
        return None
    return binding.problem(saved.get("state") if isinstance(saved, dict) else None, path)


def latest_link_problem(ckpt_dir: str | Path) -> str | None:
    """Why ``latest-rank0.pt`` is not what Composer writes (a relative symbolic link to an
    ``ep*-ba*-rank0.pt`` file of the folder), or None when it is, or is absent.

    A regular file there would be loaded by Composer's autoresume without any check, a link to a file
    elsewhere would be checked under the wrong name, and a link to itself vouches for nothing.
    """
    latest = Path(ckpt_dir) / LATEST_LINK
    if not (latest.exists() or latest.is_symlink()):
        return None
    if not latest.is_symlink():
        return ("not a link (Composer writes latest-rank0.pt as a symbolic link to a checkpoint of this folder); "
                "a file there would be loaded unchecked")
    target = os.readlink(latest)
    if not re.fullmatch(r"ep\d+-ba\d+-rank0\.pt", target):
        return f"points at {target!r}, not at a checkpoint file of this folder"
    return None


def set_aside_bad_link(ckpt_dir: str | Path) -> dict | None:
    """Move a ``latest-rank0.pt`` that :func:`latest_link_problem` rejects aside (``*.damaged``) and point a new
    link at the folder's newest ``ep*-ba*-rank0.pt``, which :func:`repair_resume_point` then checks like any
    other (falling back to older ones).

    Returns:
        The report entry ``{"file", "reason", "moved_to"}``, or None when the link was fine or absent.
    """
    ckpt_dir = Path(ckpt_dir)
    problem = latest_link_problem(ckpt_dir)
    if problem is None:
        return None
    latest = ckpt_dir / LATEST_LINK
    aside = latest.with_name(latest.name + ASIDE_SUFFIX)
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside)
    os.replace(latest, aside)
    log.warning("%s: %s; moved to %s", latest, problem, aside.name)
    newest = max(ckpt_dir.glob(RANK0_GLOB), key=step_of, default=None)
    if newest is not None:
        latest.symlink_to(newest.name)
    return {"file": str(latest), "reason": problem, "moved_to": str(aside)}


def drop_unfinished_checkpoints(ckpt_dir: str | Path) -> list[str]:
    """Delete the checkpoint files of a save that did not finish; return their names.

    Composer writes ``ep{E}-ba{B}-rank{R}.pt`` and then points ``latest-rank0.pt`` at it, so a file for
    a later batch than the link's target (or any file when there is no link) belongs to a save that was
    cut off, e.g. a job killed or preempted mid-write: an empty or truncated file. Autoresume ignores it
    (it follows the link), but with ``save_overwrite=False`` the retried run then stops with
    FileExistsError when it reaches that batch again, on every retry. Removing it lets the retry resume
    from the last finished save and write the file anew.

    Args:
        ckpt_dir: a phase's checkpoint folder (``checkpoint_root/variant/phase/run_hash``).

    Returns:
        The removed file names (empty when every file is vouched for).
    """
    ckpt_dir = Path(ckpt_dir)
    latest = ckpt_dir / LATEST_LINK
    finished = step_of(os.readlink(latest)) if latest.is_symlink() else -1
    removed = []
    for path in sorted(ckpt_dir.glob(CHECKPOINT_GLOB)):
        if step_of(path) > finished:
            path.unlink()
            removed.append(path.name)
    return removed


def repair_resume_point(ckpt_dir: str | Path, binding: RunBinding | None = None) -> dict:
    """Point ``latest-rank0.pt`` (Composer's autoresume link) at the newest checkpoint that may resume.

    A newest checkpoint that is damaged, holds code, or belongs to another run
    (:func:`checkpoint_problem` with ``binding``) would make every retry fail or train the wrong thing;
    it is moved aside to ``{name}.damaged`` (not deleted: it may be worth a look), and the link goes to
    the next older file that passes. When none does, the link is removed and the phase starts from its
    input model. Each decision is logged, naming the files and the reason.

    Returns:
        ``{"skipped": [{"file", "reason", "moved_to"}], "resume_from": file name or None,
        "restart": bool}`` (``restart``: checkpoints existed but none passed), or ``{}`` when there
        was no link (a fresh phase).
    """
    ckpt_dir = Path(ckpt_dir)
    latest = ckpt_dir / LATEST_LINK
    if not latest.is_symlink():
        return {}
    target = ckpt_dir / os.readlink(latest)
    candidates = sorted((p for p in ckpt_dir.glob(RANK0_GLOB) if step_of(p) <= step_of(target)),
                        key=step_of, reverse=True)
    skipped, chosen = [], None
    for path in candidates:
        problem = checkpoint_problem(path, binding)
        if problem is None:
            chosen = path
            break
        aside = path.with_name(path.name + ASIDE_SUFFIX)
        os.replace(path, aside)
        skipped.append({"file": str(path), "reason": problem, "moved_to": str(aside)})
        log.warning("%s: checkpoint skipped: %s; moved to %s", path, problem, aside.name)
    if not skipped and chosen is not None and chosen.name == target.name:
        return {"skipped": [], "resume_from": target.name, "restart": False}
    latest.unlink()
    if chosen is not None:
        latest.symlink_to(chosen.name)
        log.warning("%s: resuming from %s, the newest checkpoint that passes its checks", ckpt_dir, chosen.name)
    else:
        log.warning("%s: no checkpoint loads (%d skipped); the phase starts again from its input model",
                    ckpt_dir, len(skipped))
    return {"skipped": skipped, "resume_from": chosen.name if chosen else None, "restart": chosen is None}


def prune_checkpoints(ckpt_dir: str | Path, keep: int) -> None:
    """Delete all but the ``keep`` newest checkpoint files (all of them when ``keep`` is 0), by mtime,
    as Composer's ``save_num_checkpoints_to_keep`` does during training."""
    ckpts = sorted(glob.glob(str(Path(ckpt_dir) / CHECKPOINT_GLOB)), key=os.path.getmtime)
    for path in ckpts[:-keep] if keep else ckpts:
        os.unlink(path)


def save_optimizer_by_name(optimizer, model, path: Path) -> None:
    """Write ``optimizer``'s per-parameter state keyed by parameter name (tensors moved to the CPU), atomically."""
    names = {id(p): n for n, p in model.named_parameters()}
    state = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p in optimizer.state:
                state[names[id(p)]] = {k: (v.detach().cpu() if torch.is_tensor(v) else v)
                                       for k, v in optimizer.state[p].items()}
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_optimizer_by_name(optimizer, model, path: Path) -> int:
    """Load a :func:`save_optimizer_by_name` file into ``optimizer`` for the trainable parameters it names.

    The file is read with :func:`safe_load` (it holds tensors and numbers only).

    Returns:
        The number of parameters whose state was loaded.

    Raises:
        pickle.UnpicklingError: the file holds more than tensors and plain data.
    """
    saved = safe_load(path)
    n = 0
    for name, p in model.named_parameters():
        if p.requires_grad and name in saved:
            optimizer.state[p] = {k: (v.to(p.device) if torch.is_tensor(v) else v) for k, v in saved[name].items()}
            n += 1
    return n
