"""The attention back-end a model trains with, settled on two rows of its first batch: one rule for
pretraining phases and fine-tuning jobs.

The candidate (:func:`clmdetour.modeling.attention.select_attn_implementation`, the model loaded with it)
is checked against sdpa on the first two rows (:func:`clmdetour.modeling.causal.attention_self_check`:
loss parity within :data:`clmdetour.modeling.attention.PARITY_TOLERANCE_NATS` under the job's precision,
and, when the caller gives one, a causality probe), then kept, or the model falls back to sdpa saying
why (:func:`clmdetour.modeling.attention.choose_attn_implementation`). sdpa itself is not checked.
What differs between the two users is only the loss of the probe (a phase's chunked LM loss, a task
model's own loss) and whether ``auto`` may pick FlexAttention (``finetuning``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from clmdetour.modeling.attention import (
    AttentionChoice,
    choose_attn_implementation,
    importable_packages,
    needs_self_check,
)
from clmdetour.runtime.precision import autocast


def first_rows(rows: Sequence, collator, device: torch.device) -> dict:
    """The collated first two rows of ``rows`` (one when it holds one), every tensor on ``device``.

    Args:
        rows: anything with ``len`` and integer indexing (a pretraining stream, a list of encoded examples).
        collator: ``list of rows -> dict of tensors`` (the job's batch collator).
        device: where the model runs.
    """
    probe = collator([rows[i] for i in range(min(2, len(rows)))])
    return {k: v.to(device) for k, v in probe.items()}


def own_loss(model, batch: dict) -> torch.Tensor:
    """The loss a transformers task model computes itself on ``batch`` (``model(**batch).loss``)."""
    return model(**batch).loss


def settle_attention(model, requested: str, candidate: str, rows: Sequence, collator, on_gpu: bool,
                     precision: str, loss_of: Callable[[torch.nn.Module, dict], torch.Tensor] = own_loss,
                     causality_of: Callable[[torch.nn.Module, dict], float] | None = None,
                     finetuning: bool = False) -> AttentionChoice:
    """Check ``candidate`` on the first two rows against sdpa and keep it, or fall back to sdpa.

    The model runs the check where it trains: on CUDA when ``on_gpu`` (moved to the current CUDA
    device only when it is not on one yet; a phase has already put it on its rank's device).

    Args:
        model: the model as it will be trained, loaded with ``candidate``.
        requested: the config's ``attn_implementation`` (``pretraining.`` or ``evaluation.``).
        candidate: :func:`clmdetour.modeling.attention.select_attn_implementation`'s pick.
        rows, collator: the training rows and their collator (:func:`first_rows`).
        on_gpu: whether the job trains on a CUDA device.
        precision: the job's Composer precision (``amp_bf16`` / ``amp_fp16`` autocast the probes on CUDA).
        loss_of: ``(model, batch) -> scalar loss`` in nats per labelled token (default: the model's own loss).
        causality_of: ``(model, batch) -> largest leak``, raising
            :class:`clmdetour.modeling.causal.CausalityError` on a leak (causal phases); None: not probed.
        finetuning: a fine-tuning job (``auto`` follows
            :data:`clmdetour.modeling.attention.FINETUNE_AUTO_PREFERENCE`).

    Returns:
        The :class:`clmdetour.modeling.attention.AttentionChoice`; the model is set to its implementation.

    Raises:
        ValueError, RuntimeError: as :func:`clmdetour.modeling.attention.candidate_implementation`.
    """
    # transformers' model internals: imported when a job runs, not with this module
    from clmdetour.modeling.causal import attention_self_check, set_attention

    failure = None
    if needs_self_check(candidate):
        if on_gpu and model.device.type != "cuda":
            model.to(torch.device("cuda"))
        batch = first_rows(rows, collator, model.device)

        def loss(m):
            with autocast(on_gpu, precision):
                return loss_of(m, batch)

        def causal_probe(m):
            with autocast(on_gpu, precision):
                return causality_of(m, batch)

        failure = attention_self_check(model, candidate, loss, causal_probe if causality_of else None)
    choice = choose_attn_implementation(requested, on_gpu, importable_packages() if on_gpu else frozenset(), failure,
                                        finetuning)
    set_attention(model, choice.implementation)
    return choice
