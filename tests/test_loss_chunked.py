"""clmdetour.modeling.loss: the chunked LM loss equals the unchunked one and never holds full logits."""

from pathlib import Path

import pytest
import torch
from helpers import tiny_modernbert_config

from clmdetour.modeling.loss import IGNORE_INDEX, chunked_lm_loss, unchunked_lm_loss

torch.set_num_threads(1)
VOCAB, HIDDEN = 97, 16


def _head(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.GELU(), torch.nn.LayerNorm(HIDDEN),
                               torch.nn.Linear(HIDDEN, VOCAB))


def _batch(objective, batch=2, seq=50, seed=1):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, seq, HIDDEN, generator=g)
    labels = torch.randint(0, VOCAB, (batch, seq), generator=g)
    if objective == "clm":
        labels[:, -1] = IGNORE_INDEX  # last position has no next token
        labels[0, 20] = IGNORE_INDEX  # a document boundary
    else:
        labels[torch.rand(batch, seq, generator=g) >= 0.15] = IGNORE_INDEX
    return hidden, labels


def assert_grad_close(got, ref, msg=""):
    """Elementwise rtol 1e-5, with an absolute floor of 1e-5 x the tensor's largest entry.

    A parameter gradient is a sum over positions; chunking changes the
    summation order, so entries that cancel to ~0 differ by float rounding
    (~1e-8) while the tensor as a whole agrees to ~1e-7 relative.
    """
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()), msg=msg or None)


def _loss_and_grads(fn, head, hidden, labels):
    head.zero_grad(set_to_none=True)
    h = hidden.clone().requires_grad_(True)
    loss = fn(h, labels, head)
    loss.backward()
    return loss.detach(), h.grad.clone(), [p.grad.clone() for p in head.parameters()]


@pytest.mark.parametrize("objective", ["clm", "mlm"])
@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
def test_chunked_equals_unchunked_loss_and_gradients(objective, chunk):
    head = _head()
    hidden, labels = _batch(objective)
    ref = _loss_and_grads(unchunked_lm_loss, head, hidden, labels)
    got = _loss_and_grads(lambda h, y, p: chunked_lm_loss(h, y, p, chunk_tokens=chunk), head, hidden, labels)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=0)
    assert_grad_close(got[1], ref[1])
    for g, r in zip(got[2], ref[2]):
        assert_grad_close(g, r)


def test_chunked_equals_unchunked_through_modernbert_head_with_tied_decoder():
    from transformers import ModernBertForMaskedLM

    torch.manual_seed(0)
    cfg = tiny_modernbert_config(VOCAB, hidden_size=HIDDEN, num_hidden_layers=1, intermediate_size=32, local_attention=128,
                                 max_position_embeddings=64)
    model = ModernBertForMaskedLM(cfg)
    assert model.decoder.weight is model.model.embeddings.tok_embeddings.weight  # tied, as in training
    hidden, labels = _batch("clm")

    def run(fn):
        model.zero_grad(set_to_none=True)
        loss = fn(hidden, labels, lambda h: model.decoder(model.head(h)))
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    ref_loss, ref_grads = run(unchunked_lm_loss)
    loss, grads = run(lambda h, y, p: chunked_lm_loss(h, y, p, chunk_tokens=9))
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=0)
    assert grads.keys() == ref_grads.keys() and "model.embeddings.tok_embeddings.weight" in grads
    for name in ref_grads:
        assert_grad_close(grads[name], ref_grads[name], msg=name)


def _largest_saved_and_projected(fn, chunk_tokens=None):
    """Largest tensor autograd keeps for backward, and most rows the projection ever receives."""
    head = _head()
    rows_seen = []

    def project(h):
        rows_seen.append(h.shape[:-1].numel())
        return head(h)

    hidden, labels = _batch("clm", batch=2, seq=200)
    h = hidden.requires_grad_(True)
    saved = []

    def pack(t):
        saved.append(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(h, labels, project) if chunk_tokens is None else fn(h, labels, project, chunk_tokens)
    loss.backward()  # recomputation inside backward runs outside the hook: not part of what is kept
    return max(s.numel() for s in saved), max(rows_seen), int((labels != IGNORE_INDEX).sum()), saved


def test_chunked_loss_keeps_no_full_logits_memory_independent():
    """Checked on tensor sizes, not on process memory: what is kept for backward holds one chunk of logits
    at most, the last chunk's (the others are recomputed in backward)."""
    chunk = 32
    saved, rows, n, all_saved = _largest_saved_and_projected(chunked_lm_loss, chunk)
    last = n - (n - 1) // chunk * chunk  # rows of the last chunk
    assert 0 < last < chunk  # (the batch is chosen so: a short last chunk tells it apart from the others)
    assert rows <= chunk  # the projection (and so the logits) never sees more than a chunk
    assert last != HIDDEN  # ((HIDDEN, VOCAB) is the decoder weight's transpose, kept by its matmul)
    logits_shaped = [tuple(t) for t in all_saved if len(t) == 2 and t[-1] == VOCAB and tuple(t) != (HIDDEN, VOCAB)]
    assert logits_shaped and set(logits_shaped) == {(last, VOCAB)}  # only the last chunk's logits are kept
    assert saved <= chunk * VOCAB
    # the same probe sees the full logits in the unchunked computation (so the check can fail)
    saved_full, rows_full, _, _ = _largest_saved_and_projected(unchunked_lm_loss)
    assert rows_full == 400 and saved_full >= n * VOCAB


def test_one_chunk_is_not_recomputed():
    """Labels that fit in one chunk: the projection runs once (no recomputation in backward),
    and the loss and gradients are those of the unchunked loss."""
    head = _head()
    calls = []

    def project(h):
        calls.append(h.shape[0])
        return head(h)

    hidden, labels = _batch("clm")
    n = int((labels != IGNORE_INDEX).sum())
    ref_loss, ref_h, ref_params = _loss_and_grads(unchunked_lm_loss, head, hidden, labels)
    loss, h_grad, params = _loss_and_grads(lambda h, y, p: chunked_lm_loss(h, y, project, chunk_tokens=n), head,
                                           hidden, labels)
    assert calls == [n]
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=0)
    assert_grad_close(h_grad, ref_h)
    for g, r in zip(params, ref_params):
        assert_grad_close(g, r)


def test_no_labelled_position_gives_zero_loss_with_graph():
    head = _head()
    hidden = torch.randn(1, 10, HIDDEN, requires_grad=True)
    labels = torch.full((1, 10), IGNORE_INDEX)
    loss = chunked_lm_loss(hidden, labels, head, chunk_tokens=4)
    loss.backward()
    assert float(loss.detach()) == 0.0 and torch.count_nonzero(hidden.grad) == 0


def test_bad_arguments_raise():
    head = _head()
    hidden, labels = _batch("clm")
    with pytest.raises(ValueError, match="chunk_tokens must be positive"):
        chunked_lm_loss(hidden, labels, head, chunk_tokens=0)
    with pytest.raises(ValueError, match="disagree"):
        chunked_lm_loss(hidden, labels[:, :-1], head)


def test_the_default_chunk_is_the_schema_default():
    from clmdetour.config import load_yaml, validate_config
    from clmdetour.modeling.loss import CHUNK_TOKENS

    config = validate_config(load_yaml(Path(__file__).resolve().parents[1] / "config" / "config.yaml"))
    assert config["pretraining"]["loss_chunk_tokens"] == CHUNK_TOKENS


@pytest.mark.slow  # torch.compile of the loss on the CPU: 13 s (the unit stage keeps its 5-minute budget)
def test_compiled_cross_entropy_equals_the_eager_loss_and_gradients_fp32():
    """The compiled GPU path's loss (each chunk's cross-entropy under torch.compile) equals the eager one at fp32."""
    import time

    import torch

    from clmdetour.modeling.loss import chunked_lm_loss

    torch.manual_seed(0)
    proj = torch.nn.Linear(16, 50)
    hidden = torch.randn(2, 37, 16, requires_grad=True)
    labels = torch.randint(0, 50, (2, 37))
    labels[0, :5] = -100
    grads = []
    losses = []
    t0 = time.perf_counter()
    for compiled in (False, True, True):  # twice compiled: a second chunk layout reuses the dynamic graph
        hidden.grad = None
        proj.zero_grad()
        loss = chunked_lm_loss(hidden, labels, proj, chunk_tokens=16, compiled=compiled)
        loss.backward()
        losses.append(loss.detach())
        grads.append((hidden.grad.clone(), proj.weight.grad.clone()))
    assert time.perf_counter() - t0 < 120
    for loss, (gh, gw) in zip(losses[1:], grads[1:]):
        torch.testing.assert_close(loss, losses[0], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(gh, grads[0][0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(gw, grads[0][1], rtol=1e-5, atol=1e-6)
    from clmdetour.modeling import loss as L

    assert not L._COMPILE_FAILED, L._COMPILE_FAILED  # it compiled, it did not fall back to eager
