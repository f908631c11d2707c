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
  foreign, is moved aside as ``{name}.damaged`` with the reason (:func:`repair_resume_point`);
- a whole checkpoint is never deleted for lack of the link: a lost ``latest-rank0.pt`` is recreated on
  the newest one that passes (:func:`relink_unlinked_checkpoint`); only a save cut short
  (:func:`cut_short`) is removed (:func:`drop_unfinished_checkpoints`).

Beside the checkpoints the folder holds the live training log (:data:`LIVE_LOG`, trimmed to the resume
step by :func:`trim_live_log`) and, once the phase ends, its optimizer state by parameter name
(:data:`FINAL_OPTIMIZER`, which the decay loads: :func:`restore_optimizer_state`). A save that fills
the disk stops the phase with :class:`CheckpointSpaceError` (:func:`checkpoint_space_error`).
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import json
import logging
import os
import pickle
import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.torch_version import TorchVersion

from clmdetour.errors import ExpectedError
from clmdetour.io import DiskSpaceError, atomic_write_text, naming_full_disk
from clmdetour.training.ranks import check_shared_folder, per_node_signal_files

log = logging.getLogger(__name__)

#: Composer's autoresume link (rank 0 writes every file of a DDP run).
LATEST_LINK = "latest-rank0.pt"
#: Composer's ``save_filename`` for a phase (``{epoch}``, ``{batch}``, ``{rank}`` filled by Composer).
SAVE_FILENAME = "ep{epoch}-ba{batch}-rank{rank}.pt"
CHECKPOINT_GLOB = "ep*-ba*-rank*.pt"
RANK0_GLOB = "ep*-ba*-rank0.pt"
#: Suffix of a file moved aside (damaged, foreign or unsafe); kept for a look, never loaded.
ASIDE_SUFFIX = ".damaged"
#: The live training log (:class:`clmdetour.training.callbacks.TrainLog`), copied to the phase folder at the end.
LIVE_LOG = "train_log.jsonl"
#: The optimizer state by parameter name written when a phase ends (:func:`save_optimizer_by_name`).
FINAL_OPTIMIZER = "final_optimizer.pt"

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


class CheckpointSpaceError(DiskSpaceError):
    """The disk holding a phase's checkpoints filled up during a save; the message names the folder
    (the checkpoint case of :class:`clmdetour.io.DiskSpaceError`; a full disk is recognised by
    :func:`clmdetour.io.disk_full`)."""


class UnsafeStateError(ExpectedError, pickle.UnpicklingError):
    """A saved state (phase 1's optimizer state) holds more than tensors and plain data, so it was not
    loaded; the message names the file and what its pickle names."""


def checkpoint_dir(checkpoint_root: str | Path, variant: str, phase: str, rhash: str) -> Path:
    """A phase's checkpoint folder: ``{checkpoint_root}/{variant}/{phase}/{run hash}``."""
    return Path(checkpoint_root) / variant / phase / rhash


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


def refused_what(error: pickle.UnpicklingError) -> str:
    """What a refused ``weights_only`` load found (``it names posix.system``), from torch's message, without
    torch's advice (which suggests ``weights_only=False`` or allowlisting the callable)."""
    names = re.findall(r"GLOBAL (\S+)", str(error))
    return f"it names {', '.join(dict.fromkeys(names))}"[:200] if names else type(error).__name__


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
    shapes: dict[str, tuple[int, ...]] | None = None

    def problem(self, state: dict, path: Path) -> str | None:
        """Why a loaded Composer ``state`` does not belong to this run, or None when it does.

        With ``shapes`` (this run's model: parameter and buffer name -> shape, from
        :func:`weight_shapes`), the stored weights (``state.model``) must have the same names and shapes: a
        checkpoint of another model size or depth is refused here, in one line, instead of failing inside
        Composer's ``load_state_dict`` with a page of size mismatches.
        """
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
        if self.shapes is not None:
            return shape_problem(state.get("model"), self.shapes)
        return None


#: Prefixes that wrappers add to a weight's name (Composer's model wrapper, DDP, ``torch.compile``).
_WRAPPER_PREFIXES = ("model.", "module.", "_orig_mod.")


def _weight_name(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in _WRAPPER_PREFIXES:
            if key.startswith(prefix):
                key, changed = key[len(prefix):], True
    return key


def weight_shapes(state_dict: dict) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor of a ``state_dict``, the names without wrapper prefixes
    (:data:`_WRAPPER_PREFIXES`), so a Composer checkpoint's ``state.model`` and the model compare."""
    return {_weight_name(k): tuple(v.shape) for k, v in state_dict.items() if hasattr(v, "shape")}


def shape_problem(stored: object, expected: dict[str, tuple[int, ...]]) -> str | None:
    """Why a checkpoint's weights (``state.model``) are not this model's, or None when names and shapes match.

    Args:
        stored: the checkpoint's ``state["model"]`` (name -> tensor).
        expected: this model's :func:`weight_shapes`.
    """
    if not isinstance(stored, dict):
        return "holds no model weights (state.model)"
    shapes = weight_shapes(stored)
    extra, missing = sorted(set(shapes) - set(expected)), sorted(set(expected) - set(shapes))
    if extra or missing:
        return (f"holds the weights of another model: {len(missing)} of this model's tensors missing"
                f"{f' (first: {missing[0]})' if missing else ''}, {len(extra)} it does not have"
                f"{f' (first: {extra[0]})' if extra else ''}; another depth or architecture")
    for name, shape in sorted(shapes.items()):
        if shape != expected[name]:
            return (f"holds the weights of another model size: {name} is {list(shape)} there, "
                    f"{list(expected[name])} in this model")
    return None


def cut_short(path: str | Path) -> str | None:
    """Why a checkpoint file is a save that did not finish, or None when it is a whole archive.

    ``torch.save`` writes a zip archive whose central directory comes last, so a save cut off (a job
    killed mid-write, a full disk) leaves an empty file or an archive without it. A whole archive may
    still be damaged, foreign or unsafe: :func:`checkpoint_problem` says.

    Raises:
        OSError: the file cannot be read.
    """
    size = Path(path).stat().st_size
    if size == 0:
        return "empty file"
    try:
        with zipfile.ZipFile(path):
            return None
    except zipfile.BadZipFile as e:
        return f"not a complete checkpoint archive ({e}; {size:,} bytes)"


def checkpoint_problem(path: str | Path, binding: RunBinding | None = None) -> str | None:
    """Why a Composer checkpoint file cannot resume the phase, or None when it can.

    ``torch.save`` writes a zip archive; a file cut short (a full disk, a node lost mid-copy) has no
    central directory, and a damaged one fails a member's CRC-32 (``zipfile.ZipFile.testzip``, which
    unpickles nothing). A complete archive is then loaded with :func:`safe_load` (refused when it holds
    code) and, given a ``binding``, checked against it (:meth:`RunBinding.problem`).
    """
    path = Path(path)
    try:
        cut = cut_short(path)
        if cut:
            return cut
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
        if bad:
            return f"member {bad!r} fails its CRC check"
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    try:
        saved = safe_load(path)
    except pickle.UnpicklingError as e:
        return f"refused: its pickle holds more than tensors and plain data, so it is not loaded ({refused_what(e)})"
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


def set_aside(path: Path, problem: str) -> dict:
    """Move a checkpoint file that cannot resume the phase to ``{name}.damaged`` (kept for a look, never
    loaded), logging ``problem``.

    Returns:
        The report entry ``{"file", "reason", "moved_to"}``.
    """
    aside = path.with_name(path.name + ASIDE_SUFFIX)
    os.replace(path, aside)
    log.warning("%s: checkpoint skipped: %s; moved to %s", path, problem, aside.name)
    return {"file": str(path), "reason": problem, "moved_to": str(aside)}


def relink_unlinked_checkpoint(ckpt_dir: str | Path, binding: RunBinding) -> tuple[str | None, list[dict]]:
    """Point ``latest-rank0.pt`` at the newest whole checkpoint it does not cover, when one passes its checks.

    ``latest-rank0.pt`` missing (a copy that drops symbolic links, e.g. ``cp -r`` to another scratch
    disk) or pointing at an older file (a job killed between a save and its link) does not make a whole
    checkpoint an unfinished save: each ``ep*-ba*-rank0.pt`` past the link's step (every one when there is
    no link), newest first, is checked (:func:`checkpoint_problem` with ``binding``); the first that passes
    gets the link, and the phase resumes from it (logged). A whole one that fails is moved aside
    (:func:`set_aside`); a cut-short one (:func:`cut_short`) is left to :func:`drop_unfinished_checkpoints`.
    Call it after :func:`set_aside_bad_link`.

    Returns:
        ``(file name linked, or None when the link was left as it was; report entries of the files set aside)``.
    """
    latest = Path(ckpt_dir) / LATEST_LINK
    linked = step_of(os.readlink(latest)) if latest.is_symlink() else -1
    skipped = []
    for path in sorted((p for p in latest.parent.glob(RANK0_GLOB) if step_of(p) > linked), key=step_of, reverse=True):
        if cut_short(path):
            continue
        problem = checkpoint_problem(path, binding)
        if problem:
            skipped.append(set_aside(path, problem))
            continue
        was = "missing" if linked < 0 else f"points at {os.readlink(latest)}, an older checkpoint"
        if latest.is_symlink():
            latest.unlink()
        latest.symlink_to(path.name)
        log.warning("%s: %s; recreated it on %s, the newest checkpoint that passes its checks: the phase resumes "
                    "from step %d", latest, was, path.name, step_of(path))
        return path.name, skipped
    return None, skipped


def drop_unfinished_checkpoints(ckpt_dir: str | Path) -> list[str]:
    """Delete the checkpoint files of a save that did not finish; return their names.

    Composer writes ``ep{E}-ba{B}-rank{R}.pt`` and then points ``latest-rank0.pt`` at it, so a file for
    a later batch than the link's target (or any file when there is no link) belongs to a save that was
    cut off, e.g. a job killed or preempted mid-write: an empty or truncated file. Autoresume ignores it
    (it follows the link), but with ``save_overwrite=False`` the retried run then stops with
    FileExistsError when it reaches that batch again, on every retry. Removing it lets the retry resume
    from the last finished save and write the file anew. Only a cut-short file (:func:`cut_short`) is
    deleted; a whole one is moved aside (:func:`set_aside`), never deleted for lack of the link
    (:func:`relink_unlinked_checkpoint` has given the link to any that may resume).

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
        if step_of(path) <= finished:
            continue
        if cut_short(path):
            path.unlink()
            removed.append(path.name)
        else:
            set_aside(path, "a whole save past the step latest-rank0.pt vouches for, which cannot resume the phase")
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
        skipped.append(set_aside(path, problem))
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


def prepare_checkpoint_dir(checkpoint_root: str, variant: str, phase: str, rhash: str,
                           max_steps: int | None = None,
                           shapes: dict[str, tuple[int, ...]] | None = None) -> tuple[Path, dict]:
    """Step: ``{checkpoint_root}/{variant}/{phase}/{run hash}``, without the files of an unfinished save
    and with ``latest-rank0.pt`` on the newest checkpoint that loads safely and belongs to this run
    (:func:`repair_resume_point`: run name ``rhash``, a step within ``max_steps``; ``None`` checks the
    run name only; weights of the ``shapes`` given, :meth:`RunBinding.problem`), recreated when it was lost
    (:func:`relink_unlinked_checkpoint`).

    Returns:
        ``(folder, resume report)``; the report (rank 0's; ``{}`` on other ranks) goes to ``run.json``;
        its ``relinked`` names the checkpoint the link was recreated on, when it was.

    Raises:
        SharedFolderError: the ranks of a multi-node run do not see one shared folder
            (:func:`clmdetour.training.ranks.check_shared_folder`).
    """
    from composer.utils import dist

    ckpt_dir = checkpoint_dir(checkpoint_root, variant, phase, rhash)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {}
    if dist.get_global_rank() == 0:  # DDP: rank 0 writes every checkpoint file; check_shared_folder then syncs
        binding = RunBinding(rhash, 10**18 if max_steps is None else max_steps, shapes)
        bad_link = set_aside_bad_link(ckpt_dir)  # a latest-rank0.pt Composer did not write: aside, relinked
        relinked, unlinked_skipped = relink_unlinked_checkpoint(ckpt_dir, binding)  # a lost link: recreated
        dropped = drop_unfinished_checkpoints(ckpt_dir)
        if dropped:
            log.warning("%s: removed checkpoint files of a save that did not finish (the job was killed while "
                        "writing them): %s", ckpt_dir, ", ".join(dropped))
        report = repair_resume_point(ckpt_dir, binding)
        skipped = [bad_link] if bad_link else []
        if skipped or unlinked_skipped:
            report = dict(report or {"resume_from": None, "restart": bool(unlinked_skipped)},
                          skipped=[*skipped, *unlinked_skipped, *report.get("skipped", [])])
        if relinked:
            report["relinked"] = relinked
    check_shared_folder(ckpt_dir)
    per_node_signal_files()  # before the Trainer: its autoresume uses them
    return ckpt_dir, report


def trim_live_log(live_log: Path, resumed_from_step: int) -> int:
    """Drop the live log's lines past the step a run resumes from (they are trained again); return how many.

    A run killed at step 23 after its last checkpoint at step 20 logged steps 21-23, which the resumed
    run logs again: without this, ``train_log.jsonl`` would hold those steps twice.
    """
    if not live_log.exists():
        return 0
    lines = live_log.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= resumed_from_step]
    if len(kept) != len(lines):
        atomic_write_text(live_log, "".join(kept))
    return len(lines) - len(kept)


def copy_train_log(live_log: Path, dest: Path) -> None:
    """Copy the live training log to ``dest`` (an empty file when there is none) through a temporary file.

    Raises:
        DiskSpaceError: the disk filled up (names ``dest`` and the bytes free; the temporary file is removed).
    """
    tmp = dest.with_name(f".{dest.name}.tmp")
    with naming_full_disk(dest):
        try:
            shutil.copyfile(live_log, tmp) if live_log.exists() else tmp.write_text("")
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def prune_checkpoints(ckpt_dir: str | Path, keep: int) -> None:
    """Delete all but the ``keep`` newest checkpoint files (all of them when ``keep`` is 0), by mtime,
    as Composer's ``save_num_checkpoints_to_keep`` does during training."""
    ckpts = sorted(glob.glob(str(Path(ckpt_dir) / CHECKPOINT_GLOB)), key=os.path.getmtime)
    for path in ckpts[:-keep] if keep else ckpts:
        os.unlink(path)


def save_optimizer_by_name(optimizer, model, path: Path) -> None:
    """Write ``optimizer``'s per-parameter state keyed by parameter name (tensors moved to the CPU), atomically.

    Raises:
        DiskSpaceError: the disk filled up (names ``path`` and the bytes free; the temporary file is removed).
    """
    names = {id(p): n for n, p in model.named_parameters()}
    state = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p in optimizer.state:
                state[names[id(p)]] = {k: (v.detach().cpu() if torch.is_tensor(v) else v)
                                       for k, v in optimizer.state[p].items()}
    tmp = path.with_suffix(".tmp")
    with naming_full_disk(path):
        try:
            torch.save(state, tmp)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def load_optimizer_by_name(optimizer, model, path: Path) -> int:
    """Load a :func:`save_optimizer_by_name` file into ``optimizer`` for the trainable parameters it names.

    The file is read with :func:`safe_load` (it holds tensors and numbers only).

    Returns:
        The number of parameters whose state was loaded.

    Raises:
        UnsafeStateError: the file holds more than tensors and plain data (a file planted in a shared
            scratch folder); one line naming it, nothing loaded (a ``pickle.UnpicklingError``).
    """
    try:
        saved = safe_load(path)
    except pickle.UnpicklingError as e:
        raise UnsafeStateError(
            f"{path}: phase 1's optimizer state holds more than tensors and plain data ({refused_what(e)}), so it "
            "was not loaded; it is not what phase 1 writes: remove it and rerun phase 1, or set "
            "pretraining.decay.load_optimizer_state: false") from None
    n = 0
    for name, p in model.named_parameters():
        if p.requires_grad and name in saved:
            optimizer.state[p] = {k: (v.to(p.device) if torch.is_tensor(v) else v) for k, v in saved[name].items()}
            n += 1
    return n


def restore_optimizer_state(trainer, model, optimizer_state: str | None) -> int:
    """Step: load phase 1's optimizer state by parameter name into a fresh (not resumed) trainer.

    Returns:
        The number of parameters whose state was loaded (0 when none was asked for or the run resumed).

    Raises:
        FileNotFoundError: the state file is gone.
        UnsafeStateError: the file holds more than tensors and plain data (:func:`load_optimizer_by_name`).
    """
    if not optimizer_state or int(trainer.state.timestamp.batch.value):
        return 0
    if not Path(optimizer_state).exists():
        raise FileNotFoundError(f"{optimizer_state}: phase 1's optimizer state is gone (checkpoint_root pruned?); "
                                "rerun phase 1 or set load_optimizer_state: false")
    return load_optimizer_by_name(trainer.state.optimizers[0], model, Path(optimizer_state))


def disk_full_message(ckpt_dir: Path, what: str, removed: list[str] | None = None) -> str:
    """One line for a full disk during a checkpoint save: the folder, its free bytes, the bytes
    one more checkpoint needs (the size of the newest finished one), or that it is unknown, and the
    cut-short files removed (``removed``)."""
    free = shutil.disk_usage(ckpt_dir).free
    done = [p for p in ckpt_dir.glob(CHECKPOINT_GLOB) if p.stat().st_size > 0]
    need = max((p.stat().st_size for p in done), default=None)
    need_text = (f"one checkpoint takes {need:,} bytes (the newest finished one)" if need
                 else "no finished checkpoint tells the size one takes")
    cut = f"; removed the cut-short {', '.join(removed)}" if removed else ""
    return (f"{ckpt_dir}: no space left on device while {what} saved a checkpoint ({free:,} bytes free; "
            f"{need_text}{cut}); free space there (or set pretraining.checkpoint_root to a larger disk: a new "
            f"folder restarts the phase) and rerun: the phase resumes from its last finished checkpoint")


def checkpoint_space_error(ckpt_dir: Path, what: str) -> CheckpointSpaceError:
    """The error for a save that filled the disk, after removing the files that save cut short (they stand
    under their final names: :func:`drop_unfinished_checkpoints`); ``what`` names the phase (``variant/phase``)."""
    cut = drop_unfinished_checkpoints(ckpt_dir)
    return CheckpointSpaceError(disk_full_message(ckpt_dir, what, cut), ckpt_dir)
