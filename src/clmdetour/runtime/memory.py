"""A training step's memory, estimated, and the micro-batch planner: what a pretraining phase
(:mod:`clmdetour.training.memory`, which adds the probe step and the enforced limit) and a fine-tuning job
(:mod:`clmdetour.finetune.memory`) both plan with.

Units: bytes in the functions, GiB (2**30 bytes) in config and records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from clmdetour.config import ConfigError

log = logging.getLogger(__name__)
GIB = 2 ** 30

#: Bytes per parameter that do not depend on the batch: fp32 weights (4) + fp32 gradients (4) + AdamW's
#: two fp32 moments (8) (mixed precision keeps fp32 master weights; Composer DecoupledAdamW).
STATIC_BYTES_PER_PARAMETER = 16
#: Bytes per parameter of the optimizer state alone (AdamW's two fp32 moments), which a probe step
#: (forward + backward, no optimizer step) does not allocate.
OPTIMIZER_BYTES_PER_PARAMETER = 8
#: Saved activations per token and layer, in units of ``hidden_size`` (``HIDDEN_UNITS``) and of the
#: GLU MLP's ``intermediate_size`` (``MLP_UNITS``), times the bytes of the compute dtype. Fit to the
#: H200 measurement of the 150M base configuration (hidden 768, intermediate 1,152, 22 layers,
#: 8,192 tokens, bf16, FlexAttention, uncompiled): 21.7 GiB at micro-batch 4 and 59.6 GiB at 12, i.e.
#: 4.74 GiB per sequence = 28.2 kB per token and layer = 2 bytes x (10 x 768 + 6 x 1,152) within 3 %.
HIDDEN_UNITS = 10
MLP_UNITS = 6
#: The loss chunk's logits (fp32) and their gradient, per labelled position and vocabulary entry.
LOGIT_BYTES = 12


@dataclass(frozen=True)
class MemoryPlan:
    """The micro-batch a phase trains with and the figures that chose it (recorded in ``run.json``).

    Attributes:
        micro_batch_sequences: sequences per forward pass per device.
        requested: the config value (an integer or ``auto``).
        limit_gib: ``pretraining.memory_limit_gib``.
        estimate_gib: :func:`estimate_step_bytes` at the chosen micro-batch.
        probe_gib: the probe step's reserved memory plus the optimizer state (CUDA), else None.
        how: one line saying how it was chosen.
    """

    micro_batch_sequences: int
    requested: int | str
    limit_gib: float
    estimate_gib: float
    probe_gib: float | None
    how: str

    def as_dict(self) -> dict:
        return {"micro_batch_sequences": self.micro_batch_sequences, "requested": self.requested,
                "limit_gib": self.limit_gib, "estimate_gib": round(self.estimate_gib, 2),
                "probe_gib": None if self.probe_gib is None else round(self.probe_gib, 2), "how": self.how}


def estimate_step_bytes(*, parameters: int, hidden_size: int, intermediate_size: int, num_layers: int,
                        vocab_size: int, seq_len: int, micro_batch: int, chunk_tokens: int,
                        activation_bytes: int = 2) -> int:
    """Peak memory of one training step on one device, estimated (bytes).

    ``parameters x STATIC_BYTES_PER_PARAMETER`` (weights, gradients, AdamW moments) +
    ``micro_batch x seq_len x num_layers x activation_bytes x (HIDDEN_UNITS x hidden +
    MLP_UNITS x intermediate)`` (saved activations) + the loss chunk's logits
    (``chunk_tokens x vocab_size x LOGIT_BYTES``). The constants are fit to one H200
    measurement (module constants); the planner checks the estimate against a probe step.

    Args:
        parameters: model parameters (all, frozen included: their weights stay resident).
        hidden_size, intermediate_size, num_layers, vocab_size: the ModernBERT config.
        seq_len: tokens per sequence.
        micro_batch: sequences per forward pass.
        chunk_tokens: labelled positions per loss chunk (``loss_chunk_tokens``).
        activation_bytes: bytes per activation element (2 under bf16/fp16 autocast, 4 in fp32).

    Returns:
        Bytes.
    """
    static = parameters * STATIC_BYTES_PER_PARAMETER
    per_token_layer = activation_bytes * (HIDDEN_UNITS * hidden_size + MLP_UNITS * intermediate_size)
    activations = micro_batch * seq_len * num_layers * per_token_layer
    logits = min(chunk_tokens, micro_batch * seq_len) * vocab_size * LOGIT_BYTES
    return int(static + activations + logits)


def divisors_descending(n: int) -> list[int]:
    """The divisors of ``n``, largest first."""
    return [d for d in range(n, 0, -1) if n % d == 0]


def plan_micro_batch(per_device: int, limit_bytes: float, bytes_of: Callable[[int], float],
                     check: Callable[[int], float] | None = None) -> tuple[int, float, float | None]:
    """The largest micro-batch that divides ``per_device`` and fits under ``limit_bytes``.

    Args:
        per_device: sequences per device per optimizer step.
        limit_bytes: the memory limit.
        bytes_of: ``micro_batch -> estimated bytes`` (:func:`estimate_step_bytes`).
        check: ``micro_batch -> measured bytes`` (a probe step), called on the estimate's
            choice and then on smaller divisors until one fits; None: the estimate decides.

    Returns:
        ``(micro_batch, estimated bytes, measured bytes or None)``.

    Raises:
        ConfigError: even a micro-batch of 1 does not fit (names ``pretraining.memory_limit_gib``).
    """
    candidates = divisors_descending(per_device)
    fitting = [mb for mb in candidates if bytes_of(mb) <= limit_bytes]
    for mb in fitting:
        if check is None:
            return mb, bytes_of(mb), None
        measured = check(mb)
        if measured <= limit_bytes:
            return mb, bytes_of(mb), measured
        log.warning("micro-batch %d: the probe step took %.1f GiB (estimate %.1f GiB), over the %.1f GiB limit; "
                    "trying a smaller one", mb, measured / GIB, bytes_of(mb) / GIB, limit_bytes / GIB)
    raise ConfigError(f"pretraining.memory_limit_gib ({limit_bytes / GIB:g} GiB): no micro-batch fits, not even 1 "
                      f"sequence (estimate {bytes_of(1) / GIB:.1f} GiB); raise the limit or shorten corpus.seq_len")
