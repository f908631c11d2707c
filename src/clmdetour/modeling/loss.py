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

On the compiled GPU path (``pretraining.compile``) the cross-entropy of each chunk runs under
``torch.compile`` (:func:`compiled_cross_entropy_sum`): the fp32 up-cast, ``log_softmax``, the gathered
target and the sum become one fused kernel forward and one backward, so the chunk's logits are never
materialised in fp32 (the profile of a compiled CLM step on an H200 had the eager loss at about 13 % of
the GPU time and 721 dtype conversions: docs/performance.md, GPU path).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

log = logging.getLogger(__name__)

IGNORE_INDEX = -100  # label of unscored positions: torch.nn.CrossEntropyLoss default ignore_index
#: Positions per chunk of the vocabulary projection + cross-entropy when none is given: the schema default of
#: pretraining.loss_chunk_tokens (tests/test_loss_chunked.py checks that they agree).
CHUNK_TOKENS = 2048


def cross_entropy_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy (nats) of ``logits`` (n, vocab), any float dtype, computed in fp32, against ``labels`` (n,)."""
    return F.cross_entropy(logits.float(), labels, reduction="sum")


@functools.cache
def _compiled_cross_entropy():
    return torch.compile(cross_entropy_sum, dynamic=True)  # chunk sizes vary: one graph for all of them


_COMPILE_FAILED: list[str] = []  # the first compilation error, after which the eager function is used


def _compile_errors() -> tuple[type[BaseException], ...]:
    """The exceptions of torch.compile itself (dynamo, inductor); anything else, e.g. the control-flow
    exception with which activation checkpointing stops a recomputation, passes through."""
    from torch._dynamo.exc import TorchDynamoException

    errors: tuple[type[BaseException], ...] = (TorchDynamoException,)
    try:
        from torch._inductor.exc import InductorError

        errors += (InductorError,)
    except ImportError:  # an older torch names no InductorError
        pass
    return errors


def compiled_cross_entropy_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """:func:`cross_entropy_sum` under ``torch.compile`` (dynamic shapes: one graph whatever the chunk size).

    A compilation that fails is logged once and the eager function is used from then on (same value).
    """
    if not _COMPILE_FAILED:
        try:
            return _compiled_cross_entropy()(logits, labels)
        except _compile_errors() as e:  # a back-end failure must not stop training: eager computes the same
            _COMPILE_FAILED.append(f"{type(e).__name__}: {e}"[:500])
            log.warning("the compiled loss failed (%s); the eager loss is used", _COMPILE_FAILED[0])
    return cross_entropy_sum(logits, labels)


def _chunk_loss_sum(project: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, labels: torch.Tensor,
                    compiled: bool = False) -> torch.Tensor:
    logits = project(hidden)
    return (compiled_cross_entropy_sum if compiled else cross_entropy_sum)(logits, labels)


def chunked_lm_loss(hidden: torch.Tensor, labels: torch.Tensor, project: Callable[[torch.Tensor], torch.Tensor],
                    chunk_tokens: int = CHUNK_TOKENS, compiled: bool = False) -> torch.Tensor:
    """Mean cross-entropy over labelled positions, computed chunk by chunk.

    Args:
        hidden: (batch, seq, hidden) final hidden states of the encoder.
        labels: (batch, seq) target ids, ``-100`` where no loss is taken.
        project: maps (n, hidden) -> (n, vocab) logits (ModernBERT: ``decoder(head(h))``).
        chunk_tokens: labelled positions per chunk (bounds peak memory at
            ``chunk_tokens x vocab`` logits).
        compiled: each chunk's cross-entropy under ``torch.compile`` (:func:`compiled_cross_entropy_sum`).

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
            total = total + checkpoint(_chunk_loss_sum, project, hs, ys, compiled, use_reentrant=False)
        else:
            total = total + _chunk_loss_sum(project, hs, ys, compiled)
    return total / n


def unchunked_lm_loss(hidden: torch.Tensor, labels: torch.Tensor, project: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Reference: full-sequence logits then mean cross-entropy (what ``chunked_lm_loss`` must equal)."""
    logits = project(hidden).float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX)
