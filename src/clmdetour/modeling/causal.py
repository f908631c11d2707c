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
"""

from __future__ import annotations

import copy

import torch
from transformers.masking_utils import (
    create_causal_mask,
    create_sliding_window_causal_mask,
)
from transformers.modeling_outputs import BaseModelOutput
from transformers.models.modernbert.modeling_modernbert import (
    ModernBertAttention,
    ModernBertModel,
)

from clmdetour.errors import ExpectedError


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


def causal_mask_mapping(encoder: ModernBertModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> dict:
    """Causal masks for both layer types, in the form ModernBertModel accepts.

    Args:
        encoder: the ModernBertModel (its config selects the attention back-end).
        input_ids: (batch, seq) token ids.
        attention_mask: (batch, seq) 1 for real tokens, 0 for padding, or None.

    Returns:
        ``{"full_attention": mask, "sliding_attention": mask}`` where each mask
        is whatever the configured back-end expects (a 4-D additive/boolean
        tensor, or None when the back-end applies causality itself). The
        sliding mask lets query ``q`` see keys ``q - config.sliding_window ..
        q``: the left half of ModernBERT's bidirectional local window, self
        included (module docstring).
    """
    # Only dtype, device, batch size and length of inputs_embeds are read.
    dtype = encoder.embeddings.tok_embeddings.weight.dtype
    embeds = torch.empty((*input_ids.shape, 1), dtype=dtype, device=input_ids.device)
    position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
    kwargs = {"inputs_embeds": embeds, "attention_mask": attention_mask, "cache": None, "position_ids": position_ids}
    window_config = copy.copy(encoder.config)  # shallow: same attention back-end and layer types
    window_config.sliding_window = encoder.config.sliding_window + 1  # transformers keeps kv > q - window
    return {
        "full_attention": create_causal_mask(config=encoder.config, **kwargs),
        "sliding_attention": create_sliding_window_causal_mask(config=window_config, **kwargs),
    }


def forward_encoder(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    causal: bool = False, output_hidden_states: bool = False) -> BaseModelOutput:
    """Run the ModernBERT encoder bidirectionally or causally.

    Args:
        model: ModernBertForMaskedLM (or any model with ``.model``) or ModernBertModel.
        input_ids: (batch, seq) token ids.
        attention_mask: (batch, seq) padding mask or None.
        causal: apply the causal mask on every layer (and flip ``is_causal``).
        output_hidden_states: also return the (num_layers + 1) hidden states,
            embeddings first, each (batch, seq, hidden).

    Returns:
        BaseModelOutput with ``last_hidden_state`` (batch, seq, hidden).
    """
    encoder = encoder_of(model)
    set_causal(encoder, causal)
    mask = causal_mask_mapping(encoder, input_ids, attention_mask) if causal else attention_mask
    return encoder(input_ids=input_ids, attention_mask=mask, output_hidden_states=output_hidden_states)


@torch.no_grad()
def check_causality(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    position: int | None = None, atol: float = 1e-4) -> float:
    """Prove on a real batch that the causal forward pass does not look ahead.

    Replaces every token after ``position`` by other ids and checks that the
    hidden states at positions ``<= position`` are unchanged.

    Args:
        model: the model as it will be trained (its attention back-end is used).
        input_ids: (batch, seq) a real training batch (a few rows suffice).
        attention_mask: (batch, seq) or None.
        position: the cut position ``t`` (default: the middle of the sequence).
        atol: tolerance on the max absolute difference (bf16 kernels are not bit-exact).

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
        a = forward_encoder(model, input_ids, attention_mask, causal=True).last_hidden_state[:, : t + 1]
        b = forward_encoder(model, changed, attention_mask, causal=True).last_hidden_state[:, : t + 1]
        diff = (a.float() - b.float()).abs().max().item()
    finally:
        model.train(was_training)
    if diff > atol:
        impl = encoder_of(model).config._attn_implementation
        raise CausalityError(
            f"causal attention leaks with attn_implementation={impl!r}: positions <= {t} changed by {diff:.3g} "
            f"when only later tokens changed")
    return diff
