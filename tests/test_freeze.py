import pytest
import torch
from composer.optim import DecoupledAdamW
from transformers import ModernBertForMaskedLM

from clmdetour.config import ConfigError
from clmdetour.modeling.causal import forward_encoder
from clmdetour.modeling.freeze import apply_freeze, optimizer_param_groups
from clmdetour.modeling.loss import chunked_lm_loss
from clmdetour.training.collators import clm_labels


def test_frozen_parameters_are_bit_identical_after_training(tiny_model_dir):
    model = ModernBertForMaskedLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    frozen = apply_freeze(model, ["embeddings", "0-1"])
    assert "model.embeddings.tok_embeddings.weight" in frozen
    assert any(n.startswith("model.layers.1.") for n in frozen)
    assert not any(n.startswith("model.layers.2.") for n in frozen)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = DecoupledAdamW(optimizer_param_groups(model, 1e-2), lr=1e-2, weight_decay=1e-2)
    torch.manual_seed(0)
    for _ in range(3):
        ids = torch.randint(5, model.config.vocab_size, (4, 32))
        hidden = forward_encoder(model, ids, causal=True).last_hidden_state
        loss = chunked_lm_loss(hidden, clm_labels(ids, torch.ones_like(ids), 2),
                               lambda h: model.decoder(model.head(h)), 16)
        loss.backward()
        opt.step()
        opt.zero_grad()
    after = dict(model.named_parameters())
    for name in frozen:
        assert torch.equal(before[name], after[name]), name
    moved = [n for n in after if n not in frozen and not torch.equal(before[n], after[n])]
    trainable = [n for n, p in after.items() if p.requires_grad]
    assert set(moved) == set(trainable)
    # the tied decoder is the frozen embedding matrix
    assert model.decoder.weight is model.model.embeddings.tok_embeddings.weight


def test_freeze_beyond_model_depth_is_an_error(tiny_model_dir):
    model = ModernBertForMaskedLM.from_pretrained(tiny_model_dir)
    with pytest.raises(ConfigError, match="model's own config"):
        apply_freeze(model, ["2-7"], "pretraining.variants.v.phase1.freeze")


def test_no_weight_decay_on_biases_and_norms(tiny_model_dir):
    model = ModernBertForMaskedLM.from_pretrained(tiny_model_dir)
    decay, no_decay = optimizer_param_groups(model, 1e-5)
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim < 2 for p in no_decay["params"])
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 1e-5
