"""The attention back-end a phase trains with, settled on its first batch, and the CLM causality check.

``pretraining.attn_implementation`` names a candidate (:func:`clmdetour.modeling.attention.candidate_implementation`);
before the first step the candidate is checked against sdpa on two rows of the phase's first batch
(:func:`settle_attention`) and kept, or the phase falls back to sdpa, saying why (``run.json``
``attention``). A CLM phase then checks that its forward pass does not leak future tokens
(:func:`check_causal_on_first_batch`).
"""

from __future__ import annotations

import logging

from clmdetour.modeling.attention import choose_attn_implementation, flash_attn_importable, needs_self_check
from clmdetour.modeling.loss import chunked_lm_loss
from clmdetour.objectives import get_objective
from clmdetour.settings import PhaseSettings
from clmdetour.training.precision import autocast

log = logging.getLogger(__name__)


def _first_rows(stream, collator, device) -> dict:
    """The collated first two rows of ``stream`` (one when it holds one) on ``device``."""
    probe = collator([stream[i] for i in range(min(2, len(stream)))])
    return {k: v.to(device) for k, v in probe.items()}


def settle_attention(model, section: PhaseSettings, candidate: str, stream, collator, on_gpu: bool,
                     document_sep_id: int | None):
    """Step: check the candidate back-end on two rows of the first batch and keep it, or fall back to sdpa.

    The check (:func:`clmdetour.modeling.causal.attention_self_check`): loss parity with sdpa within
    :data:`clmdetour.modeling.attention.PARITY_TOLERANCE_NATS` under the phase's precision and, in a
    causal phase, :func:`clmdetour.modeling.causal.check_causality` under the candidate. sdpa itself
    is not checked against itself.

    Returns:
        The :class:`clmdetour.modeling.attention.AttentionChoice` (the model is set to its implementation).
    """
    # transformers' ModernBERT internals: imported when a phase runs, not with this module
    from clmdetour.modeling.causal import attention_self_check, check_causality, forward_encoder

    failure = None
    causal = get_objective(section.objective).causal
    if needs_self_check(candidate):
        probe = _first_rows(stream, collator, model.device)

        def loss_of(m):
            with autocast(on_gpu, section.precision):
                hidden = forward_encoder(m, probe["input_ids"], probe["attention_mask"], causal=causal,
                                         document_sep_id=document_sep_id).last_hidden_state
                return chunked_lm_loss(hidden, probe["labels"], lambda h: m.decoder(m.head(h)),
                                       section.clm_loss_chunk_tokens)

        def causal_probe(m):
            with autocast(on_gpu, section.precision):
                return check_causality(m, probe["input_ids"], probe["attention_mask"], atol=1e-2 if on_gpu else 1e-4,
                                       document_sep_id=document_sep_id)

        failure = attention_self_check(model, candidate, loss_of, causal_probe if causal else None)
    choice = settle_on(model, section.attn_implementation, on_gpu, failure)
    (log.warning if failure else log.info)("attention: %s (%s)", choice.implementation, choice.reason)
    return choice


def settle_on(model, requested: str, on_gpu: bool, failure: str | None, finetuning: bool = False):
    """The :class:`clmdetour.modeling.attention.AttentionChoice` of ``requested`` given the candidate's
    self-check ``failure`` (None: passed or not needed), the model set to its implementation; shared by
    pretraining phases and fine-tuning jobs (``finetuning``: ``auto`` follows
    :data:`clmdetour.modeling.attention.FINETUNE_AUTO_PREFERENCE`)."""
    from clmdetour.modeling.causal import set_attention

    choice = choose_attn_implementation(requested, on_gpu, flash_attn_importable() if on_gpu else False, failure,
                                        finetuning)
    set_attention(model, choice.implementation)
    return choice


def check_causal_on_first_batch(model, stream, collator, document_sep_id: int | None = None) -> float:
    """Step (CLM): :func:`clmdetour.modeling.causal.check_causality` on the stream's first two rows.

    Returns:
        The largest change of an earlier position's output when later tokens change (0 when causal).

    Raises:
        CausalityError: the forward pass leaks future tokens.
    """
    from clmdetour.modeling.causal import check_causality

    probe = _first_rows(stream, collator, model.device)
    return check_causality(model, probe["input_ids"], probe["attention_mask"], document_sep_id=document_sep_id)

