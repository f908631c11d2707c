"""clmdetour.training.flops: 6N + attention FLOPs per token, global and sliding-window layers counted apart."""

import pytest
import torch
from helpers import tiny_modernbert_config

from clmdetour.training.flops import PEAK_FLOPS, model_flops_per_token, peak_flops

torch.set_num_threads(1)


def _config(**kw):
    base = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 6, "intermediate_size": 96,
            "global_attn_every_n_layers": 3, "max_position_embeddings": 512}
    return tiny_modernbert_config(**dict(base, **kw))


def _matmul_params(model):
    """Weights of every Linear in the encoder layers and the head's dense layer, counted on the real model."""
    layers = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    return layers


def _expected(cfg, model, seq, fraction):
    """6 N + 6 x (decoder + head dense) x fraction + 12 d ctx per layer, layer kinds read from the model's config."""
    d = cfg.hidden_size
    attn = 0
    for kind in cfg.layer_types:
        ctx = seq if kind == "full_attention" else min(seq, cfg.local_attention)
        attn += 12 * d * ctx
    head = model.decoder.weight.numel() + model.head.dense.weight.numel()
    return 6 * (_matmul_params(model) + head * fraction) + attn


@pytest.mark.parametrize("seq,fraction", [(8, 1.0), (256, 1.0), (256, 0.15), (4096, 0.15)])
def test_flops_match_parameter_count_of_real_model(seq, fraction):
    from transformers import ModernBertForMaskedLM

    cfg = _config()
    model = ModernBertForMaskedLM(cfg)
    assert model.decoder.weight.shape == (cfg.vocab_size, cfg.hidden_size)
    assert model_flops_per_token(cfg, seq, fraction) == pytest.approx(_expected(cfg, model, seq, fraction), rel=1e-12)


def test_global_and_sliding_layers_counted_separately():
    cfg = _config()  # layers 0 and 3 global, 1, 2, 4, 5 sliding (window 16)
    d = cfg.hidden_size
    short = model_flops_per_token(cfg, 16, 1.0)  # every layer sees 16 positions
    long = model_flops_per_token(cfg, 1024, 1.0)
    # only the 2 global layers grow with the sequence: 12 d (1024 - 16) each
    assert long - short == pytest.approx(2 * 12 * d * (1024 - 16))
    all_global = model_flops_per_token(_config(global_attn_every_n_layers=1), 1024, 1.0)
    assert all_global - long == pytest.approx(4 * 12 * d * (1024 - 16))


def test_base_150m_configuration_has_about_110m_non_embedding_parameters():
    # ModernBERT-base: 149M parameters, 50,368 x 768 = 38.7M of them in the embeddings
    cfg = _config(vocab_size=50368, hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                  intermediate_size=1152, local_attention=128, max_position_embeddings=8192)
    seq = 8192
    attn = sum(12 * 768 * (seq if k == "full_attention" else 128) for k in cfg.layer_types)
    n = (model_flops_per_token(cfg, seq, 0.0) - attn) / 6
    assert 108e6 < n < 112e6
    # CLM predicts every position: the head (dense + decoder) adds 6 x (768^2 + 768 x 50,368) FLOPs per token
    assert model_flops_per_token(cfg, seq, 1.0) - model_flops_per_token(cfg, seq, 0.0) == pytest.approx(
        6 * (768 * 768 + 768 * 50368))


def test_peak_flops_by_device_name():
    assert peak_flops("NVIDIA H100 80GB HBM3") == PEAK_FLOPS["H100"] == 989e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12 and peak_flops("NVIDIA H100 NVL") == 835e12
    assert peak_flops("NVIDIA H200") == 989e12
    assert peak_flops("NVIDIA A100-SXM4-80GB") == 312e12  # not matched as "A10"
    assert peak_flops("NVIDIA A10") == 125e12
    assert peak_flops("Some CPU") is None
    if not torch.cuda.is_available():
        assert peak_flops() is None


def test_mfu_of_a_logged_rate():
    """MFU as TrainLog computes it: tokens/s x FLOPs per token / (devices x peak)."""
    cfg = _config()
    fpt = model_flops_per_token(cfg, 512, 1.0)
    tokens_per_s, devices = 1.0e6, 4
    mfu = tokens_per_s * fpt / (devices * peak_flops("NVIDIA H100 80GB HBM3"))
    assert mfu == pytest.approx(1.0e6 * fpt / (4 * 989e12))
    assert 0 < mfu < 1
