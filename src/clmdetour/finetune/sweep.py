"""Learning-rate sweep: one grid for every model, the point chosen per (model, task) on mean dev over seeds.

The field tunes the fine-tuning learning rate per task and model (ModernBERT's
GLUE protocol sweeps it per task; BERT's paper chose it on dev from
{5e-5, 3e-5, 2e-5}; DrBenchmark fixes one). Here every model, ``random-init``
included, gets the same grid (``evaluation.lr_grid``, or a task's
``tasks.{task}.finetune.lr_grid``: :class:`clmdetour.settings.TaskFinetuneSettings`, which refuses a grid
that is not strictly increasing); each seed is trained at every grid point,
and the point with the best dev score averaged over the seeds is chosen. The
test score reported is the one at that point, so the test split never takes
part in the choice.

Grid points whose mean dev score is within ``tolerance`` of the best are
ties; a tie is broken toward the middle of the grid (then toward the higher
mean, then the lower index), so that a flat curve does not push the choice
to an end of the grid, where a narrower grid would have decided the result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clmdetour.settings import check_lr_grid


@dataclass(frozen=True)
class SweepChoice:
    """The chosen grid point.

    Attributes:
        index: position of the chosen learning rate in the grid.
        lr: the chosen learning rate (peak lr of the schedule).
        dev_mean: mean dev score over seeds at each grid point (task metric,
            fraction in [0, 1]; NaN where no seed has a score).
        ties: indices whose mean is within the tolerance of the best.
        flat: True when every grid point is within the tolerance of the best
            (the curve cannot tell learning rates apart).
    """

    index: int
    lr: float
    dev_mean: list[float]
    ties: list[int]
    flat: bool


def mean_dev_over_seeds(dev: Mapping[int, Sequence[float]], n_points: int) -> list[float]:
    """Mean dev score of each grid point over seeds.

    Args:
        dev: ``{seed: [dev score at grid point 0, 1, ...]}`` (fractions); a seed
            enters only if it has a score for every point, so every point is
            averaged over the same seeds.
        n_points: grid length.

    Returns:
        ``n_points`` means (NaN when no seed qualifies).
    """
    rows = [list(v) for v in dev.values() if len(v) == n_points and all(x is not None and not math.isnan(x) for x in v)]
    if not rows:
        return [math.nan] * n_points
    return [sum(r[i] for r in rows) / len(rows) for i in range(n_points)]


def choose_lr(grid: Sequence[float], dev: Mapping[int, Sequence[float]], tolerance: float) -> SweepChoice:
    """Choose the learning rate on the mean dev score over seeds.

    Args:
        grid: learning rates, in increasing order (the order defines "middle").
        dev: ``{seed: [dev score at each grid point]}`` (fractions in [0, 1]).
        tolerance: scores within this of the best mean are ties (fraction units,
            ``evaluation.tie_tolerance``); ties go to the point nearest the
            grid's middle index ``(len(grid) - 1) / 2``, then to the higher
            mean, then to the lower index.

    Returns:
        A :class:`SweepChoice`.

    Raises:
        ValueError: an empty grid, one that is not strictly increasing
            (:func:`clmdetour.settings.check_lr_grid`'s ConfigError), a negative tolerance, or no seed
            with a dev score at every grid point.
    """
    grid = [float(x) for x in grid]
    check_lr_grid(grid, "lr grid")  # ConfigError (a ValueError)
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    means = mean_dev_over_seeds(dev, len(grid))
    if any(math.isnan(m) for m in means):
        raise ValueError("no seed has a dev score at every grid point")
    best = max(means)
    ties = [i for i, m in enumerate(means) if m >= best - tolerance]
    middle = (len(grid) - 1) / 2
    index = min(ties, key=lambda i: (abs(i - middle), -means[i], i))
    return SweepChoice(index=index, lr=grid[index], dev_mean=means, ties=ties, flat=len(ties) == len(grid))
