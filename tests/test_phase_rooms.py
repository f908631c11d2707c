"""The rooms of a pretraining phase (issue #39 item 3): the micro-batch refusal names the keys that can set
it (the job reads values only), and the run record is built from a typed :class:`clmdetour.training.phase.PhaseOutcome` with exactly the
keys ``run.json`` has always had."""
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import REPO

from clmdetour.config import BatchPlan, ConfigError, deep_merge, load_yaml, resolve_phase, validate_config
from clmdetour.settings import PhaseSettings
from clmdetour.training import memory


def _demo_config(over: dict | None = None) -> dict:
    base = deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml"))
    return validate_config(deep_merge(base, over or {}))


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
    batch = BatchPlan(section.global_batch_sequences, 1, section.micro_batch_sequences)
    with pytest.raises(ConfigError) as caught:
        memory.plan_memory(_HUGE_MODEL, section, batch, True, None, variant)
    return str(caught.value)


def test_a_section_read_from_its_json_names_every_key_that_could_have_set_it(monkeypatch):
    """The phase job reads its section as resolved JSON (values only): the message lists the keys in the
    order they override each other instead of naming one that may not be the one set."""
    cfg = _demo_config({"pretraining": {"variants": {"clm-detour": {"phase1": {"micro_batch_sequences": 8}}}}})
    section = PhaseSettings.from_dict(json.loads(json.dumps(resolve_phase(cfg, "clm-detour", "phase1"))))
    message = _refusal(monkeypatch, section, "clm-detour")
    expected = ("micro_batch_sequences of clm-detour/phase1 (pretraining.variants.clm-detour.phase1."
                "micro_batch_sequences, else pretraining.phase1.micro_batch_sequences, else "
                "pretraining.micro_batch_sequences: the first one the config sets) (8): one step")
    assert message.startswith(expected), message


#: The keys of a phase's run.json (``release/records.py`` and the report read them).
RUN_KEYS = {
    "attention", "checkpoint_dir", "compile", "data_epochs", "data_hash", "device", "frozen_parameters", "git_sha",
    "global_batch_sequences", "grad_accum", "input_model", "input_model_hash", "memory", "micro_batch_sequences",
    "nodes", "objective", "offset_tokens", "optimizer_state_loaded_parameters", "optimizer_state_path",
    "peak_memory_gib", "per_device_batch_sequences", "phase", "precision", "ranks", "real_tokens", "resume",
    "resumed_from_step", "run_hash", "section", "seq_len", "steps", "tokens", "tokens_budget", "total_parameters",
    "trainable_parameters", "valid_held_out", "valid_loss_end", "valid_loss_history", "valid_loss_start",
    "valid_sequences", "variant", "versions", "wall_time_s", "world_size",
}


def test_the_run_record_of_a_phase_outcome_has_the_run_json_keys_and_values():
    from clmdetour.modeling.attention import AttentionChoice
    from clmdetour.runtime.memory import MemoryPlan
    from clmdetour.training.phase import PhaseOutcome, phase_record

    section = PhaseSettings.from_dict(resolve_phase(_demo_config(), "clm-detour", "phase1"))
    batch = BatchPlan(16, 1, 8)
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
    assert record["section"] == section.as_dict()
    assert [record[k] for k in ("global_batch_sequences", "micro_batch_sequences", "per_device_batch_sequences",
                                "grad_accum")] == [16, 8, 16, 2]
    assert [record[k] for k in ("trainable_parameters", "total_parameters", "valid_loss_end",
                                "optimizer_state_path")] == [None] * 4  # write_outputs fills them
