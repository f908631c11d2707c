"""Statistics of the results table: per-task tests against the baseline, the sign test across tasks.

Per task, a model's seed scores (fractions in [0, 1]) against the baseline's:

- Welch's two-sided t-test (unequal variances;
  ``scipy.stats.ttest_ind(equal_var=False)``), :func:`welch_p`;
- the paired two-sided t-test, the two samples paired by fine-tuning seed
  (``scipy.stats.ttest_rel``), :func:`paired_p`;
- Wilcoxon's two-sided signed-rank test on the same pairs
  (``scipy.stats.wilcoxon``), :func:`wilcoxon_p`, only from
  :data:`WILCOXON_MIN_N` non-zero differences on (with 5 the smallest
  two-sided p is 2/2**5 = 0.0625, at n = 3 it is 0.25: the test could
  never reject at 0.05);
- the minimum detectable difference of a two-sided two-sample t-test,
  :func:`min_detectable_difference`.

A test is undefined (NaN, never a number) when its variance estimate is 0:
a sample, or the per-seed differences, are *constant* when their sample
standard deviation (ddof=1) is below :data:`CONSTANT_TOL` = 1e-12 (fraction
units). Float arithmetic leaves such noise: the variance of three 0.4s is
9.2e-33, not 0, and a test fed with it returns p = 1.5e-31.

Across tasks, :func:`sign_test`: the one-sided exact sign test that the model
beats the baseline more often than chance, ``scipy.stats.binomtest(wins,
wins + losses, 0.5, alternative="greater")``; a difference with
|Δ| < ``tie_tolerance`` (``evaluation.tie_tolerance``, fraction units) is a
tie, dropped and counted. 8 wins out of 8 give p = 0.5**8 = 0.0039 (the
paper's "p = 0.004"); 7 of 8 give 9/256 = 0.035.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONSTANT_TOL = 1e-12
WILCOXON_MIN_N = 6


def _floats(x: Sequence[float], name: str) -> np.ndarray:
    arr = np.asarray([float(v) for v in x], dtype=np.float64)
    if np.isnan(arr).any():
        raise ValueError(f"{name} holds NaN; pass only the seeds that have a score")
    return arr


def is_constant(x: Sequence[float], tol: float = CONSTANT_TOL) -> bool:
    """True when the sample standard deviation (ddof=1) of ``x`` is below ``tol`` (or ``x`` has < 2 values)."""
    arr = np.asarray(x, dtype=np.float64)
    return arr.size < 2 or float(np.std(arr, ddof=1)) < tol


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of Welch's t-test between two samples of seed scores.

    Args:
        a, b: seed scores of the two models (any lengths).

    Returns:
        The p-value (``scipy.stats.ttest_ind(a, b, equal_var=False)``), or NaN
        when either sample has fewer than 2 values or both are constant within
        :data:`CONSTANT_TOL` (the test is undefined).

    Raises:
        ValueError: a score is NaN.
    """
    from scipy.stats import ttest_ind

    a, b = _floats(a, "a"), _floats(b, "b")
    if a.size < 2 or b.size < 2:
        return math.nan
    if is_constant(a) and is_constant(b):
        return math.nan
    with warnings.catch_warnings():  # one constant sample: scipy warns of cancellation in its ~0 variance, harmlessly
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        return float(ttest_ind(a, b, equal_var=False).pvalue)


def _differences(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    a, b = _floats(a, "a"), _floats(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.size} vs {b.size} (pair them by seed first)")
    return a - b


def paired_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test, ``a[i]`` paired with ``b[i]`` (the same seed).

    Args:
        a, b: seed scores of the two models, in the same seed order.

    Returns:
        ``scipy.stats.ttest_rel(a, b).pvalue``, or NaN with fewer than 2 pairs
        or when the differences ``a - b`` are constant within :data:`CONSTANT_TOL`
        (zero standard error: undefined, whatever their mean).

    Raises:
        ValueError: different lengths or a NaN score.
    """
    from scipy.stats import ttest_rel

    d = _differences(a, b)
    if d.size < 2 or is_constant(d):
        return math.nan
    return float(ttest_rel(a, b).pvalue)


def wilcoxon_p(a: Sequence[float], b: Sequence[float], min_n: int = WILCOXON_MIN_N) -> float:
    """Two-sided p-value of Wilcoxon's signed-rank test on paired seed scores.

    A difference with |a[i] - b[i]| < :data:`CONSTANT_TOL` is a zero and is
    dropped (``zero_method="wilcox"``); scipy picks the exact null
    distribution for small samples without ties (``method="auto"``).

    Args:
        a, b: seed scores of the two models, in the same seed order.
        min_n: fewest non-zero differences for a p-value (default 6: with 5 the
            smallest attainable two-sided p is 0.0625).

    Returns:
        ``scipy.stats.wilcoxon(d).pvalue`` over the non-zero differences ``d``,
        or NaN with fewer than ``min_n`` of them.

    Raises:
        ValueError: different lengths or a NaN score.
    """
    from scipy.stats import wilcoxon

    d = _differences(a, b)
    d = d[np.abs(d) >= CONSTANT_TOL]
    if d.size < min_n:
        return math.nan
    return float(wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)


def pooled_std(a: Sequence[float], b: Sequence[float]) -> float:
    """Pooled sample standard deviation s_p = sqrt(((n_a-1) s_a² + (n_b-1) s_b²) / (n_a + n_b - 2)).

    Returns NaN when either sample has fewer than 2 values.
    """
    a, b = _floats(a, "a"), _floats(b, "b")
    if a.size < 2 or b.size < 2:
        return math.nan
    ss = (a.size - 1) * np.var(a, ddof=1) + (b.size - 1) * np.var(b, ddof=1)
    return float(math.sqrt(ss / (a.size + b.size - 2)))


def min_detectable_difference(a: Sequence[float], b: Sequence[float], alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true difference of means a two-sided two-sample t-test detects with ``power`` at level ``alpha``.

    MDD = (t(1 - α/2, df) + t(power, df)) · s_p · sqrt(1/n_a + 1/n_b), df = n_a + n_b - 2,
    with s_p from :func:`pooled_std`; with n seeds per model this is
    (t(1 - α/2, 2n-2) + t(power, 2n-2)) · s_p · sqrt(2/n), the usual power
    approximation of the two-sample t-test (Zar, *Biostatistical Analysis*,
    the minimum detectable difference of the two-sample t-test; it neglects
    the non-centrality of the t distribution under the alternative). ``t(q, df)`` is
    ``scipy.stats.t.ppf(q, df)``. Units: those of the scores (fractions).

    Args:
        a, b: seed scores of the model and of the baseline.
        alpha: two-sided significance level (0 < alpha < 1).
        power: probability of detecting the difference (0 < power < 1).

    Returns:
        The MDD, or NaN when either sample has fewer than 2 values or
        s_p < :data:`CONSTANT_TOL` (no spread was measured: the MDD is unknown, not 0).

    Raises:
        ValueError: ``alpha`` or ``power`` outside (0, 1), or a NaN score.
    """
    from scipy.stats import t as student_t

    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha {alpha!r} and power {power!r} must both lie in (0, 1)")
    sp = pooled_std(a, b)
    if math.isnan(sp) or sp < CONSTANT_TOL:
        return math.nan
    na, nb = len(a), len(b)
    df = na + nb - 2
    factor = float(student_t.ppf(1 - alpha / 2, df) + student_t.ppf(power, df))
    return factor * sp * math.sqrt(1 / na + 1 / nb)


@dataclass(frozen=True)
class SignTest:
    """Outcome of the sign test: wins, losses, ties (dropped) and the one-sided p-value."""

    wins: int
    losses: int
    ties: int
    p: float


def sign_test(deltas: Sequence[float], tie_tolerance: float = 0.0) -> SignTest:
    """One-sided exact sign test that a model beats the baseline across tasks (or task groups).

    Args:
        deltas: per task, model mean minus baseline mean (fraction units); NaN
            entries (missing tasks) are skipped.
        tie_tolerance: a difference with |Δ| < ``tie_tolerance`` (or exactly 0)
            is a tie (``evaluation.tie_tolerance``, default 0.0005 = 0.05 points).

    Returns:
        :class:`SignTest`; ``p`` = ``binomtest(wins, wins + losses, 0.5,
        alternative="greater")``, NaN when every entry is a tie or missing.

    Raises:
        ValueError: a negative ``tie_tolerance``.
    """
    from scipy.stats import binomtest

    if tie_tolerance < 0 or math.isnan(tie_tolerance):
        raise ValueError(f"tie_tolerance must be >= 0, got {tie_tolerance!r}")
    valid = [float(d) for d in deltas if not math.isnan(d)]
    decided = [d for d in valid if d != 0 and abs(d) >= tie_tolerance]
    wins = sum(d > 0 for d in decided)
    losses = len(decided) - wins
    ties = len(valid) - len(decided)
    n = wins + losses
    p = float(binomtest(wins, n, 0.5, alternative="greater").pvalue) if n else math.nan
    return SignTest(wins, losses, ties, p)
