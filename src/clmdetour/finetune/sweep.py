"""Learning-rate sweep: one grid for every model, the point chosen per (model, task) on mean dev over seeds.

The field tunes the fine-tuning learning rate per task and model (ModernBERT's
GLUE protocol sweeps it per task; BERT's paper chose it on dev from
{5e-5, 3e-5, 2e-5}; DrBenchmark fixes one). Here every model, ``random-init``
included, gets the same grid (``evaluation.lr_grid``, or a task's
``tasks.{task}.finetune.lr_grid``); each seed is trained at every grid point,
and the point with the best dev score averaged over the seeds is chosen. The
test score reported is the one at that point, so the test split never takes
part in the choice.

Grid points whose mean dev score is within ``tolerance`` of the best are
ties; a tie is broken toward the middle of the grid (then toward the higher
mean, then the lower index), so that a flat curve does not push the choice
to an end of the grid, where a narrower grid would have decided the result.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clmdetour.errors import InputError


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
        ValueError: an empty or unsorted grid, a negative tolerance, or no seed
            with a dev score at every grid point.
    """
    grid = [float(x) for x in grid]
    if not grid:
        raise ValueError("lr grid is empty")
    if any(b <= a for a, b in itertools.pairwise(grid)):
        raise ValueError(f"lr grid must be strictly increasing, got {grid}")
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


def lr_grid_of(task_params: dict) -> list[float]:
    """The learning-rate grid of one fine-tuning job: ``task_params["finetune"]["lr_grid"]``.

    :func:`clmdetour.evaluation.grid.finetune_task_params` resolves it from the
    task's ``finetune.lr_grid`` or ``evaluation.lr_grid``.

    Raises:
        ValueError: the grid is missing, empty or not strictly increasing.
    """
    try:
        grid = task_params["finetune"]["lr_grid"]
    except KeyError:
        grid = None
    if not grid:
        raise InputError("finetune.lr_grid: missing or empty (set evaluation.lr_grid or tasks.{task}.finetune.lr_grid)")
    grid = [float(x) for x in grid]
    if any(b <= a for a, b in itertools.pairwise(grid)):
        raise InputError(f"finetune.lr_grid must be strictly increasing, got {grid}")
    return grid
