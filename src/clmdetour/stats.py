"""Statistics of the results table: Welch's t-test per task, the sign test across tasks.

- Per task, a model's seed scores against the baseline's: Welch's two-sided
  t-test (unequal variances; ``scipy.stats.ttest_ind(equal_var=False)``).
- Across tasks, the one-sided exact sign test that the model beats the
  baseline more often than chance: ``scipy.stats.binomtest(wins, wins +
  losses, 0.5, alternative="greater")``, ties dropped and counted. 8 wins out
  of 8 gives p = 0.5**8 = 0.0039 (the paper's "p = 0.004"); 7 of 8 gives
  9/256 = 0.035.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of Welch's t-test between two samples of seed scores.

    Returns:
        The p-value, or NaN when either sample has fewer than 2 values or both
        have zero variance (the test is undefined).
    """
    from scipy.stats import ttest_ind

    a, b = [float(x) for x in a], [float(x) for x in b]
    if len(a) < 2 or len(b) < 2:
        return math.nan
    if _var(a) == 0.0 and _var(b) == 0.0:
        return math.nan
    return float(ttest_ind(a, b, equal_var=False).pvalue)


def _var(x: list[float]) -> float:
    m = sum(x) / len(x)
    return sum((v - m) ** 2 for v in x)


@dataclass(frozen=True)
class SignTest:
    """Outcome of the sign test: wins, losses, ties (dropped) and the one-sided p-value."""

    wins: int
    losses: int
    ties: int
    p: float


def sign_test(deltas: Sequence[float]) -> SignTest:
    """One-sided exact sign test that a model beats the baseline across tasks.

    Args:
        deltas: per task, model mean minus baseline mean (NaN entries, i.e.
            missing tasks, are skipped; exact zeros are ties).

    Returns:
        :class:`SignTest`; ``p`` is NaN when every task is a tie or missing.
    """
    from scipy.stats import binomtest

    valid = [d for d in deltas if not math.isnan(d)]
    wins = sum(d > 0 for d in valid)
    losses = sum(d < 0 for d in valid)
    ties = len(valid) - wins - losses
    n = wins + losses
    p = float(binomtest(wins, n, 0.5, alternative="greater").pvalue) if n else math.nan
    return SignTest(wins, losses, ties, p)
