"""Model FLOPs per token and MFU for ModernBERT.

FLOPs per trained token = 6 N + attention, with N the non-embedding parameter
count (Kaplan et al. 2020: 2 N forward + 4 N backward), and the attention
score/value products counted per layer as 12 x d_model x context (PaLM,
Chowdhery et al. 2022, appendix B: 6 x 2 x d x context forward+backward),
where context = sequence length for global layers and
min(sequence, local_attention) for sliding-window layers. The vocabulary
projection is counted through the decoder's parameters (tied to the
embeddings) for the positions that are predicted: all of them in CLM,
the masking rate in MLM with sparse prediction.
"""

from __future__ import annotations

import torch

# Dense bf16 peak of one device (FLOP/s), from vendor datasheets (no sparsity).
PEAK_FLOPS = {"H100 PCIe": 756e12, "H100 NVL": 835e12, "H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12}


def model_flops_per_token(config, seq_len: int, predicted_fraction: float = 1.0) -> float:
    """Training FLOPs per input token (forward + backward).

    Args:
        config: a ModernBertConfig.
        seq_len: sequence length (tokens).
        predicted_fraction: fraction of positions through the LM head (CLM 1.0, MLM 0.15).
    """
    d, n_layers = config.hidden_size, config.num_hidden_layers
    per_layer = 4 * d * d + 3 * d * config.intermediate_size  # Wqkv + Wo, GLU MLP (Wi is 2 x d x i, Wo i x d)
    n_body = n_layers * per_layer
    head = (config.vocab_size * d + d * d) * predicted_fraction  # decoder + head dense, predicted positions only
    attn = 0.0
    for i in range(n_layers):
        is_global = i % config.global_attn_every_n_layers == 0
        ctx = seq_len if is_global else min(seq_len, config.local_attention)
        attn += 12 * d * ctx
    return 6 * (n_body + head) + attn


def peak_flops(device_name: str | None = None) -> float | None:
    """Peak bf16 FLOP/s of the current CUDA device by name, or None if unknown / CPU."""
    if device_name is None:
        if not torch.cuda.is_available():
            return None
        device_name = torch.cuda.get_device_name()
    for key, value in PEAK_FLOPS.items():
        if key in device_name:
            return value
    return None
