"""The end-of-phase quality floor: a phase that wrecks its model writes no model (``pretraining.quality_floor``).

The finite-divergence guard (:class:`clmdetour.training.callbacks.DivergenceGuard`) stops a loss that climbs; a
learning rate that is too high can also leave a loss that falls throughout and still ends useless (the demo at
``lr: 0.3``: phase 1 from 8.03 to 6.09 nats, the decay at 5.98). The floor compares the phase's held-out loss at
its end with the **unigram entropy** of the same held-out rows, the loss of the trivial model that predicts every
token by its frequency in those rows (a lower bound on a unigram model fitted elsewhere): a phase whose model does
worse than ``unigram_fraction`` x that entropy stops before its model is written.

Calibration (the demo, 2 CPU cores, 2026-12-07): the held-out rows' unigram entropy is 5.38 nats; at the default
learning rate every decay ends between 1.56 and 2.15 nats (ratio 0.29-0.40); at ``lr: 0.3`` phase 1 ends at 6.09
and the decay at 5.98 (ratio 1.13 and 1.11). A fraction of 1.0 passes the first with a wide margin and stops the second.
The floor is **off by default** (``pretraining.quality_floor.decay`` and ``.phase1``: null) because reduced-size
runs end above it without anything being wrong: the real-input subsets of the tests end their decays at 6.56
and 6.86 nats against unigram entropies of 5.30 and 5.10 (a few steps on a small model), and a freeze ablation
may end phase 1 above it on purpose (``clm-freeze-low`` of the real-input subset: 6.55 against 5.30). Set
``decay: 1.0`` for a run at the paper's scale. A floor relative to the base model's own held-out loss, which
would hold at every scale, is not built yet (issue 65 item 3).
"""

from __future__ import annotations

import math

import numpy as np

from clmdetour.errors import ExpectedError


class QualityFloorError(ExpectedError, RuntimeError):
    """A finished phase's held-out loss is above its floor; the message names the phase, both numbers and the keys."""


def unigram_entropy(rows, column: str = "input_ids") -> float:
    """The entropy (nats per token) of the token frequencies of ``rows`` (a ``datasets.Dataset`` or a list of
    dicts with ``column``: token ids), i.e. the held-out cross-entropy of the unigram model fitted on them.

    Raises:
        ValueError: the rows hold no token.
    """
    ids = [np.asarray(r[column], dtype=np.int64).ravel() for r in rows]
    flat = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    if flat.size == 0:
        raise ValueError("the held-out rows hold no token: no unigram entropy")
    counts = np.bincount(flat)
    p = counts[counts > 0] / flat.size
    return float(-(p * np.log(p)).sum())


def quality_floor_record(loss_end: float, entropy: float, fraction: float | None) -> dict:
    """What ``run.json`` records: ``unigram_entropy`` and ``limit`` (nats per token), ``unigram_fraction``, and
    ``ratio`` (end loss / entropy)."""
    return {"unigram_entropy": round(entropy, 6), "unigram_fraction": fraction,
            "limit": round(fraction * entropy, 6) if fraction is not None else None,
            "ratio": round(loss_end / entropy, 6) if entropy > 0 else None}


def check_quality_floor(loss_end: float, entropy: float, fraction: float | None, what: str, phase: str,
                        variant: str) -> None:
    """Refuse a phase whose held-out loss at its end (nats per labelled token) is not finite or exceeds
    ``fraction`` x ``entropy`` (:func:`unigram_entropy` of the held-out rows); nothing when ``fraction`` is None.

    Raises:
        QualityFloorError: one line naming the phase, the loss, the entropy, the limit and the keys to change.
    """
    if fraction is None:
        return
    limit = fraction * entropy
    if math.isfinite(loss_end) and loss_end <= limit:
        return
    raise QualityFloorError(
        f"{what}: the held-out loss at the phase's end, {loss_end:.4g} nats per token, is above "
        f"{fraction:g} x the unigram entropy of the same held-out rows ({entropy:.4g}: predicting each token by its "
        f"frequency does better), so the phase wrote no model and nothing after it runs "
        f"(pretraining.quality_floor.{phase}). Lower the learning rate (pretraining.optimizer.lr, or the lr "
        f"of pretraining.{phase} / pretraining.variants.{variant}.{phase} where set) or lengthen the warm-up "
        f"(pretraining.{phase}.warmup_tokens); pretraining.quality_floor.{phase}: null turns the floor off")


def phase_quality_floor(loss_end: float, rows, section, variant: str) -> dict | None:
    """Step of :func:`clmdetour.training.phase.run_phase` (rank 0), before any output: the floor of the phase
    (``section.quality_floor``, a :class:`clmdetour.settings.QualityFloorSettings`) checked on the held-out
    ``rows``; the record ``run.json`` keeps, or None when the section has no ``quality_floor``.

    Raises:
        QualityFloorError: the held-out loss at the end is above the floor (nothing is written).
    """
    if section.quality_floor is None:
        return None
    entropy = unigram_entropy(rows)
    fraction = section.quality_floor.fraction(section.phase)
    check_quality_floor(loss_end, entropy, fraction, f"{variant}/{section.phase}", section.phase, variant)
    return quality_floor_record(loss_end, entropy, fraction)
