"""A phase's attention back-end, settled on its first batch, and the CLM causality check.

``pretraining.attn_implementation`` names a candidate (:func:`clmdetour.modeling.attention.candidate_implementation`);
before the first step the candidate is checked against sdpa on two rows of the phase's first batch with the
phase's own loss (:func:`settle_phase_attention`, through the rule fine-tuning shares:
:func:`clmdetour.runtime.attention.settle_attention`) and kept, or the phase falls back to sdpa, saying
why (``run.json`` ``attention``). A CLM phase then checks that its forward pass does not leak future tokens
(:func:`check_causal_on_first_batch`).
"""

from __future__ import annotations

import logging

from clmdetour.modeling.attention import AttentionChoice
from clmdetour.modeling.loss import chunked_lm_loss
from clmdetour.objectives import get_objective
from clmdetour.runtime.attention import first_rows, settle_attention
from clmdetour.settings import PhaseSettings

log = logging.getLogger(__name__)


def settle_phase_attention(model, section: PhaseSettings, candidate: str, stream, collator, on_gpu: bool,
                           document_sep_id: int | None) -> AttentionChoice:
    """Step: check the candidate back-end on two rows of the first batch and keep it, or fall back to sdpa.

    The probe's loss is the phase's (:func:`clmdetour.modeling.loss.chunked_lm_loss` of the encoder run
    causally or not as the objective says, with the document mask when on); a causal phase also runs
    :func:`clmdetour.modeling.causal.check_causality` under the candidate. Logs ``attention: NAME (why)``,
    a warning when the phase fell back.

    Returns:
        The :class:`clmdetour.modeling.attention.AttentionChoice` (the model is set to its implementation).
    """
    # transformers' ModernBERT internals: imported when a phase runs, not with this module
    from clmdetour.modeling.causal import check_causality, forward_encoder

    causal = get_objective(section.objective).causal

    def loss_of(m, probe):
        hidden = forward_encoder(m, probe["input_ids"], probe["attention_mask"], causal=causal,
                                 document_sep_id=document_sep_id).last_hidden_state
        return chunked_lm_loss(hidden, probe["labels"], lambda h: m.decoder(m.head(h)), section.loss_chunk_tokens)

    def causality_of(m, probe):
        return check_causality(m, probe["input_ids"], probe["attention_mask"], atol=1e-2 if on_gpu else 1e-4,
                               document_sep_id=document_sep_id)

    choice = settle_attention(model, section.attn_implementation, candidate, stream, collator, on_gpu,
                              section.precision, loss_of, causality_of if causal else None)
    (log.warning if choice.fell_back else log.info)("attention: %s (%s)", choice.implementation, choice.reason)
    return choice


def check_causal_on_first_batch(model, stream, collator, document_sep_id: int | None = None) -> float:
    """Step (CLM): :func:`clmdetour.modeling.causal.check_causality` on the stream's first two rows.

    Returns:
        The largest change of an earlier position's output when later tokens change (0 when causal).

    Raises:
        CausalityError: the forward pass leaks future tokens.
    """
    from clmdetour.modeling.causal import check_causality

    probe = first_rows(stream, collator, model.device)
    return check_causality(model, probe["input_ids"], probe["attention_mask"], document_sep_id=document_sep_id)
