"""clmdetour.runtime.optim: the fused DecoupledAdamW trains as Composer's DecoupledAdamW and shares its state."""

import copy

import pytest
import torch
from composer.optim import DecoupledAdamW
from helpers import tiny_modernbert_config

from clmdetour.modeling.freeze import optimizer_param_groups
from clmdetour.runtime.optim import FusedDecoupledAdamW
from clmdetour.training.checkpoints import load_optimizer_by_name as _load_optimizer_by_name
from clmdetour.training.checkpoints import save_optimizer_by_name as _save_optimizer_by_name

torch.set_num_threads(1)
TOLERANCE = 1e-6  # issue 31: max |weight difference| after 5 fp32 steps
WEIGHT_DECAY = 5e-4  # large enough that a coupled (lr-scaled) decay would differ by far more than TOLERANCE
LRS = [1e-3, 2e-3, 1.5e-3, 5e-4, 2.5e-4, 1e-4, 3e-3]  # a schedule: the decay follows lr / initial_lr


def tiny_model(seed=0):
    from transformers import ModernBertForMaskedLM

    torch.manual_seed(seed)
    cfg = tiny_modernbert_config(64, intermediate_size=48, global_attn_every_n_layers=2, local_attention=8,
                                 max_position_embeddings=32)
    return ModernBertForMaskedLM(cfg)


def batch(step):
    g = torch.Generator().manual_seed(100 + step)
    ids = torch.randint(3, 64, (2, 16), generator=g)
    return ids, ids.clone()


def train(model, opt, steps, start=0):
    """``steps`` fp32 steps of MLM-style loss (labels = inputs) with the lr of ``LRS`` at each step."""
    model.train()
    for s in range(start, start + steps):
        for group in opt.param_groups:
            group["lr"] = LRS[s]
        ids, labels = batch(s)
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
    return model


def max_diff(a, b):
    return max(float((p.detach() - q.detach()).abs().max()) for p, q in zip(a.parameters(), b.parameters()))


def make(cls, model, **kw):
    return cls(optimizer_param_groups(model, WEIGHT_DECAY), lr=LRS[0], betas=(0.9, 0.98), eps=1e-6,
               weight_decay=WEIGHT_DECAY, **kw)


@pytest.mark.parametrize("amsgrad", [False, True])
def test_five_fp32_steps_match_composer(amsgrad):
    start = tiny_model()
    ours_model = copy.deepcopy(start)
    ours = train(ours_model, make(FusedDecoupledAdamW, ours_model, amsgrad=amsgrad), 5)
    ref_model = copy.deepcopy(start)
    ref = train(ref_model, make(DecoupledAdamW, ref_model, amsgrad=amsgrad), 5)
    assert max_diff(ref, start) > 1e-3  # the weights did move
    assert max_diff(ours, ref) <= TOLERANCE
    # the check tells optimizers apart: torch's AdamW with the same weight_decay (coupled to lr) is far off
    coupled_model = copy.deepcopy(start)
    coupled = train(coupled_model, make(torch.optim.AdamW, coupled_model, amsgrad=amsgrad), 5)
    assert max_diff(coupled, ref) > 100 * TOLERANCE


def test_frozen_and_gradless_parameters_are_left_alone():
    """Parameters without a gradient keep their weights and state; the others' steps advance as Composer's."""
    start = tiny_model()
    models = [copy.deepcopy(start), copy.deepcopy(start)]
    opts = [make(FusedDecoupledAdamW, models[0]), make(DecoupledAdamW, models[1])]
    for m, opt in zip(models, opts):
        m.head.dense.weight.requires_grad_(False)
        train(m, opt, 2)
        m.model.final_norm.weight.grad = None  # no gradient on this step
        opt.step()
    assert torch.equal(models[0].head.dense.weight, start.head.dense.weight)
    assert max_diff(*models) <= TOLERANCE
    for p0, p1 in zip(models[0].parameters(), models[1].parameters()):
        s0, s1 = opts[0].state.get(p0, {}), opts[1].state.get(p1, {})
        assert s0.keys() == s1.keys()
        if s0:
            assert float(s0["step"]) == float(s1["step"])
    assert float(opts[0].state[models[0].model.final_norm.weight]["step"]) == 2


def test_zero_initial_lr_uses_composer_update_exactly():
    """A decayed group whose first lr is 0 (Composer then decays unscaled, which torch's kernel cannot express)
    is updated by Composer's own code: bit-identical; the undecayed group takes the kernel."""
    start = tiny_model()
    models = [copy.deepcopy(start), copy.deepcopy(start)]
    for m, cls in zip(models, (FusedDecoupledAdamW, DecoupledAdamW)):
        opt = cls(optimizer_param_groups(m, WEIGHT_DECAY), lr=0.0, weight_decay=WEIGHT_DECAY)
        for s in range(3):
            opt.param_groups[0]["lr"] = opt.param_groups[1]["lr"] = LRS[s]
            ids, labels = batch(s)
            opt.zero_grad(set_to_none=True)
            m(input_ids=ids, labels=labels).loss.backward()
            opt.step()
    decayed = [[p for p in m.parameters() if p.ndim >= 2] for m in models]  # optimizer_param_groups' rule
    assert all(torch.equal(p, q) for p, q in zip(*decayed))
    assert max_diff(*models) <= TOLERANCE
    assert max_diff(models[0], start) > 1e-4


def test_state_is_composers_and_round_trips(tmp_path):
    """Same state keys, dtypes and shapes as Composer's; a state saved by either loads into the other and
    training continues as if uninterrupted (Composer checkpoints: state_dict; phase 1 -> decay: by name)."""
    start = tiny_model()
    m_ours, m_ref = copy.deepcopy(start), copy.deepcopy(start)
    ours, ref = make(FusedDecoupledAdamW, m_ours), make(DecoupledAdamW, m_ref)
    train(m_ours, ours, 3)
    train(m_ref, ref, 3)
    sd_ours, sd_ref = ours.state_dict(), ref.state_dict()
    assert sd_ours["param_groups"] == sd_ref["param_groups"]
    assert sd_ours["state"].keys() == sd_ref["state"].keys()
    for k, s in sd_ours["state"].items():
        assert s.keys() == sd_ref["state"][k].keys() == {"step", "exp_avg", "exp_avg_sq"}
        for key, v in s.items():
            assert v.dtype == sd_ref["state"][k][key].dtype and v.shape == sd_ref["state"][k][key].shape

    # Composer checkpoint round trip, across the classes both ways: continue 2 steps.
    crossed_ref = make(DecoupledAdamW, m_cross_ref := copy.deepcopy(m_ours))
    crossed_ref.load_state_dict(copy.deepcopy(sd_ours))
    crossed_ours = make(FusedDecoupledAdamW, m_cross_ours := copy.deepcopy(m_ref))
    crossed_ours.load_state_dict(copy.deepcopy(sd_ref))
    train(m_ours, ours, 2, start=3)
    train(m_cross_ref, crossed_ref, 2, start=3)
    train(m_cross_ours, crossed_ours, 2, start=3)
    assert max_diff(m_ours, m_cross_ref) <= TOLERANCE
    assert max_diff(m_ours, m_cross_ours) <= TOLERANCE

    # The phase's by-name save/load (phase 1's final state into the decay's fresh optimizer).
    continued = copy.deepcopy(m_ours)
    fresh = make(FusedDecoupledAdamW, continued)
    path = tmp_path / "final_optimizer.pt"
    _save_optimizer_by_name(ours, m_ours, path)
    assert _load_optimizer_by_name(fresh, continued, path) == len(list(continued.parameters()))
    train(m_ours, ours, 2, start=5)
    train(continued, fresh, 2, start=5)
    assert max_diff(m_ours, continued) == 0.0  # same class, same state: bit-identical continuation
