"""The batch plan (issue 48 item 4): one division rule, used at planning (messages name the config keys)
and by the phase job (messages name the section keys and the world size), with the same arithmetic."""
import copy

import pytest
from helpers import REPO

from clmdetour.config import (
    BatchPlan,
    ConfigError,
    check_batch_division,
    deep_merge,
    load_yaml,
    plan_batch,
    resolve_phase,
    validate_config,
)
from clmdetour.settings import PhaseSettings
from clmdetour.training.phase import batch_arithmetic


def _paper(**cluster) -> dict:
    cfg = load_yaml(REPO / "config/config.yaml")
    cfg["base_model"]["hub_id"] = "org/model"
    cfg["cluster"] = dict(cfg.get("cluster") or {}, **cluster)
    return cfg


def test_the_plan_splits_the_global_batch_and_counts_the_accumulation():
    plan = plan_batch(384, 8, 12)
    assert (plan.per_device, plan.micro_batch, plan.grad_accum) == (32, 8, 4)
    assert plan.as_dict() == {"global": 384, "micro": 8, "per_device": 32, "grad_accum": 4}
    auto = plan_batch(384, "auto", 12)
    assert (auto.micro_batch, auto.grad_accum, auto.per_device) == (None, None, 32)
    assert auto.with_micro_batch(16) == BatchPlan(384, 12, 16) and auto.with_micro_batch(16).grad_accum == 2


def test_the_job_wording_names_the_section_keys_and_the_world_size():
    with pytest.raises(ConfigError, match=r"^global_batch_sequences=10 is not divisible by the world size 4$"):
        plan_batch(10, "auto", 4)
    with pytest.raises(ConfigError, match=r"^per-device batch 8 \(= 16 / 2 devices\) is not a multiple of "
                                          r"micro_batch_sequences=3$"):
        plan_batch(16, 3, 2)
    # the job has no separate "smaller than" message: the per-device refusal says it
    with pytest.raises(ConfigError, match=r"^per-device batch 4 \(= 4 / 1 devices\) is not a multiple of "
                                          r"micro_batch_sequences=8$"):
        plan_batch(4, 8, 1)
    with pytest.raises(ConfigError, match="is not a multiple"):
        plan_batch(16, 8, 1).with_micro_batch(3)


def test_the_phase_job_uses_the_same_plan():
    cfg = validate_config(deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml")))
    resolved = resolve_phase(cfg, "clm-detour", "phase1")
    section = PhaseSettings.from_dict(dict(resolved, global_batch_sequences=16, micro_batch_sequences=4))
    assert batch_arithmetic(section, 2) == plan_batch(16, 4, 2) == BatchPlan(16, 2, 4)
    with pytest.raises(ConfigError, match="is not divisible by the world size 3"):
        batch_arithmetic(section, 3)


def test_planning_names_the_keys_in_the_order_the_rule_checks_them():
    cfg = _paper(pretrain_nodes=1, pretrain_gpus=4)
    cfg["pretraining"]["variants"]["clm-detour"]["phase1"]["micro_batch_sequences"] = 512
    with pytest.raises(ConfigError, match=r"^pretraining.variants.clm-detour.phase1: global_batch_sequences \(384\) "
                                          r"is smaller than micro_batch_sequences \(512\)$"):
        validate_config(copy.deepcopy(cfg))
    cfg["pretraining"]["variants"]["clm-detour"]["phase1"]["micro_batch_sequences"] = 7
    with pytest.raises(ConfigError) as e:
        validate_config(cfg)
    assert str(e.value) == ("pretraining.variants.clm-detour.phase1.micro_batch_sequences (7) does not divide the "
                            "per-device batch 96 (= pretraining.global_batch_sequences 384 / (cluster.pretrain_nodes x "
                            "cluster.pretrain_gpus = 1 x 4)); choose a divisor of 96")


def test_planning_returns_the_plan_the_job_computes_on_the_planned_ranks():
    cfg = validate_config(_paper(pretrain_nodes=2, pretrain_gpus=4))
    section = resolve_phase(cfg, "clm-detour", "phase1")
    planned = check_batch_division(cfg, "clm-detour", "phase1", section)
    assert planned == batch_arithmetic(PhaseSettings.from_dict(section), 8)
    assert planned.ranks == 8 and planned.per_device == section["global_batch_sequences"] // 8
