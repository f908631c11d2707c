"""Save a checkpoint and stop before the SLURM job's time limit, so the retried job resumes.

Signals do not reliably reach the training process through the executor's job
chain (sbatch -> snakemake -> srun -> snakemake -> shell -> launcher ->
trainer), so the training process watches the clock itself:

1. ``time_limit_callbacks(margin_s)`` (called by ``clmdetour.training.cli``)
   reads the job's end time once, with ``squeue -h -j $SLURM_JOB_ID -o %e``,
   when ``SLURM_JOB_ID`` is set;
2. the :class:`SlurmTimeLimit` callback checks after every batch whether the
   next batch would end later than ``end_time - checkpoint_margin_s``; all
   ranks agree on the answer (a MAX all-reduce of the flag);
3. when it would, Composer's own ``CheckpointSaver`` saves a checkpoint at
   that batch (into the phase's ``{checkpoint_root}/{variant}/{phase}/{run_hash}``,
   updating its ``latest-rank{rank}.pt`` link), and the process exits with
   status 75 (``EX_TEMPFAIL`` of sysexits.h: "temporary failure, retry").

Snakemake counts the job as failed and, with ``retries`` in the SLURM profile,
submits it again; the phase then autoresumes from that checkpoint (its first
trained step is the saved step + 1). At most one batch plus the margin of the
job's time is lost. A JSON line per start and per stop is appended to
``time_limit.jsonl`` in the checkpoint folder (job id, step, end time).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import torch
from composer.callbacks import CheckpointSaver
from composer.core import Callback, Event, State
from composer.loggers import Logger
from composer.utils import dist, format_name_with_dist

from clmdetour.errors import InputError

log = logging.getLogger(__name__)

EXIT_TIME_LIMIT = 75
"""Exit status after the time-limit checkpoint: EX_TEMPFAIL (sysexits.h)."""

STOP_RECORD = "time_limit.jsonl"
"""File name, in the checkpoint folder, of the watcher's start / stop records."""

_NO_END_TIME = {"", "N/A", "NONE", "UNKNOWN", "UNLIMITED", "INVALID"}


class TimeLimitError(RuntimeError):
    """The SLURM end time could not be read or parsed."""


def parse_slurm_time(text: str) -> float | None:
    """Unix time (seconds) of a SLURM timestamp as printed by ``squeue -o %e``.

    SLURM prints local time as ``YYYY-MM-DDTHH:MM:SS`` (``SLURM_TIME_FORMAT=standard``,
    which :func:`slurm_job_end_time` sets); it is read in this process's local
    time zone, the one squeue used.

    Returns:
        The time, or None for SLURM's "no end time" words (``N/A``, ``NONE``,
        ``Unknown``, ``UNLIMITED``, empty).

    Raises:
        TimeLimitError: any other text.
    """
    text = text.strip()
    if text.upper() in _NO_END_TIME:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise TimeLimitError(f"squeue end time {text!r} is not a YYYY-MM-DDTHH:MM:SS timestamp") from None


def slurm_job_end_time(job_id: str, squeue: str = "squeue", timeout_s: float = 30.0) -> float | None:
    """The end time (Unix seconds) SLURM has scheduled for ``job_id``: ``squeue -h -j ID -o %e``.

    Args:
        job_id: the SLURM job id (``$SLURM_JOB_ID``).
        squeue: the squeue command (a path in tests).
        timeout_s: seconds to wait for squeue.

    Returns:
        The end time, or None when the job has no time limit.

    Raises:
        TimeLimitError: squeue is missing, fails, times out or prints an unparsable time.
    """
    cmd = [squeue, "-h", "-j", str(job_id), "-o", "%e"]
    env = dict(os.environ, SLURM_TIME_FORMAT="standard")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=timeout_s, env=env).stdout
    except FileNotFoundError:
        raise TimeLimitError(f"{squeue} not found: cannot read the end time of SLURM job {job_id}") from None
    except subprocess.CalledProcessError as e:
        raise TimeLimitError(f"{' '.join(cmd)} failed (status {e.returncode}): {e.stderr.strip()}") from None
    except subprocess.TimeoutExpired:
        raise TimeLimitError(f"{' '.join(cmd)} did not answer within {timeout_s} s") from None
    lines = [line for line in out.splitlines() if line.strip()]
    if len(lines) != 1:
        raise TimeLimitError(f"{' '.join(cmd)} printed {len(lines)} lines, expected one end time: {out!r}")
    return parse_slurm_time(lines[0])


class SaveAndExit(Callback):
    """Base of the callbacks that checkpoint at a step boundary and exit with :data:`EXIT_TIME_LIMIT`.

    A subclass sets ``stop_step`` (in ``batch_end``, agreed by every rank) when the run must stop;
    Composer's ``CheckpointSaver`` then saves at that batch (its ``save_interval`` is extended here),
    and the process exits before the next batch is loaded, so the retried job resumes from that step.

    Args:
        exit_code: exit status after the checkpoint (default :data:`EXIT_TIME_LIMIT`).
        clock: returns the current Unix time in seconds (records; tests pass a fake clock).

    Raises:
        ValueError: (at ``init``) the Trainer has no ``save_folder``, so there is nothing to resume from.
    """

    def __init__(self, exit_code: int = EXIT_TIME_LIMIT, clock: Callable[[], float] = time.time):
        self.exit_code = exit_code
        self.clock = clock
        self.stop_step: int | None = None
        self._saver: CheckpointSaver | None = None
        self._folder: Path | None = None

    def init(self, state: State, logger: Logger) -> None:
        savers = [cb for cb in state.callbacks if isinstance(cb, CheckpointSaver)]
        if not savers:
            raise ValueError(f"{type(self).__name__} needs a Trainer with save_folder (a checkpoint to resume from)")
        self._saver = savers[0]
        self._folder = Path(format_name_with_dist(self._saver.folder, state.run_name))
        interval = self._saver.save_interval

        def save_interval(st: State, event: Event) -> bool:
            periodic = interval(st, event)  # always called: it keeps its own bookkeeping
            return periodic or (event == Event.BATCH_CHECKPOINT and self.stop_step is not None)

        self._saver.save_interval = save_interval

    def agree(self, state: State, stop: bool) -> bool:
        """Whether any rank wants to stop after this batch (a MAX all-reduce of ``stop``)."""
        flag = state.device.tensor_to_device(torch.tensor([1 if stop else 0], dtype=torch.int32))
        dist.all_reduce(flag, reduce_operation="MAX")
        return bool(int(flag.item()))

    def before_dataloader(self, state: State, logger: Logger) -> None:
        # The first event after BATCH_CHECKPOINT, where the saver has just written the checkpoint.
        if self.stop_step is None:
            return
        saved = self._saver.saved_checkpoints if self._saver is not None else []
        self._record({"event": "stop", "step": self.stop_step, "checkpoint": str(saved[-1]) if saved else None,
                      "reason": self.reason()})
        dist.barrier()
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.exit(self.exit_code)

    def reason(self) -> str:
        """Why the run stopped, for the stop record."""
        return "stop"

    def _extra(self) -> dict:
        return {}

    def _record(self, entry: dict) -> None:
        if dist.get_global_rank() != 0 or self._folder is None:
            return
        entry = {**entry, "time": round(self.clock(), 3), **self._extra()}
        self._folder.mkdir(parents=True, exist_ok=True)
        with open(self._folder / STOP_RECORD, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())


#: The signals after which a phase saves at the next step boundary and exits for a retry: SIGTERM
#: (``scancel``, preemption, the time limit's first signal, ``kill``) and SIGUSR1 (what
#: ``sbatch --signal=USR1@<seconds>`` sends ahead of the time limit).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StopOnSignal(SaveAndExit):
    """Checkpoint at the next step boundary and exit (status 75) after SIGTERM or SIGUSR1.

    The handlers (installed when the Trainer is built, in the main thread) only note the signal; after
    each batch every rank reports whether it got one (a MAX all-reduce, so a signal to any rank stops
    all), Composer's ``CheckpointSaver`` saves that step and the process exits with
    :data:`EXIT_TIME_LIMIT`, which the SLURM profile's ``retries`` resubmit; the retry resumes from
    that step, losing at most the batch in flight (without it, up to one ``checkpoint_interval``).
    A signal during the last batch lets the run finish and write its outputs.

    Args:
        signals: the signals to handle (default :data:`STOP_SIGNALS`).
    """

    def __init__(self, signals: tuple = STOP_SIGNALS, exit_code: int = EXIT_TIME_LIMIT,
                 clock: Callable[[], float] = time.time):
        super().__init__(exit_code, clock)
        self.signals = signals
        self.received: int | None = None

    def init(self, state: State, logger: Logger) -> None:
        super().init(state, logger)
        for sig in self.signals:
            signal.signal(sig, self._note)

    def _note(self, signum, frame) -> None:
        if self.received is None:
            self.received = signum
            log.warning("got %s: the phase saves a checkpoint after this step and exits with status %d for a retry",
                        signal.Signals(signum).name, self.exit_code)

    def batch_end(self, state: State, logger: Logger) -> None:
        if self.agree(state, self.received is not None) and self.stop_step is None:
            self.stop_step = int(state.timestamp.batch.value)
            log.warning("saving a checkpoint at step %d after %s and exiting with status %d so that the retried job "
                        "resumes", self.stop_step, signal.Signals(self.received).name if self.received else "a signal "
                        "to another rank", self.exit_code)

    def reason(self) -> str:
        return signal.Signals(self.received).name if self.received else "signal to another rank"

    def _extra(self) -> dict:
        return {"job_id": os.environ["SLURM_JOB_ID"]} if os.environ.get("SLURM_JOB_ID") else {}


class SlurmTimeLimit(SaveAndExit):
    """Checkpoint and exit (status 75) before ``end_time - margin_s``.

    After each batch the callback asks whether one more batch (as long as the
    longest batch so far, seconds) would end after the deadline
    ``end_time - margin_s``; if so on any rank, Composer's ``CheckpointSaver``
    saves at this batch (the callback extends the saver's ``save_interval``)
    and the process exits before the next batch is loaded. If this batch is
    the last of the run, training simply finishes.

    Args:
        end_time: Unix time (seconds) at which SLURM ends the job.
        margin_s: seconds before ``end_time`` by which the checkpoint is written
            (config ``pretraining.checkpoint_margin_s``; it must cover saving the
            checkpoint, about one batch and the process exit).
        job_id: SLURM job id, for the records and messages.
        clock: returns the current Unix time in seconds (tests pass a fake clock).
        exit_code: exit status after the checkpoint (default :data:`EXIT_TIME_LIMIT`).

    Raises:
        ValueError: ``margin_s`` is negative; (at ``init``) the Trainer has no
            ``save_folder``, so there is nothing to resume from.
    """

    def __init__(self, end_time: float, margin_s: float, job_id: str = "", clock: Callable[[], float] = time.time,
                 exit_code: int = EXIT_TIME_LIMIT):
        if margin_s < 0:
            raise InputError(f"pretraining.checkpoint_margin_s must be >= 0 seconds, got {margin_s}")
        super().__init__(exit_code, clock)
        self.end_time = float(end_time)
        self.margin_s = float(margin_s)
        self.deadline = self.end_time - self.margin_s
        self.job_id = str(job_id)
        self._last_time: float | None = None
        self._longest_batch_s = 0.0

    def fit_start(self, state: State, logger: Logger) -> None:
        now = self.clock()
        self._last_time = now
        step = int(state.timestamp.batch.value)
        left = self.deadline - now
        if left <= 0:
            log.warning("SLURM job %s: the checkpoint deadline (end %s minus %.0f s margin) has already passed; "
                        "the run stops after its next batch", self.job_id, _fmt(self.end_time), self.margin_s)
        else:
            log.info("SLURM job %s ends %s: checkpoint and exit by %s (%.0f s from now), starting at step %d",
                     self.job_id, _fmt(self.end_time), _fmt(self.deadline), left, step)
        self._record({"event": "start", "step": step})

    def batch_end(self, state: State, logger: Logger) -> None:
        now = self.clock()
        if self._last_time is not None:
            self._longest_batch_s = max(self._longest_batch_s, now - self._last_time)
        self._last_time = now
        if self.agree(state, now + self._longest_batch_s >= self.deadline) and self.stop_step is None:
            self.stop_step = int(state.timestamp.batch.value)
            log.warning("SLURM job %s ends %s (margin %.0f s): saving a checkpoint at step %d and exiting with "
                        "status %d so that the retried job resumes", self.job_id, _fmt(self.end_time),
                        self.margin_s, self.stop_step, self.exit_code)

    def reason(self) -> str:
        return "time limit"

    def _extra(self) -> dict:
        return {"job_id": self.job_id, "end_time": self.end_time, "margin_s": self.margin_s}


def _fmt(t: float) -> str:
    return datetime.fromtimestamp(t).isoformat(timespec="seconds")


def time_limit_callbacks(margin_s: float, environ: dict | None = None, squeue: str = "squeue") -> list:
    """The callbacks that stop a phase before its SLURM time limit: ``[SlurmTimeLimit]`` or ``[]``.

    Outside a SLURM job (no ``SLURM_JOB_ID``), or for a job without a time
    limit, returns ``[]``. Inside one, reads the job's end time once with
    ``squeue -h -j $SLURM_JOB_ID -o %e``.

    Args:
        margin_s: seconds before the job's end at which to checkpoint and stop (the phase's
            ``checkpoint_margin_s``).
        environ: the environment to read ``SLURM_JOB_ID`` from (default ``os.environ``).
        squeue: the squeue command.

    A job whose end time cannot be read (squeue missing on compute nodes, an
    unexpected format) gets a warning and no watcher: it still resumes from
    its last periodic checkpoint (``checkpoint_interval``).

    Raises:
        ValueError: a negative margin.
    """
    environ = os.environ if environ is None else environ
    job_id = environ.get("SLURM_JOB_ID")
    if not job_id:
        return []
    try:
        end_time = slurm_job_end_time(job_id, squeue=squeue)
    except TimeLimitError as e:
        log.warning("no time-limit checkpoint for SLURM job %s: %s", job_id, e)
        return []
    if end_time is None:
        log.info("SLURM job %s has no time limit: no time-limit checkpoint", job_id)
        return []
    return [SlurmTimeLimit(end_time, margin_s, job_id=job_id)]
