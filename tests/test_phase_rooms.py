"""The rooms of a pretraining phase (issue #39 item 3): the micro-batch refusal names the key the user set,
and the run record is built from a typed :class:`clmdetour.training.phase.PhaseOutcome` with exactly the
keys ``run.json`` has always had."""
import dataclasses
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import REPO

from clmdetour.config import ConfigError, _deep_merge, load_yaml, resolve_phase, validate_config
from clmdetour.settings import PhaseSettings
from clmdetour.training import memory


def _demo_config(over: dict | None = None) -> dict:
    base = _deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml"))
    return validate_config(_deep_merge(base, over or {}))


class _Weights:
    """A parameter that reports a billion elements (16 GB of weights, gradients and AdamW state)."""

    requires_grad = True

    def numel(self) -> int:
        return 10**9


_HUGE_MODEL = SimpleNamespace(config=SimpleNamespace(hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
                                                     vocab_size=50368), parameters=lambda: [_Weights()])


def _refusal(monkeypatch, section: PhaseSettings, variant: str) -> str:
    """The ConfigError of :func:`clmdetour.training.memory.plan_memory` on a CUDA device (the device faked:
    the refusal is decided from the estimate before any CUDA call) for a step estimated over a 1 GiB limit."""
    import torch

    monkeypatch.setattr(memory, "enforce_limit", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    section = dataclasses.replace(section, memory_limit_gib=1)
    batch = {"global": section.global_batch_sequences, "micro": section.micro_batch_sequences,
             "per_device": section.global_batch_sequences, "grad_accum": 1}
    with pytest.raises(ConfigError) as caught:
        memory.plan_memory(_HUGE_MODEL, section, batch, True, None, variant)
    return str(caught.value)


@pytest.mark.parametrize(("over", "variant", "phase", "key"), [
    ({"pretraining": {"variants": {"clm-detour": {"phase1": {"micro_batch_sequences": 8}}}}}, "clm-detour", "phase1",
     "pretraining.variants.clm-detour.phase1.micro_batch_sequences"),
    # a phase1_from variant trains its owner's phase 1: the owner's key set the value
    ({"pretraining": {"variants": {"clm-detour": {"phase1": {"micro_batch_sequences": 8}}}}}, "clm-long-decay",
     "phase1", "pretraining.variants.clm-detour.phase1.micro_batch_sequences"),
    ({"pretraining": {"phase1": {"micro_batch_sequences": 8}}}, "clm-detour", "phase1",
     "pretraining.phase1.micro_batch_sequences"),
    ({"pretraining": {"variants": {"mlm-baseline": {"decay": {"micro_batch_sequences": 4}}}}}, "mlm-baseline", "decay",
     "pretraining.variants.mlm-baseline.decay.micro_batch_sequences"),
    ({"pretraining": {"decay": {"micro_batch_sequences": 4}}}, "mlm-baseline", "decay",
     "pretraining.decay.micro_batch_sequences"),
    ({}, "clm-detour", "phase1", "pretraining.micro_batch_sequences"),
])
def test_the_micro_batch_refusal_names_the_key_that_set_it(monkeypatch, over, variant, phase, key):
    section = PhaseSettings.from_config(_demo_config(over), variant, phase)
    assert section.micro_batch_key == key
    message = _refusal(monkeypatch, section, variant)
    assert re.match(rf"{re.escape(key)} \({section.micro_batch_sequences}\): one step is estimated at [\d.]+ GiB "
                    r"per device, over pretraining.memory_limit_gib \(1 GiB\)", message), message


def test_a_section_read_from_its_json_names_every_key_that_could_have_set_it(monkeypatch):
    """The phase job reads its section as resolved JSON (values only): the message lists the keys in the
    order they override each other instead of naming one that may not be the one set."""
    cfg = _demo_config({"pretraining": {"variants": {"clm-detour": {"phase1": {"micro_batch_sequences": 8}}}}})
    section = PhaseSettings.from_dict(json.loads(json.dumps(resolve_phase(cfg, "clm-detour", "phase1"))))
    assert section.micro_batch_key is None
    message = _refusal(monkeypatch, section, "clm-detour")
    expected = ("micro_batch_sequences of clm-detour/phase1 (pretraining.variants.clm-detour.phase1."
                "micro_batch_sequences, else pretraining.phase1.micro_batch_sequences, else "
                "pretraining.micro_batch_sequences: the first one the config sets) (8): one step")
    assert message.startswith(expected), message


def test_the_recorded_key_is_not_part_of_the_section():
    """The key changes no rule params, no run hash and no run.json: as_dict gives the resolved section back."""
    from clmdetour.training.phase import run_hash

    cfg = _demo_config({"pretraining": {"phase1": {"micro_batch_sequences": 8}}})
    resolved = resolve_phase(cfg, "clm-detour", "phase1")
    recorded = PhaseSettings.from_config(cfg, "clm-detour", "phase1")
    plain = PhaseSettings.from_dict(resolved)
    assert recorded.as_dict() == plain.as_dict() == resolved
    assert run_hash(recorded, "m", "d", 0) == run_hash(plain, "m", "d", 0)
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['micro_batch_key'\]"):
        PhaseSettings.from_dict(dict(resolved, micro_batch_key="pretraining.micro_batch_sequences"))


#: The keys of a phase's run.json (``release/records.py`` and the report read them).
RUN_KEYS = {
    "attention", "checkpoint_dir", "compile", "data_epochs", "data_hash", "device", "frozen_parameters", "git_sha",
    "global_batch_sequences", "grad_accum", "input_model", "input_model_hash", "memory", "micro_batch_sequences",
    "nodes", "objective", "offset_tokens", "optimizer_state_loaded_parameters", "optimizer_state_path",
    "peak_memory_gib", "per_device_batch_sequences", "phase", "precision", "ranks", "real_tokens", "resume",
    "resumed_from_step", "run_hash", "section", "seq_len", "steps", "tokens", "tokens_budget", "total_parameters",
    "trainable_parameters", "valid_held_out", "valid_loss_end", "valid_loss_start", "valid_sequences", "variant",
    "versions", "wall_time_s", "world_size",
}


def test_the_run_record_of_a_phase_outcome_has_the_run_json_keys_and_values():
    from clmdetour.modeling.attention import AttentionChoice
    from clmdetour.training.memory import MemoryPlan
    from clmdetour.training.phase import PhaseOutcome, phase_record

    section = PhaseSettings.from_config(_demo_config(), "clm-detour", "phase1")
    batch = {"global": 16, "micro": 8, "per_device": 16, "grad_accum": 2}
    outcome = PhaseOutcome(
        variant="clm-detour", section=section, attention=AttentionChoice("sdpa", "sdpa", "sdpa", "as configured"),
        causality_check_max_diff=0.0, frozen_parameters=[], on_gpu=False, ranks=[{"rank": 0}], precision="fp32",
        seq_len=128, batch=batch, tokens=4096, steps=2, real_tokens=4000, offset_tokens=0, data_epochs=0.123456,
        resumed_from_step=0, optimizer_state_loaded_parameters=0, valid_loss_start=6.5, valid_sequences=4,
        input_model=Path("in"), input_model_hash="h", data_hash="d", run_hash="r", checkpoint_dir=Path("ck"),
        started_at=0.0, resume={}, memory=MemoryPlan(8, 8, 72, 0.5, None, "configured"), compiled=False,
        first_step_s=0.25, valid_held_out=True)
    record = phase_record(outcome)
    assert set(record) == RUN_KEYS
    assert record["attention"] == {"requested": "sdpa", "candidate": "sdpa", "implementation": "sdpa",
                                   "reason": "as configured", "causal": True, "causality_check_max_diff": 0.0,
                                   "document_mask": False}
    assert record["compile"] == {"enabled": False, "requested": section.compile, "first_step_s": 0.25}
    assert (record["data_epochs"], record["input_model"], record["checkpoint_dir"]) == (0.1235, "in", "ck")
    assert record["section"] == section.as_dict() and "micro_batch_key" not in record["section"]
    assert [record[k] for k in ("trainable_parameters", "total_parameters", "valid_loss_end",
                                "optimizer_state_path")] == [None] * 4  # write_outputs fills them
