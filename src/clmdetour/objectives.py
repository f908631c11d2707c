"""The pretraining objectives, one entry each: everything that differs between CLM and MLM.

A phase names its objective in config (``pretraining.{phase}.objective`` or a
variant's); every module that needs to know what that objective implies asks
this registry, never compares the name itself:

- ``causal``: the attention mode of the encoder during the phase (CLM: a
  causal mask on every layer, global and sliding-window; MLM: bidirectional);
- ``settings``: the objective's own settings, a frozen dataclass of the phase-section keys it owns
  (:class:`MLMSettings`: ``masking_rate``; CLM owns none), built from the resolved section by
  :meth:`Objective.settings_of`; its collator is built from it and nothing else;
- ``collator``: the name of the batch collator class that builds the labels
  (:mod:`clmdetour.training.collators`, whose ``make_collator`` builds it from the objective's settings);
  the loss itself is the same for both (cross-entropy of the labelled positions through the MLM head,
  :func:`clmdetour.modeling.loss.chunked_lm_loss`);
- :meth:`Objective.predicted_fraction`: the fraction of positions that carry a
  label (its settings' :meth:`ObjectiveSettings.labelled_fraction`), which scales the MLM-head FLOPs of the
  MFU estimate;
- :meth:`Objective.card_text`: the model card's "Objective" row;
- ``plot_style``: the line style of the variant's curves in the analysis plots.

Adding an objective is one :class:`Objective` entry in :data:`OBJECTIVES` with its settings class
(plus its collator); the config schema's enum is checked against this registry by the test suite, and
:data:`OBJECTIVE_KEYS` (every key some objective owns) is what :class:`clmdetour.settings.PhaseSettings`
accepts besides its own fields.

This module imports nothing but :mod:`clmdetour.errors` (a floor-1 module of
docs/extending.md), so the config checks, the analysis, the card and the
Snakefile can use it without torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clmdetour.errors import InputError


@dataclass(frozen=True)
class ObjectiveSettings:
    """An objective's own settings: one field per phase-section key it owns (this base owns none: CLM).

    A subclass adds its keys as fields (their defaults live in the schema, not here) and says what
    fraction of positions its collator labels.
    """

    @classmethod
    def owned_keys(cls) -> tuple[str, ...]:
        """The phase-section keys this objective owns (its fields, in order)."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_section(cls, section: Mapping, where: str = "phase section") -> ObjectiveSettings:
        """The settings from a resolved phase section (a mapping that holds at least :meth:`owned_keys`).

        Raises:
            InputError: a key this objective owns is missing (naming ``where`` and the key).
        """
        missing = [k for k in cls.owned_keys() if k not in section]
        if missing:
            raise InputError(f"{where}: missing key(s) {missing} (the schema fills them: was the config validated?)")
        return cls(**{k: section[k] for k in cls.owned_keys()})

    def labelled_fraction(self) -> float:
        """Fraction of positions that carry a label (every position: 1.0)."""
        return 1.0


@dataclass(frozen=True)
class MLMSettings(ObjectiveSettings):
    """MLM's own settings: ``masking_rate``, the fraction of non-special tokens selected (80/10/10
    mask/random/keep; Devlin et al. 2019), in (0, 1); the schema gives 0.15 (the paper) or 0.3 (a base
    model built by the pipeline, ModernBERT's)."""

    masking_rate: float

    def labelled_fraction(self) -> float:
        """Fraction of positions labelled: the masking rate."""
        return float(self.masking_rate)


@dataclass(frozen=True)
class Objective:
    """One pretraining objective.

    Attributes:
        name: the config's ``objective`` value.
        causal: True when the encoder attends causally during the phase.
        collator: the name of its collator class in :mod:`clmdetour.training.collators`, built by
            ``from_settings(settings, tokenizer, seed)``, whose ``__call__(rows)`` returns ``input_ids``,
            ``attention_mask`` and ``labels`` (``LongTensor[B, L]``, -100 where unlabelled).
        settings: its :class:`ObjectiveSettings` class (the phase-section keys it owns).
        describe: ``(section, attention implementation) -> card text``.
        plot_style: matplotlib line keywords for the variant's curves.
        causality_check: True when the phase proves causality on its first batch.
    """

    name: str
    causal: bool
    collator: str
    settings: type[ObjectiveSettings]
    describe: Callable[[Mapping, str], str]
    plot_style: Mapping[str, Any] = field(default_factory=dict)

    @property
    def causality_check(self) -> bool:
        return self.causal

    def settings_of(self, section: Mapping, where: str = "phase section") -> ObjectiveSettings:
        """This objective's settings from a resolved phase section (:meth:`ObjectiveSettings.from_section`).

        Raises:
            InputError: a key it owns is missing.
        """
        return self.settings.from_section(section, where)

    def predicted_fraction(self, section: Mapping) -> float:
        """Fraction of positions whose MLM-head logits are computed, for a resolved phase section (1.0 for CLM,
        the masking rate for MLM: :meth:`ObjectiveSettings.labelled_fraction`).

        Raises:
            InputError: a key the objective owns is missing from ``section``.
        """
        return self.settings_of(section).labelled_fraction()

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
        Objective("clm", causal=True, collator="CLMCollator", settings=ObjectiveSettings,
                  describe=_clm_text, plot_style={}),
        Objective("mlm", causal=False, collator="MLMCollator", settings=MLMSettings,
                  describe=_mlm_text, plot_style={"linestyle": ":", "linewidth": 2.0}),
    )
}

#: Every phase-section key some objective owns (a phase section holds them all: the schema fills them).
OBJECTIVE_KEYS: tuple[str, ...] = tuple(dict.fromkeys(k for o in OBJECTIVES.values() for k in o.settings.owned_keys()))

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
