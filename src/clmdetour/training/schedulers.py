"""Learning-rate schedules in tokens, as Composer schedulers.

Composer's scheduler protocol: a callable ``(state, ssr=1.0) -> float`` giving
the multiplier of the optimizer's peak lr at ``state.timestamp``. Both
schedules here are pure functions of the tokens seen, so they are testable
without a Trainer (``multiplier_at(tokens)``).

* phase 1: linear warm-up over ``warmup_tokens``, then the constant peak
  (Composer's own ``ConstantWithWarmupScheduler`` would do too; tokens are
  used here so the warm-up length does not depend on the batch size);
* decay: ``lr(t) = peak x (f + (1 - f) x (1 - sqrt(t / T)))`` with ``f`` the
  final fraction (0.1): the "1-sqrt" cooldown of Hägele et al. 2024 ("Scaling
  Laws and Compute-Optimal Training Beyond Fixed Training Durations"), as in
  the cpt-fr-base card. At t = T/2 it gives 0.1 + 0.9 x (1 - 0.7071) = 0.3636.
"""

from __future__ import annotations

import math

from composer.core import State, TimeUnit


def _tokens(state: State) -> int:
    return int(state.timestamp.get(TimeUnit.TOKEN).value)


class WarmupConstantScheduler:
    """Linear warm-up from 0 to the peak over ``warmup_tokens``, then constant.

    Args:
        warmup_tokens: warm-up length in tokens (0 = start at the peak).
    """

    def __init__(self, warmup_tokens: int):
        if warmup_tokens < 0:
            raise ValueError(f"warmup_tokens must be >= 0, got {warmup_tokens}")
        self.warmup_tokens = warmup_tokens

    def multiplier_at(self, tokens: int) -> float:
        """lr multiplier after ``tokens`` tokens."""
        if self.warmup_tokens == 0 or tokens >= self.warmup_tokens:
            return 1.0
        return tokens / self.warmup_tokens

    def __call__(self, state: State, ssr: float = 1.0) -> float:
        return self.multiplier_at(_tokens(state))


class OneMinusSqrtDecayScheduler:
    """``f + (1 - f) x (1 - sqrt(t / T))``, clamped to ``f`` after T.

    Args:
        total_tokens: decay length T in tokens.
        final_fraction: f, the lr at T as a fraction of the peak (paper: 0.1).
    """

    def __init__(self, total_tokens: int, final_fraction: float = 0.1):
        if total_tokens <= 0:
            raise ValueError(f"total_tokens must be positive, got {total_tokens}")
        if not 0.0 <= final_fraction <= 1.0:
            raise ValueError(f"final_fraction must be in [0, 1], got {final_fraction}")
        self.total_tokens = total_tokens
        self.final_fraction = final_fraction

    def multiplier_at(self, tokens: int) -> float:
        """lr multiplier after ``tokens`` tokens."""
        frac = min(max(tokens / self.total_tokens, 0.0), 1.0)
        return self.final_fraction + (1.0 - self.final_fraction) * (1.0 - math.sqrt(frac))

    def __call__(self, state: State, ssr: float = 1.0) -> float:
        return self.multiplier_at(_tokens(state))


def make_scheduler(section):
    """The schedule of a phase (a :class:`clmdetour.settings.PhaseSettings`): phase 1 warms up linearly
    over ``warmup_tokens`` then holds the peak; the decay follows 1-sqrt down to ``final_lr_fraction``."""
    if section.phase == "decay":
        return OneMinusSqrtDecayScheduler(section.tokens, section.final_lr_fraction)
    return WarmupConstantScheduler(section.warmup_tokens)
