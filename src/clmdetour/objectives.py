"""The pretraining objectives, one entry each: everything that differs between CLM and MLM.

A phase names its objective in config (``pretraining.{phase}.objective`` or a
variant's); every module that needs to know what that objective implies asks
this registry, never compares the name itself:

- ``causal``: the attention mode of the encoder during the phase (CLM: a
  causal mask on every layer, global and sliding-window; MLM: bidirectional);
- ``collator``: the name of the batch collator class that builds the labels
  (:mod:`clmdetour.training.collators`, whose ``make_collator`` builds it); the loss itself is the same for both
  (cross-entropy of the labelled positions through the MLM head,
  :func:`clmdetour.modeling.loss.chunked_lm_loss`);
- :meth:`Objective.predicted_fraction`: the fraction of positions that carry a
  label, which scales the MLM-head FLOPs of the MFU estimate;
- :meth:`Objective.card_text`: the model card's "Objective" row;
- ``plot_style``: the line style of the variant's curves in the analysis plots.

Adding an objective is one :class:`Objective` entry in :data:`OBJECTIVES`
(plus its collator); the config schema's enum is checked against this
registry by the test suite.

This module imports nothing but :mod:`clmdetour.errors` (a floor-1 module of
docs/extending.md), so the config checks, the analysis, the card and the
Snakefile can use it without torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clmdetour.errors import InputError


@dataclass(frozen=True)
class Objective:
    """One pretraining objective.

    Attributes:
        name: the config's ``objective`` value.
        causal: True when the encoder attends causally during the phase.
        collator: the name of its collator class in :mod:`clmdetour.training.collators`, whose
            ``__call__(rows)`` returns ``input_ids``, ``attention_mask`` and
            ``labels`` (``LongTensor[B, L]``, -100 where unlabelled).
        label_fraction: ``masking rate -> fraction of positions labelled`` (MFU).
        describe: ``(section, attention implementation) -> card text``.
        plot_style: matplotlib line keywords for the variant's curves.
        causality_check: True when the phase proves causality on its first batch.
    """

    name: str
    causal: bool
    collator: str
    label_fraction: Callable[[float], float]
    describe: Callable[[Mapping, str], str]
    plot_style: Mapping[str, Any] = field(default_factory=dict)

    @property
    def causality_check(self) -> bool:
        return self.causal

    def predicted_fraction(self, masking_rate: float) -> float:
        """Fraction of positions whose MLM-head logits are computed (1.0 for CLM, the masking rate for MLM)."""
        return float(self.label_fraction(masking_rate))

    def card_text(self, section: Mapping, implementation: str) -> str:
        """The model card's objective description of a phase trained with this objective."""
        return self.describe(section, implementation)


def _clm_text(section: Mapping, impl: str) -> str:
    return (f"CLM: next-token prediction through the MLM head, causal attention on every layer "
            f"({impl}), no label across a document boundary")


def _mlm_text(section: Mapping, impl: str) -> str:
    rate = section.get("masking_rate")
    rate_text = f", masking rate {100 * float(rate):g} %" if rate is not None else ""
    return f"MLM{rate_text}, bidirectional attention ({impl})"


OBJECTIVES: dict[str, Objective] = {
    o.name: o for o in (
        Objective("clm", causal=True, collator="CLMCollator", label_fraction=lambda rate: 1.0,
                  describe=_clm_text, plot_style={}),
        Objective("mlm", causal=False, collator="MLMCollator", label_fraction=lambda rate: rate,
                  describe=_mlm_text, plot_style={"linestyle": ":", "linewidth": 2.0}),
    )
}

#: The objective of the decay phase and of a base model built by the pipeline (the paper's MLM decay).
DECAY_OBJECTIVE = "mlm"


def get_objective(name: str, where: str = "objective") -> Objective:
    """The registry entry of an objective name.

    Raises:
        InputError: ``name`` is not a registered objective (the message names ``where``).
    """
    try:
        return OBJECTIVES[name]
    except (KeyError, TypeError):
        raise InputError(f"{where}: unknown objective {name!r}; known: {sorted(OBJECTIVES)}") from None
