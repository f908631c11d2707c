"""The model a phase trains: loaded from its input folder, frozen as configured, then readied for the first step.

:func:`build_model` loads the ``ModernBertForMaskedLM`` (fp32 weights) and applies the phase's freeze
spec; :func:`prepare_model` moves it to this rank's device, settles its attention back-end and the
causality check (:mod:`clmdetour.training.attention_check`), plans the micro-batch
(:mod:`clmdetour.training.memory`), scores it on the held-out rows and compiles its encoder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from clmdetour.config import BatchPlan, ConfigError, check_context_length
from clmdetour.modeling.attention import AttentionChoice, select_attn_implementation
from clmdetour.modeling.folders import check_model_folder
from clmdetour.objectives import get_objective
from clmdetour.runtime.memory import MemoryPlan
from clmdetour.settings import PhaseSettings
from clmdetour.training.attention_check import check_causal_on_first_batch, settle_phase_attention
from clmdetour.training.memory import plan_memory


def build_model(input_model: str, section: PhaseSettings, variant: str, on_gpu: bool):
    """Step: the starting ``ModernBertForMaskedLM`` (fp32 weights) with the phase's freeze applied.

    Returns:
        ``(model, tokenizer, candidate attention implementation, frozen parameter names)``; the
        candidate is checked on the first batch by :func:`clmdetour.training.attention_check.settle_phase_attention`.

    Raises:
        ConfigError: a freeze spec beyond the model's depth, ``seq_len`` above the model's
            ``max_position_embeddings`` (tokens; checked before any step), or a tokenizer without a
            mask token (the decay is MLM).
        ModelFolderError: the input folder is not a ModernBERT model folder with its tokenizer.
    """
    from transformers import AutoTokenizer, ModernBertForMaskedLM

    from clmdetour.modeling.freeze import apply_freeze  # transformers' ModernBERT internals

    check_model_folder(input_model, model_type="modernbert")
    attn = select_attn_implementation(section.attn_implementation, on_gpu)
    tokenizer = AutoTokenizer.from_pretrained(input_model)
    if tokenizer.mask_token_id is None:  # every variant's decay is MLM: refuse before phase 1 trains
        raise ConfigError(f"{input_model}: the tokenizer has no mask token; the MLM decay (and the MLM baseline) "
                          "need one: add it to the tokenizer or start from another model")
    model = ModernBertForMaskedLM.from_pretrained(input_model, attn_implementation=attn, dtype=torch.float32)
    check_context_length(section.seq_len, model.config.max_position_embeddings, f"the input model {input_model}")
    frozen = apply_freeze(model, section.freeze, f"pretraining.variants.{variant}.{section.phase}.freeze")
    return model, tokenizer, attn, frozen


def document_separator(section: PhaseSettings, tokenizer) -> int | None:
    """The separator id that bounds documents when ``pretraining.document_mask`` is on, else None.

    Raises:
        ConfigError: the mask is on and the tokenizer has no ``sep_token_id``.
    """
    if not section.document_mask:
        return None
    if tokenizer.sep_token_id is None:
        raise ConfigError("pretraining.document_mask: the tokenizer has no sep_token_id to find document boundaries")
    return int(tokenizer.sep_token_id)


def resolve_compile(section: PhaseSettings, on_gpu: bool) -> bool:
    """``pretraining.compile``: ``auto`` is on for CUDA and off on CPU; ``true``/``false`` as given."""
    return on_gpu if section.compile == "auto" else bool(section.compile)


def compile_encoder(model) -> None:
    """Step: compile the encoder in place (``nn.Module.compile``), so its parameter names and the exported
    folder stay plain (no ``_orig_mod.`` prefix); the MLM head and the loss stay eager."""
    from clmdetour.modeling.causal import encoder_of  # transformers' ModernBERT internals

    encoder_of(model).compile()


def prepare_model(model, section: PhaseSettings, candidate: str, stream, collator, on_gpu: bool,
                  document_sep_id: int | None, batch: BatchPlan, variant: str, score: Callable[[Any], float] | None
                  ) -> tuple[AttentionChoice, float | None, MemoryPlan, BatchPlan, float | None, bool]:
    """Step: the model on this rank's device, its attention back-end settled
    (:func:`clmdetour.training.attention_check.settle_phase_attention`), the causality check (objectives that
    ask for it), the micro-batch planned (:func:`clmdetour.training.memory.plan_memory`), the held-out
    loss before training (``score``; None: not scored, on ranks other than 0) and the encoder compiled
    (:func:`resolve_compile`).

    Returns:
        ``(AttentionChoice, the causality check's largest difference or None, MemoryPlan, batch plan with its
        micro-batch, held-out loss at the start (nats per labelled token) or None, compiled)``.

    Raises:
        CausalityError: the CLM forward pass leaks future tokens.
        ConfigError: a configured micro-batch over the memory limit (CUDA), or nothing fits.
    """
    from composer.utils import dist

    model.to(torch.device("cuda", dist.get_local_rank()) if on_gpu else torch.device("cpu"))
    attn = settle_phase_attention(model, section, candidate, stream, collator, on_gpu, document_sep_id)
    causal_diff = (check_causal_on_first_batch(model, stream, collator, document_sep_id)
                   if get_objective(section.objective).causality_check else None)
    memory, batch = plan_memory(model, section, batch, on_gpu, document_sep_id, variant)
    loss_start = score(model) if score is not None else None
    compiled = resolve_compile(section, on_gpu)
    if compiled:
        compile_encoder(model)
    return attn, causal_diff, memory, batch, loss_start, compiled
