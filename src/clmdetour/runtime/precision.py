"""A job's numeric precision outside Composer's Trainer: the autocast of its checks and probes.

The Trainer applies ``pretraining.precision`` (a phase) or ``evaluation.precision`` (a fine-tuning job,
through :func:`effective_precision`) itself (Composer's ``amp_bf16`` / ``amp_fp16`` / ``fp32``); the
forward passes a job runs before it (the attention self-check, a phase's memory probe step) use
:func:`autocast` so that they measure what training will run.
"""

from __future__ import annotations

import contextlib

import torch

#: Composer precisions that autocast on CUDA, and the dtype each computes in.
AUTOCAST_DTYPES = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}


#: What ``precision: auto`` (evaluation.precision) means on a CUDA device.
AUTO_GPU_PRECISION = "amp_bf16"


def effective_precision(requested: str, on_gpu: bool) -> str:
    """The Composer precision a job runs in: ``fp32`` on the CPU whatever was requested (bf16 autocast is
    slower there, and every CPU run is fp32), else ``requested``, ``auto`` meaning :data:`AUTO_GPU_PRECISION`."""
    if not on_gpu:
        return "fp32"
    return AUTO_GPU_PRECISION if requested == "auto" else requested


def autocast(on_gpu: bool, precision: str):
    """The autocast context of ``precision`` (a Composer precision string) on CUDA; a null context on the
    CPU (phases train in fp32 there) or for ``fp32``."""
    if on_gpu and precision in AUTOCAST_DTYPES:
        return torch.autocast("cuda", dtype=AUTOCAST_DTYPES[precision])
    return contextlib.nullcontext()
