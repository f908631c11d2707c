"""Freezing parameters by layer spec, before the optimizer and the DDP/FSDP wrap.

Specs are absolute: ``"embeddings"`` (token embeddings + embedding norm, and
with them the tied output decoder of the MLM head), ``"N"`` or ``"A-B"``
(encoder layers, inclusive). Frozen parameters get ``requires_grad=False`` and
are left out of the optimizer, so weight decay cannot move them either.
"""

from __future__ import annotations

import torch

from clmdetour.config import ConfigError, parse_layer_spec
from clmdetour.modeling.causal import encoder_of


def apply_freeze(model: torch.nn.Module, specs: list[str], where: str = "freeze") -> list[str]:
    """Freeze the parameters named by ``specs``.

    Args:
        model: a ModernBertForMaskedLM (or a model holding ModernBertModel as ``.model``).
        specs: layer specs (see module docstring).
        where: config key path for error messages (e.g. ``pretraining.variants.x.phase1.freeze``).

    Returns:
        Sorted names of every frozen parameter (as in ``model.named_parameters()``;
        a tied decoder weight appears under its first name only).

    Raises:
        ConfigError: a spec names a layer at or beyond the model's own depth.
    """
    encoder = encoder_of(model)
    depth = encoder.config.num_hidden_layers
    prefixes: list[str] = []
    base = "model." if encoder is not model else ""
    for i, spec in enumerate(specs):
        try:
            items = parse_layer_spec(spec, depth, f"{where}[{i}]")
        except ConfigError as e:
            raise ConfigError(f"{e} (checked against the model's own config)") from None
        for item in items:
            if item == "embeddings":
                prefixes.append(f"{base}embeddings.")
                prefixes.append("decoder.")  # tied to the token embeddings; its bias goes with it
            else:
                prefixes.append(f"{base}layers.{item}.")
    frozen = []
    for name, param in model.named_parameters():
        if any(name.startswith(p) for p in prefixes):
            param.requires_grad_(False)
            frozen.append(name)
    return sorted(frozen)


def trainable_parameter_count(model: torch.nn.Module) -> int:
    """Number of trainable scalars (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def optimizer_param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups, in pretraining and fine-tuning: decay on weight matrices, none on biases and norms.

    ModernBERT's recipe (Warner et al. 2024) excludes biases and LayerNorm
    weights from weight decay; we detect them as parameters with ``ndim < 2``.
    Frozen parameters are excluded.
    """
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
