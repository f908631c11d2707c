"""Composer callbacks: the phase's JSONL training log with throughput and MFU, the stop on a
non-finite loss, and the stop on a loss that explodes while staying finite."""

from __future__ import annotations

import json
import math
import os
import time

import torch
from composer.core import Callback, State, TimeUnit
from composer.loggers import Logger
from composer.utils import dist

from clmdetour.errors import ExpectedError


class NonFiniteLossError(ExpectedError, FloatingPointError):
    """A phase's training loss became NaN or infinite (training diverged); the message names the phase,
    the step, the value and the config keys to look at."""


def step_loss(state: State) -> float:
    """The loss of the step that just ended, in nats per labelled token: Composer's total over the step's
    micro-batches, averaged over ranks (``state.total_loss_dict``: already a host float, so reading it costs
    no device sync); ``state.loss`` (summed when a dict) when Composer kept no total."""
    total = (getattr(state, "total_loss_dict", None) or {}).get("loss/train/total")
    loss = total if total is not None else state.loss
    if isinstance(loss, dict):
        loss = sum(loss.values())
    return float(loss.detach().float().cpu()) if isinstance(loss, torch.Tensor) else float(loss)


class StopOnNonFiniteLoss(Callback):
    """Stop a phase at the first step whose training loss is NaN or infinite.

    Checked after every step (``batch_end``) on :func:`step_loss`, which Composer has already all-reduced
    and moved to the host for its own logging: the check adds no host sync on GPU, and every rank sees the
    same value, so all stop at the same step. ``batch_end`` comes before Composer's ``batch_checkpoint``,
    so the diverged step is never saved, the checkpoints of earlier steps are kept, and the phase writes
    nothing to its output folder (the error leaves ``run_phase`` before its outputs). Register it before
    :class:`TrainLog`, so no line holding NaN reaches the live log. The phase computes no gradient norm (it
    clips none), so there is none to check.

    Args:
        what: the phase in messages (``variant/phase``).
        phase: ``phase1`` or ``decay`` (names its config keys).
        variant: the variant (names its config keys).
        ckpt_dir: the phase's checkpoint folder (named in the message).

    Raises:
        NonFiniteLossError: from ``batch_end``, naming the step, the value and the keys to look at.
    """

    def __init__(self, what: str, phase: str, variant: str, ckpt_dir: str):
        self.what, self.phase, self.variant, self.ckpt_dir = what, phase, variant, ckpt_dir

    def batch_end(self, state: State, logger: Logger) -> None:
        loss = step_loss(state)
        if math.isfinite(loss):
            return
        step = int(state.timestamp.batch.value)
        raise NonFiniteLossError(
            f"{self.what}: training diverged: the loss is {loss} at step {step} (not a finite number); the phase "
            f"stopped there, before that step's checkpoint and without writing its model (the checkpoints of "
            f"earlier steps are kept in {self.ckpt_dir}). Lower the learning rate (pretraining.optimizer.lr, or "
            f"the lr of pretraining.{self.phase} / pretraining.variants.{self.variant}.{self.phase} where set; "
            f"base_model.build.lr for a built base model), lengthen the warm-up (pretraining.{self.phase}.warmup_tokens), or check "
            f"pretraining.precision and pretraining.optimizer.eps; a changed value starts the phase afresh")


class DivergenceError(ExpectedError, FloatingPointError):
    """A phase's loss exploded while staying finite (training diverged); the message names the phase, the
    step, the loss, the best loss and the keys to look at."""


#: Steps over which the training loss is averaged before the divergence guard compares it.
TRAIN_WINDOW = 10
#: A loss counts as exploded only when it also lies this many nats above its best: near zero (a small corpus
#: memorised, 0.003 -> 0.012) a ratio alone trips on noise; an exploding run climbs by whole nats (8 -> 50).
MIN_RISE_NATS = 1.0


class DivergenceGuard(Callback):
    """Stop a phase whose loss explodes but stays finite (``pretraining.divergence``).

    - **Held-out loss**: at the fit's start and every ``interval`` steps (``heldout_evals`` evaluations spread
      over the phase), ``heldout()`` (:meth:`clmdetour.training.phase.HeldOut.loss`, every rank on the same
      rows, so all decide alike); the phase stops when it exceeds ``heldout_ratio`` x its best so far, and by
      more than :data:`MIN_RISE_NATS`, for ``patience`` evaluations in a row.
    - **Training loss**: its mean over the last :data:`TRAIN_WINDOW` steps (:func:`step_loss`, already
      all-reduced); the phase stops when it exceeds ``train_ratio`` x its lowest such mean, and by more than
      :data:`MIN_RISE_NATS`, for ``patience`` steps in a row.

    Checked in ``batch_end``, before Composer's ``batch_checkpoint``: the step that trips it is never saved,
    and nothing downstream runs (the phase writes no output). ``history`` keeps ``(step, held-out loss)``.

    Raises:
        DivergenceError: from ``batch_end`` (or ``fit_start`` never: the start only sets the baseline).
    """

    def __init__(self, what: str, phase: str, variant: str, ckpt_dir: str, heldout, settings, total_steps: int):
        self.what, self.phase, self.variant, self.ckpt_dir = what, phase, variant, ckpt_dir
        self.heldout, self.settings = heldout, settings
        evals = settings.heldout_evals
        self.interval = max(1, total_steps // evals) if evals and heldout is not None else 0
        self.history: list[tuple[int, float]] = []
        self.best_heldout = math.inf
        self.heldout_strikes = self.train_strikes = 0
        self.window: list[float] = []
        self.best_train = math.inf

    @staticmethod
    def history_of(trainer) -> list:
        """``[[step, held-out loss], ...]`` the guard of ``trainer`` measured in this run (a resumed run starts at
        its resume step); [] without a guard or a trainer."""
        callbacks = trainer.state.callbacks if trainer is not None else []
        guard = next((c for c in callbacks if isinstance(c, DivergenceGuard)), None)
        return [list(x) for x in guard.history] if guard else []

    def fit_start(self, state: State, logger: Logger) -> None:
        if self.interval:
            self._heldout_check(int(state.timestamp.batch.value))

    def batch_end(self, state: State, logger: Logger) -> None:
        step = int(state.timestamp.batch.value)
        loss = step_loss(state)
        if math.isfinite(loss):  # a NaN is StopOnNonFiniteLoss's, which runs first
            self.window = (self.window + [loss])[-TRAIN_WINDOW:]
            if len(self.window) == TRAIN_WINDOW:
                mean = sum(self.window) / TRAIN_WINDOW
                self.best_train = min(self.best_train, mean)
                over = mean > self.settings.train_ratio * self.best_train and mean - self.best_train > MIN_RISE_NATS
                self.train_strikes = self.train_strikes + 1 if over else 0
                if self.train_strikes >= self.settings.patience:
                    self._stop(step, "training loss (mean of the last 10 steps)", mean, self.best_train, "train_ratio")
        if self.interval and step % self.interval == 0:
            self._heldout_check(step)

    def _heldout_check(self, step: int) -> None:
        loss = float(self.heldout())
        self.history.append((step, round(loss, 6)))
        over = (math.isfinite(self.best_heldout) and loss > self.settings.heldout_ratio * self.best_heldout
                and loss - self.best_heldout > MIN_RISE_NATS)
        self.best_heldout = min(self.best_heldout, loss)
        self.heldout_strikes = self.heldout_strikes + 1 if over else 0
        if self.heldout_strikes >= self.settings.patience:
            self._stop(step, "held-out loss", loss, self.best_heldout, "heldout_ratio")

    def _stop(self, step: int, which: str, loss: float, best: float, key: str) -> None:
        ratio = getattr(self.settings, key)
        raise DivergenceError(
            f"{self.what}: training diverged: {which} {loss:.4g} at step {step} is above {ratio:g} x its best "
            f"so far ({best:.4g}) for {self.settings.patience} checks in a row (pretraining.divergence.{key}, "
            f".patience); the phase stopped before that step's checkpoint and wrote no model (earlier checkpoints "
            f"are kept in {self.ckpt_dir}). Lower the learning rate (pretraining.optimizer.lr, or the lr of "
            f"pretraining.{self.phase} / pretraining.variants.{self.variant}.{self.phase} where set), lengthen "
            f"the warm-up (pretraining.{self.phase}.warmup_tokens); a changed value starts the phase afresh")


class TrainLog(Callback):
    """Append one JSON line every ``interval`` steps to ``path`` (rank 0 only).

    Fields: ``step``, ``tokens`` (seen so far, all ranks), ``loss`` (nats per
    labelled token: mean over the step's micro-batches and over ranks), ``lr``, ``tokens_per_s`` (all ranks, over the interval),
    ``elapsed_s`` and, when ``flops_per_token`` and ``peak_flops`` are known
    (GPU), ``mfu`` = tokens_per_s x flops_per_token / (world_size x peak_flops);
    on CUDA ``peak_memory_gib`` (``torch.cuda.max_memory_reserved`` so far, GiB).
    The first step of a run (which pays for compilation when the encoder is
    compiled) is reported apart: the first line carries ``first_step_s`` and its
    ``tokens_per_s`` counts from the end of that step (steady state).
    The same figures go to Composer's loggers (console / TensorBoard / ...).

    Args:
        path: live log file (appended, so a resumed run continues it).
        interval: steps between lines.
        flops_per_token: training FLOPs per token (``clmdetour.training.flops``), or None.
        peak_flops: peak FLOP/s of one device, or None (CPU).
        total_tokens: the phase budget, for the ETA.
    """

    def __init__(self, path: str, interval: int, flops_per_token: float | None = None,
                 peak_flops: float | None = None, total_tokens: int | None = None):
        self.path = path
        self.interval = interval
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops
        self.total_tokens = total_tokens
        self._t0 = None
        self._tok0 = 0
        self._start = None
        self.first_step_s = None
        self._first_pending = False

    def fit_start(self, state: State, logger: Logger) -> None:
        self._t0 = self._start = time.perf_counter()
        self._tok0 = int(state.timestamp.get(TimeUnit.TOKEN).value)

    def batch_end(self, state: State, logger: Logger) -> None:
        step = int(state.timestamp.batch.value)
        first_tokens = None
        if self.first_step_s is None:  # the first step of this run: its time apart, throughput from its end
            now = time.perf_counter()
            self.first_step_s = round(now - self._start, 3)
            first_tokens = int(state.timestamp.get(TimeUnit.TOKEN).value) - self._tok0
            self._t0, self._tok0 = now, self._tok0 + first_tokens
            self._first_pending = True
        if step % self.interval != 0 and (self.total_tokens is None or
                                          state.timestamp.token.value < self.total_tokens):
            return
        now = time.perf_counter()
        tokens = int(state.timestamp.get(TimeUnit.TOKEN).value)
        if tokens == self._tok0 and first_tokens is not None:  # a line on the first step: nothing steady yet
            tps = first_tokens / max(self.first_step_s, 1e-9)
        else:
            tps = (tokens - self._tok0) / max(now - self._t0, 1e-9)
        self._t0, self._tok0 = now, tokens
        # Composer's total over the batch's micro-batches, averaged over ranks (the same
        # figure for N processes as for 1 process accumulating N micro-batches).
        loss = step_loss(state)
        record = {"step": step, "tokens": tokens, "loss": round(loss, 6),
                  "lr": state.optimizers[0].param_groups[0]["lr"], "tokens_per_s": round(tps, 2),
                  "elapsed_s": round(now - self._start, 3)}
        if self._first_pending:
            record["first_step_s"] = self.first_step_s
            self._first_pending = False
        if torch.cuda.is_available():
            record["peak_memory_gib"] = round(torch.cuda.max_memory_reserved() / 2 ** 30, 3)
        if self.flops_per_token and self.peak_flops:
            record["mfu"] = round(tps * self.flops_per_token / (dist.get_world_size() * self.peak_flops), 5)
        if self.total_tokens:
            record["eta_s"] = round(max(self.total_tokens - tokens, 0) / max(tps, 1e-9), 1)
        logger.log_metrics({f"train/{k}": v for k, v in record.items() if k != "step"})
        if dist.get_global_rank() == 0:
            from clmdetour.io import naming_full_disk

            with naming_full_disk(self.path), open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
                os.fsync(f.fileno())
