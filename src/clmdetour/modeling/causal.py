"""Causal (CLM) attention on a bidirectional ModernBERT encoder.

The CLM detour trains the encoder with a causal mask on every layer, global
and sliding-window alike. Two things must both be switched, because the
attention back-ends read different inputs:

* eager and sdpa read the additive mask: we pass ModernBertModel a dict of
  masks (``full_attention`` / ``sliding_attention``) built with transformers'
  ``create_causal_mask`` / ``create_sliding_window_causal_mask``. The causal
  sliding window is the exact left half of ModernBERT's bidirectional one:
  ModernBERT keeps ``|q - kv| <= config.sliding_window`` (= local_attention / 2,
  64 for the base model), so the causal window keeps ``q - 64 <= kv <= q``, 64
  positions plus self, as flash-attention-2's causal window does. transformers'
  causal helper keeps ``kv > q - sliding_window`` (one position fewer), so it
  is called with ``sliding_window + 1`` (:func:`causal_mask_mapping`);
* flash-attention-2 (and sdpa when the mask is skipped as "plain causal")
  read the attention module's ``is_causal`` attribute, which a dict mask does
  not reach: ``set_causal`` flips it on every ``ModernBertAttention``.

``check_causality`` verifies on a real batch that no position sees a later
token, whatever back-end was selected.

The document mask (``pretraining.document_mask``) keeps every token of a
packed row inside its own document: the document of a position is read from
the separator tokens (a ``[SEP]`` closes its document, as the CLM labels
already assume), and transformers' ``packed_sequence_mask_function`` is
and-ed into each mask, causal or bidirectional, global or sliding; rotary
positions restart at 0 in each document (docs/fidelity.md says why). Under
FlexAttention the masks are BlockMasks, under sdpa/eager dense 4-D masks; a
back-end that takes no mask tensor (flash-attention-2: the registry's
``takes_mask``) is refused.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
from transformers.masking_utils import (
    create_bidirectional_mask,
    create_bidirectional_sliding_window_mask,
    create_causal_mask,
    create_sliding_window_causal_mask,
    packed_sequence_mask_function,
)
from transformers.modeling_outputs import BaseModelOutput
from transformers.models.modernbert.modeling_modernbert import (
    ModernBertAttention,
    ModernBertModel,
)

from clmdetour.errors import ExpectedError
from clmdetour.modeling.attention import PARITY_TOLERANCE_NATS, REFERENCE, takes_mask


class CausalityError(ExpectedError, RuntimeError):
    """A causal forward pass let information flow from later to earlier positions."""


def encoder_of(model: torch.nn.Module) -> ModernBertModel:
    """The ``ModernBertModel`` inside a task model (``.model``) or the model itself.

    Raises:
        TypeError: ``model`` holds no ModernBertModel.
    """
    enc = getattr(model, "model", model)
    if not isinstance(enc, ModernBertModel):
        raise TypeError(f"expected a ModernBERT model, got {type(model).__name__}")
    return enc


def set_causal(model: torch.nn.Module, causal: bool) -> int:
    """Set ``is_causal`` on every ModernBertAttention module of ``model``.

    Returns:
        The number of attention modules switched (= number of layers).
    """
    n = 0
    for module in model.modules():
        if isinstance(module, ModernBertAttention):
            module.is_causal = bool(causal)
            n += 1
    return n


def document_ids(input_ids: torch.Tensor, sep_token_id: int) -> torch.Tensor:
    """The document index of every position of packed rows.

    A separator closes its document (it belongs to the text it ends); the next
    position starts the next one. Padding after the last separator forms one more
    "document", which the padding mask removes anyway.

    Args:
        input_ids: (batch, seq) token ids.
        sep_token_id: the separator id (``tokenizer.sep_token_id``).

    Returns:
        (batch, seq) int64, 0 for the first document of each row, increasing along the row.
    """
    is_sep = (input_ids == sep_token_id).long()
    return torch.cumsum(is_sep, dim=1) - is_sep


def document_position_ids(doc_ids: torch.Tensor) -> torch.Tensor:
    """Rotary positions that restart at 0 at each document start.

    Args:
        doc_ids: (batch, seq) from :func:`document_ids`.

    Returns:
        (batch, seq) int64: the position of each token inside its document.
    """
    seq = doc_ids.shape[1]
    idx = torch.arange(seq, device=doc_ids.device).expand_as(doc_ids)
    starts = torch.ones_like(doc_ids, dtype=torch.bool)
    starts[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    first = torch.cummax(torch.where(starts, idx, torch.zeros_like(idx)), dim=1).values
    return idx - first


def causal_mask_mapping(encoder: ModernBertModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                        doc_ids: torch.Tensor | None = None) -> dict:
    """Causal masks for both layer types, in the form ModernBertModel accepts.

    Args:
        encoder: the ModernBertModel (its config selects the attention back-end).
        input_ids: (batch, seq) token ids.
        attention_mask: (batch, seq) 1 for real tokens, 0 for padding, or None.
        doc_ids: (batch, seq) document index (:func:`document_ids`) to keep attention inside each
            document, or None.

    Returns:
        ``{"full_attention": mask, "sliding_attention": mask}`` where each mask
        is whatever the configured back-end expects (a 4-D additive/boolean
        tensor, a FlexAttention BlockMask, or None when the back-end applies
        causality itself). The sliding mask lets query ``q`` see keys ``q -
        config.sliding_window .. q``: the left half of ModernBERT's bidirectional
        local window, self included (module docstring).
    """
    kwargs = _mask_kwargs(encoder, input_ids, attention_mask, doc_ids)
    kwargs.update(cache=None, position_ids=torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0))
    window_config = copy.copy(encoder.config)  # shallow: same attention back-end and layer types
    window_config.sliding_window = encoder.config.sliding_window + 1  # transformers keeps kv > q - window
    return {
        "full_attention": create_causal_mask(config=encoder.config, **kwargs),
        "sliding_attention": create_sliding_window_causal_mask(config=window_config, **kwargs),
    }


def bidirectional_mask_mapping(encoder: ModernBertModel, input_ids: torch.Tensor,
                               attention_mask: torch.Tensor | None, doc_ids: torch.Tensor) -> dict:
    """Bidirectional masks (global and ModernBERT's sliding window) restricted to each document.

    The same calls ModernBertModel makes for itself, with the document mask and-ed in.

    Args:
        encoder, input_ids, attention_mask: as :func:`causal_mask_mapping`.
        doc_ids: (batch, seq) document index (:func:`document_ids`).

    Returns:
        ``{"full_attention": mask, "sliding_attention": mask}`` for the configured back-end.
    """
    kwargs = _mask_kwargs(encoder, input_ids, attention_mask, doc_ids)
    return {
        "full_attention": create_bidirectional_mask(config=encoder.config, **kwargs),
        "sliding_attention": create_bidirectional_sliding_window_mask(config=encoder.config, **kwargs),
    }


def _mask_kwargs(encoder: ModernBertModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                 doc_ids: torch.Tensor | None) -> dict:
    # Only dtype, device, batch size and length of inputs_embeds are read.
    dtype = encoder.embeddings.tok_embeddings.weight.dtype
    embeds = torch.empty((*input_ids.shape, 1), dtype=dtype, device=input_ids.device)
    kwargs = {"inputs_embeds": embeds, "attention_mask": attention_mask}
    if doc_ids is not None:
        implementation = encoder.config._attn_implementation
        if not takes_mask(implementation):
            raise DocumentMaskError(f"pretraining.document_mask: {implementation} takes no mask tensor and this "
                                    "pipeline does not pass it varlen document lengths; use attn_implementation "
                                    "flex_attention (auto on CUDA without flash-attn) or sdpa, or turn the mask off")
        kwargs["and_mask_function"] = packed_sequence_mask_function(doc_ids)
    return kwargs


class DocumentMaskError(ExpectedError, RuntimeError):
    """The document mask was asked of a back-end that cannot take it."""


def forward_encoder(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    causal: bool = False, output_hidden_states: bool = False,
                    document_sep_id: int | None = None) -> BaseModelOutput:
    """Run the ModernBERT encoder bidirectionally or causally.

    Args:
        model: ModernBertForMaskedLM (or any model with ``.model``) or ModernBertModel.
        input_ids: (batch, seq) token ids.
        attention_mask: (batch, seq) padding mask or None.
        causal: apply the causal mask on every layer (and flip ``is_causal``).
        output_hidden_states: also return the (num_layers + 1) hidden states,
            embeddings first, each (batch, seq, hidden).
        document_sep_id: the separator id when no token may attend across a document
            boundary of a packed row (positions then restart per document); None: no document mask.

    Returns:
        BaseModelOutput with ``last_hidden_state`` (batch, seq, hidden).

    Raises:
        DocumentMaskError: a document mask under a back-end that takes no mask tensor (flash_attention_2:
            :attr:`clmdetour.modeling.attention.AttentionBackend.takes_mask`).
    """
    encoder = encoder_of(model)
    set_causal(encoder, causal)
    doc_ids = position_ids = None
    if document_sep_id is not None:
        doc_ids = document_ids(input_ids, document_sep_id)
        position_ids = document_position_ids(doc_ids)
    if causal:
        mask = causal_mask_mapping(encoder, input_ids, attention_mask, doc_ids)
    elif doc_ids is not None:
        mask = bidirectional_mask_mapping(encoder, input_ids, attention_mask, doc_ids)
    else:
        mask = attention_mask
    return encoder(input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
                   output_hidden_states=output_hidden_states)


@torch.no_grad()
def check_causality(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    position: int | None = None, atol: float = 1e-4, document_sep_id: int | None = None) -> float:
    """Prove on a real batch that the causal forward pass does not look ahead.

    Replaces every token after ``position`` by other ids and checks that the
    hidden states at positions ``<= position`` are unchanged.

    Args:
        model: the model as it will be trained (its attention back-end is used).
        input_ids: (batch, seq) a real training batch (a few rows suffice).
        attention_mask: (batch, seq) or None.
        position: the cut position ``t`` (default: the middle of the sequence).
        atol: tolerance on the max absolute difference (bf16 kernels are not bit-exact).
        document_sep_id: check with the document mask the phase trains with (see :func:`forward_encoder`).

    Returns:
        The max absolute difference of hidden states at positions ``<= t``.

    Raises:
        CausalityError: the difference exceeds ``atol`` (a leak).
    """
    was_training = model.training
    model.eval()
    try:
        t = input_ids.shape[1] // 2 if position is None else position
        changed = input_ids.clone()
        vocab = encoder_of(model).config.vocab_size
        changed[:, t + 1:] = (changed[:, t + 1:] + 7) % vocab
        a = forward_encoder(model, input_ids, attention_mask, causal=True,
                            document_sep_id=document_sep_id).last_hidden_state[:, : t + 1]
        b = forward_encoder(model, changed, attention_mask, causal=True,
                            document_sep_id=document_sep_id).last_hidden_state[:, : t + 1]
        diff = (a.float() - b.float()).abs().max().item()
    finally:
        model.train(was_training)
    if diff > atol:
        impl = encoder_of(model).config._attn_implementation
        raise CausalityError(
            f"causal attention leaks with attn_implementation={impl!r}: positions <= {t} changed by {diff:.3g} "
            f"when only later tokens changed")
    return diff


def set_attention(model: torch.nn.Module, implementation: str) -> None:
    """Switch the attention back-end of a loaded model in place (every config among its modules).

    ModernBERT's attention modules and mask builders read ``config._attn_implementation`` at
    each forward, so a name registered in transformers' ``ALL_ATTENTION_FUNCTIONS`` (and its mask
    interface) takes effect at the next forward pass.
    """
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            config._attn_implementation = implementation


@torch.no_grad()
def attention_self_check(model: torch.nn.Module, candidate: str, loss_of: Callable[[torch.nn.Module], torch.Tensor],
                         causal_probe: Callable[[torch.nn.Module], float] | None = None,
                         tolerance: float = PARITY_TOLERANCE_NATS) -> str | None:
    """Check a back-end against sdpa on a real batch before training with it.

    Computes ``loss_of(model)`` under sdpa and under ``candidate`` (eval mode, no grad) and,
    when given, runs ``causal_probe`` (e.g. :func:`check_causality`) under the candidate.
    Leaves the model set to ``candidate``; the caller applies the choice
    (:func:`clmdetour.modeling.attention.choose_attn_implementation`, then :func:`set_attention`).

    Args:
        model: the model as it will be trained.
        candidate: the back-end to check (any name transformers' attention interface knows).
        loss_of: ``model -> scalar loss`` (nats per labelled token) on two rows of the first batch.
        causal_probe: raises :class:`CausalityError` when the forward pass leaks (CLM phases).
        tolerance: largest accepted |loss(candidate) - loss(sdpa)|, nats
            (:data:`clmdetour.modeling.attention.PARITY_TOLERANCE_NATS`).

    Returns:
        None when the candidate passes, else why it failed (one line).
    """
    was_training = model.training
    model.eval()
    try:
        set_attention(model, REFERENCE)
        reference = float(loss_of(model))
        set_attention(model, candidate)
        try:
            got = float(loss_of(model))
            if causal_probe is not None:
                causal_probe(model)
        except CausalityError as e:
            return str(e)
        except (RuntimeError, ValueError, NotImplementedError, KeyError) as e:  # a kernel or mask that cannot run
            return f"{candidate} raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if not math.isfinite(got):
            return f"loss under {candidate} is {got} (sdpa: {reference:.4f})"
        if abs(got - reference) > tolerance:
            return (f"loss under {candidate} {got:.4f} vs sdpa {reference:.4f} nats: |difference| "
                    f"{abs(got - reference):.3g} > {tolerance}")
        return None
    finally:
        model.train(was_training)
