import pytest
import torch
from transformers import ModernBertForMaskedLM

from clmdetour.modeling.causal import CausalityError, check_causality, forward_encoder, set_causal

IMPLS = ["sdpa", "eager"]
try:
    import flash_attn  # noqa: F401

    if torch.cuda.is_available():
        IMPLS.append("flash_attention_2")
except ImportError:
    pass


def _model(tiny_model_dir, impl):
    device = "cuda" if impl == "flash_attention_2" else "cpu"
    dtype = torch.bfloat16 if impl == "flash_attention_2" else torch.float32
    return ModernBertForMaskedLM.from_pretrained(tiny_model_dir, attn_implementation=impl, dtype=dtype).to(device).eval()


@pytest.mark.parametrize("impl", IMPLS)
def test_future_tokens_do_not_change_past_positions(tiny_model_dir, impl):
    """Sequence longer than the local window, so sliding-window layers are exercised too."""
    model = _model(tiny_model_dir, impl)
    device = next(model.parameters()).device
    torch.manual_seed(0)
    ids = torch.randint(5, model.config.vocab_size, (2, 48), device=device)
    t = 20
    changed = ids.clone()
    changed[:, t + 1:] = torch.randint(5, model.config.vocab_size, changed[:, t + 1:].shape, device=device)
    with torch.no_grad():
        a = forward_encoder(model, ids, causal=True).last_hidden_state
        b = forward_encoder(model, changed, causal=True).last_hidden_state
        assert torch.allclose(a[:, : t + 1], b[:, : t + 1], atol=1e-5)
        assert not torch.allclose(a[:, t + 1:], b[:, t + 1:], atol=1e-5)
        # Without the causal mask the past does see the future.
        c = forward_encoder(model, ids, causal=False).last_hidden_state
        d = forward_encoder(model, changed, causal=False).last_hidden_state
        assert (c[:, : t + 1] - d[:, : t + 1]).abs().max() > 1e-4
    assert check_causality(model, ids) <= 1e-5


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_causal_with_padding(tiny_model_dir, impl):
    model = _model(tiny_model_dir, impl)
    ids = torch.randint(5, model.config.vocab_size, (2, 40))
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0
    assert check_causality(model, ids, mask, position=12) <= 1e-5


def test_check_detects_a_leak(tiny_model_dir, monkeypatch):
    """If the causal path were bidirectional, the pre-training check must stop the run."""
    from clmdetour.modeling import causal

    model = _model(tiny_model_dir, "sdpa")
    monkeypatch.setattr(causal, "causal_mask_mapping", lambda enc, ids, mask, doc_ids=None: mask)
    monkeypatch.setattr(causal, "set_causal", lambda m, c: 0)
    with pytest.raises(CausalityError, match="leaks"):
        causal.check_causality(model, torch.randint(5, 500, (1, 40)))


def test_set_causal_flips_every_layer(tiny_model_dir):
    model = _model(tiny_model_dir, "sdpa")
    assert set_causal(model, True) == model.config.num_hidden_layers
    assert all(m.is_causal for m in model.modules() if hasattr(m, "Wqkv"))
    set_causal(model, False)
    assert not any(m.is_causal for m in model.modules() if hasattr(m, "Wqkv"))


def _visible(mask: torch.Tensor) -> torch.Tensor:
    """(q, kv) booleans: True where the 4-D mask lets query q see key kv (boolean or additive masks)."""
    m = mask[0, 0]
    return m if m.dtype == torch.bool else m == 0


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_causal_sliding_window_is_the_left_half_of_the_bidirectional_one(tiny_model_dir, impl):
    """ModernBERT's local layers keep |q - kv| <= sliding_window; the causal ones keep q - sliding_window .. q."""
    from transformers.masking_utils import create_bidirectional_sliding_window_mask

    from clmdetour.modeling.causal import causal_mask_mapping, encoder_of

    model = _model(tiny_model_dir, impl)
    enc = encoder_of(model)
    w = enc.config.sliding_window
    n = 3 * w + 5
    ids = torch.randint(5, enc.config.vocab_size, (1, n))
    attention = torch.ones_like(ids)
    causal = _visible(causal_mask_mapping(enc, ids, attention)["sliding_attention"])
    embeds = torch.empty((1, n, 1), dtype=torch.float32)
    bidirectional = create_bidirectional_sliding_window_mask(config=enc.config, inputs_embeds=embeds,
                                                             attention_mask=attention)
    bidirectional = _visible(bidirectional) if bidirectional is not None else None
    q = torch.arange(n).unsqueeze(1)
    kv = torch.arange(n).unsqueeze(0)
    assert torch.equal(causal, (kv <= q) & (kv >= q - w)), f"window {w}: {causal.sum(1).tolist()}"
    assert int(causal[n - 1].sum()) == w + 1  # w positions to the left plus self
    if bidirectional is not None:
        assert torch.equal(causal, bidirectional & (kv <= q))
    else:  # the back-end applies the window itself; ModernBERT's rule then holds by construction
        assert impl == "sdpa"
