"""GPU memory of a training step: the estimate, the micro-batch planner and the enforced limit.

``pretraining.micro_batch_sequences: auto`` picks the largest micro-batch that
divides the per-device batch and whose step fits under
``pretraining.memory_limit_gib``; a configured micro-batch that cannot fit
fails before training. The choice starts from :func:`estimate_step_bytes` and,
on a CUDA device, is checked against a probe step (:func:`probe_step_bytes`,
forward + backward of one micro-batch under the phase's precision, plus the
optimizer state the probe does not allocate); a probe over the limit moves
down to the next divisor.

On a card larger than the limit the limit is enforced
(``torch.cuda.set_per_process_memory_fraction``), so one run on an H200
(141 GB) shows whether the same run fits an 80 GB H100.

Units: bytes in the functions, GiB (2**30 bytes) in config and records.
"""

from __future__ import annotations

import logging

from clmdetour.config import BatchPlan, ConfigError
from clmdetour.objectives import get_objective
from clmdetour.runtime.memory import (
    GIB,
    OPTIMIZER_BYTES_PER_PARAMETER,
    MemoryPlan,
    estimate_step_bytes,
    plan_micro_batch,
)
from clmdetour.settings import PhaseSettings

log = logging.getLogger(__name__)
def check_configured_micro_batch(micro_batch: int, key: str, limit_bytes: float, estimate_bytes: float) -> None:
    """Refuse a configured micro-batch whose step is estimated above the memory limit.

    Raises:
        ConfigError: naming the key, the estimate and the limit (GiB).
    """
    if estimate_bytes > limit_bytes:
        raise ConfigError(f"{key} ({micro_batch}): one step is estimated at {estimate_bytes / GIB:.1f} GiB per "
                          f"device, over pretraining.memory_limit_gib ({limit_bytes / GIB:g} GiB); set it to 'auto' "
                          f"or a smaller divisor of the per-device batch (clmdetour.training.memory)")


def micro_batch_key(section: PhaseSettings, variant: str) -> str:
    """The config keys that can set a phase's ``micro_batch_sequences``, most specific first, for messages.

    The phase job reads its section as resolved JSON (values only, never where they came from: its rule's
    params and the run hash are that JSON), so a refusal lists the keys in the order they override each other
    instead of naming one that may not be the one set. Planning names the one key
    (:func:`clmdetour.config.check_batch_division`).
    """
    phase = section.phase
    return (f"micro_batch_sequences of {variant}/{phase} (pretraining.variants.{variant}.{phase}."
            f"micro_batch_sequences, else pretraining.{phase}.micro_batch_sequences, else "
            "pretraining.micro_batch_sequences: the first one the config sets)")


def step_footprint_bytes(*, allocated_before: float, reserved_before: float, peak_allocated: float,
                         peak_reserved: float, resident_bytes: float) -> float:
    """What one training step needs on the device (bytes), from allocator readings taken around it.

    The step's own growth is the larger of the peak allocated and the peak reserved bytes above their
    readings just before the step (reserved includes the caching allocator's rounding and fragmentation);
    ``resident_bytes`` (the model's weights, already allocated before the step) is added back. Memory that
    earlier work in the same process still holds (another phase's model, a compiled graph's buffers,
    cached blocks) is part of both readings before the step, so it is not counted: a phase planned after
    another one in one process gets the micro-batch a fresh process would.

    Args:
        allocated_before, reserved_before: ``torch.cuda.memory_allocated`` / ``memory_reserved`` just
            before the step (after ``empty_cache`` and ``reset_peak_memory_stats``).
        peak_allocated, peak_reserved: ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``
            after the step.
        resident_bytes: the bytes of the model's own parameters.

    Returns:
        Bytes.
    """
    growth = max(peak_allocated - allocated_before, peak_reserved - reserved_before, 0.0)
    return growth + resident_bytes


def probe_step_bytes(model, section: PhaseSettings, micro_batch: int, on_gpu: bool,
                     document_sep_id: int | None) -> float:
    """CUDA memory one forward + backward at ``micro_batch`` needs (bytes; :func:`step_footprint_bytes`:
    only what the step itself allocates, plus the model's weights), plus the AdamW state the probe does not
    allocate (:data:`OPTIMIZER_BYTES_PER_PARAMETER`).

    Every position is labelled (the CLM worst case) and the ids are random: memory does not depend on them.
    A probe that runs out of memory measures ``inf``.
    """
    import gc

    import torch  # here, as in enforce_limit: the planner's arithmetic runs without torch

    from clmdetour.modeling.causal import forward_encoder
    from clmdetour.modeling.loss import chunked_lm_loss
    from clmdetour.runtime.precision import autocast

    gc.collect()  # what an earlier phase left unreferenced in this process goes before the readings
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    allocated_before, reserved_before = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    ids = torch.randint(5, model.config.vocab_size, (micro_batch, section.seq_len), device=model.device)
    try:
        with autocast(on_gpu, section.precision):
            hidden = forward_encoder(model, ids, torch.ones_like(ids), causal=get_objective(section.objective).causal,
                                     document_sep_id=document_sep_id).last_hidden_state
            loss = chunked_lm_loss(hidden, ids, lambda h: model.decoder(model.head(h)), section.loss_chunk_tokens)
        loss.backward()
        measured = step_footprint_bytes(
            allocated_before=allocated_before, reserved_before=reserved_before,
            peak_allocated=torch.cuda.max_memory_allocated(), peak_reserved=torch.cuda.max_memory_reserved(),
            resident_bytes=sum(p.numel() * p.element_size() for p in model.parameters()))
    except torch.cuda.OutOfMemoryError:
        measured = float("inf")
    finally:
        del ids
        model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
    foreign = allocated_before - sum(p.numel() * p.element_size() for p in model.parameters())
    if foreign > GIB:
        log.warning("memory probe: %.1f GiB held by earlier work in this process is not counted in the step's "
                    "%.1f GiB; the enforced limit still applies to the process as a whole", foreign / GIB, measured / GIB)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return measured + trainable * OPTIMIZER_BYTES_PER_PARAMETER


def plan_memory(model, section: PhaseSettings, batch: BatchPlan, on_gpu: bool, document_sep_id: int | None,
                variant: str) -> tuple[MemoryPlan, BatchPlan]:
    """Step: the micro-batch (``auto``: the largest fitting divisor of the per-device batch) and the enforced limit.

    On CUDA the limit is enforced (:func:`enforce_limit`) and ``auto``'s choice is checked by a probe step
    (:func:`probe_step_bytes`); on CPU the estimate alone decides ``auto`` and a configured micro-batch is
    not checked (host memory is not the GPU limit).

    Args:
        batch: the phase's batch plan (:func:`clmdetour.training.phase.batch_arithmetic`).
        variant: the variant, for the key a refusal names (:func:`micro_batch_key`).

    Returns:
        ``(MemoryPlan, batch plan)`` with the micro-batch (and so the gradient accumulation) chosen.

    Raises:
        ConfigError: a configured micro-batch estimated over the limit (CUDA; naming the key that set it),
            or nothing fits.
    """
    cfg = model.config
    limit = section.memory_limit_gib * GIB

    def bytes_of(mb: int) -> int:
        return estimate_step_bytes(parameters=sum(p.numel() for p in model.parameters()), hidden_size=cfg.hidden_size,
                                   intermediate_size=cfg.intermediate_size, num_layers=cfg.num_hidden_layers,
                                   vocab_size=cfg.vocab_size, seq_len=section.seq_len, micro_batch=mb,
                                   chunk_tokens=section.loss_chunk_tokens,
                                   activation_bytes=2 if on_gpu and section.precision != "fp32" else 4)

    if on_gpu:
        import torch

        enforce_limit(section.memory_limit_gib, torch.cuda.current_device())
    requested = section.micro_batch_sequences
    if requested == "auto":
        check = (lambda mb: probe_step_bytes(model, section, mb, on_gpu, document_sep_id)) if on_gpu else None
        mb, estimate, probed = plan_micro_batch(batch.per_device, limit, bytes_of, check)
        how = ("the largest divisor of the per-device batch under the limit, "
               + ("estimated, then checked by a probe step" if on_gpu else "estimated (CPU: no probe)"))
    else:
        mb, estimate, probed = requested, bytes_of(requested), None
        if on_gpu:
            check_configured_micro_batch(mb, micro_batch_key(section, variant), limit, estimate)
        how = "configured"
    plan = MemoryPlan(mb, requested, section.memory_limit_gib, estimate / GIB,
                      None if probed is None else probed / GIB, how)
    return plan, batch.with_micro_batch(mb)


def enforce_limit(limit_gib: float, device_index: int = 0) -> float | None:
    """Cap this process's CUDA caching allocator at ``limit_gib`` when the card is larger.

    Returns:
        The fraction set (``torch.cuda.set_per_process_memory_fraction``), or None when the card
        is not larger than the limit (nothing to enforce) or there is no CUDA device.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    total = torch.cuda.get_device_properties(device_index).total_memory
    if total <= limit_gib * GIB:
        return None
    fraction = limit_gib * GIB / total
    torch.cuda.set_per_process_memory_fraction(fraction, device_index)
    return fraction


def peak_memory_gib() -> float | None:
    """``torch.cuda.max_memory_reserved`` of this process in GiB, or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_reserved() / GIB, 3)
