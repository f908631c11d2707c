"""Memory-bounded language-modelling loss through the MLM head.

CLM predicts every position, so full-vocabulary logits would cost
``seq_len x vocab x 4`` bytes per sequence (8,192 x 32,768 x 4 B = 1.07 GB in
fp32) plus as much again for their gradient. We gather the labelled positions
(all of them for CLM, ~15 % for MLM: the MLM case is ModernBERT's
``sparse_prediction``), and compute head + decoder + cross-entropy in chunks
of ``chunk_tokens`` positions under activation checkpointing, so only one
chunk's logits exist at a time in the forward and backward passes. The
last chunk is not checkpointed: its logits are the last thing the forward
pass computes and the first the backward pass needs, so keeping them costs
no more peak memory than recomputing them, and saves one chunk's head and
decoder forward per step (all of it when the labels fit in one chunk, as in
the CPU runs: about 8 % of a CLM step there). The result equals the
unchunked mean cross-entropy up to float summation order.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IGNORE_INDEX = -100  # label of unscored positions: torch.nn.CrossEntropyLoss default ignore_index
#: Positions per chunk of the vocabulary projection + cross-entropy when none is given: the schema default of
#: pretraining.clm_loss_chunk_tokens (tests/test_loss_chunked.py checks that they agree).
CHUNK_TOKENS = 2048


def _chunk_loss_sum(project: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = project(hidden).float()
    return F.cross_entropy(logits, labels, reduction="sum")


def chunked_lm_loss(hidden: torch.Tensor, labels: torch.Tensor, project: Callable[[torch.Tensor], torch.Tensor],
                    chunk_tokens: int = CHUNK_TOKENS) -> torch.Tensor:
    """Mean cross-entropy over labelled positions, computed chunk by chunk.

    Args:
        hidden: (batch, seq, hidden) final hidden states of the encoder.
        labels: (batch, seq) target ids, ``-100`` where no loss is taken.
        project: maps (n, hidden) -> (n, vocab) logits (ModernBERT: ``decoder(head(h))``).
        chunk_tokens: labelled positions per chunk (bounds peak memory at
            ``chunk_tokens x vocab`` logits).

    Returns:
        Scalar mean loss (nats per labelled token); 0 with a graph if no label.

    Raises:
        ValueError: ``chunk_tokens`` is not positive or shapes disagree.
    """
    if chunk_tokens <= 0:
        raise ValueError(f"chunk_tokens must be positive, got {chunk_tokens}")
    if hidden.shape[:-1] != labels.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} and labels {tuple(labels.shape)} disagree")
    flat_labels = labels.reshape(-1)
    keep = flat_labels != IGNORE_INDEX
    h = hidden.reshape(-1, hidden.shape[-1])[keep]
    y = flat_labels[keep]
    n = y.numel()
    if n == 0:
        return hidden.sum() * 0.0
    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, n, chunk_tokens):
        hs, ys = h[start:start + chunk_tokens], y[start:start + chunk_tokens]
        if torch.is_grad_enabled() and hs.requires_grad and start + chunk_tokens < n:  # not the last chunk
            total = total + checkpoint(_chunk_loss_sum, project, hs, ys, use_reentrant=False)
        else:
            total = total + _chunk_loss_sum(project, hs, ys)
    return total / n


def unchunked_lm_loss(hidden: torch.Tensor, labels: torch.Tensor, project: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Reference: full-sequence logits then mean cross-entropy (what ``chunked_lm_loss`` must equal)."""
    logits = project(hidden).float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX)
