"""The micro-batch of a fine-tuning job, planned under the memory cap pretraining uses.

A grid job trains with the task's ``finetune.batch_size`` (the paper config: 16 sequences). At 8,192 tokens
a step of the 150M base at that batch is estimated at about 80 GiB, over an 80 GB H100; so the job splits each
batch into micro-batches (Composer's ``device_train_microbatch_size``, gradient accumulation: the batch, and
so the results, stay those of ``batch_size``). The micro-batch is the largest divisor of the batch whose step
:func:`clmdetour.runtime.memory.estimate_step_bytes` puts under ``pretraining.memory_limit_gib`` (72 GiB by
default), with no LM head (a classifier's head is a few thousand parameters) and every input at the job's
``max_length`` (the longest batch: an upper bound). Units: bytes in the functions, GiB in records.
"""

from __future__ import annotations

from pathlib import Path

from clmdetour.config import ConfigError
from clmdetour.runtime.memory import GIB, MemoryPlan, estimate_step_bytes, plan_micro_batch

#: ``pretraining.memory_limit_gib``'s default (workflow/schemas/pretrain.schema.yaml), used when no limit is given.
DEFAULT_MEMORY_LIMIT_GIB = 72.0


def encoder_sizes(model_dir: str | Path) -> dict:
    """The sizes the estimate needs, read from ``model_dir/config.json`` (parameters counted on the meta
    device, nothing allocated): ``parameters``, ``hidden_size``, ``intermediate_size``, ``num_layers``.

    Raises:
        OSError: no readable config in ``model_dir`` (transformers' error names the folder).
    """
    import torch
    from transformers import AutoConfig, AutoModel

    cfg = AutoConfig.from_pretrained(str(model_dir))
    with torch.device("meta"):
        parameters = sum(p.numel() for p in AutoModel.from_config(cfg).parameters())
    return {"parameters": parameters, "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
            "num_layers": cfg.num_hidden_layers}


def plan_finetune_micro_batch(sizes: dict, max_length: int, batch_size: int, limit_gib: float,
                              activation_bytes: int) -> MemoryPlan:
    """The largest micro-batch dividing ``batch_size`` whose step fits under ``limit_gib``.

    Args:
        sizes: :func:`encoder_sizes`.
        max_length: tokens per input at most (the job's resolved ``max_length``).
        batch_size: sequences per optimizer step (the task's ``finetune.batch_size``).
        limit_gib: GiB per device (``pretraining.memory_limit_gib``).
        activation_bytes: 2 under bf16/fp16 autocast, 4 in fp32.

    Returns:
        A :class:`clmdetour.runtime.memory.MemoryPlan` (no probe: ``probe_gib`` None).

    Raises:
        ConfigError: not even one input of ``max_length`` fits, naming the keys to change.
    """
    def bytes_of(mb: int) -> int:
        return estimate_step_bytes(parameters=sizes["parameters"], hidden_size=sizes["hidden_size"],
                                   intermediate_size=sizes["intermediate_size"], num_layers=sizes["num_layers"],
                                   vocab_size=0, seq_len=max_length, micro_batch=mb, chunk_tokens=0,
                                   activation_bytes=activation_bytes)

    try:
        mb, estimate, _ = plan_micro_batch(batch_size, limit_gib * GIB, bytes_of)
    except ConfigError as e:
        raise ConfigError(f"fine-tuning at max_length {max_length}: one input is estimated at "
                          f"{bytes_of(1) / GIB:.1f} GiB, over pretraining.memory_limit_gib ({limit_gib:g} GiB); lower "
                          "the task's max_length or raise the limit") from e
    how = ("the batch in one pass" if mb == batch_size else
           f"{batch_size // mb} micro-batches of {mb} (gradient accumulation), estimated")
    return MemoryPlan(mb, batch_size, limit_gib, estimate / GIB, None, how)
