"""Typed settings: every resolved section of the shipped configs becomes its dataclass and back unchanged;
a missing or unknown key is refused by name."""

import copy
import dataclasses

import pytest
from helpers import REPO

from clmdetour.config import ConfigError, base_build_section, deep_merge, load_yaml, resolve_phase, validate_config
from clmdetour.evaluation.grid import FINETUNE_KEYS, finetune_settings
from clmdetour.settings import FinetuneSettings, PhaseSettings

OVERLAYS = [[], ["demo"], ["real-small"], ["demo", "slurm-test"], ["large"]]


def _config(overlays):
    cfg = load_yaml(REPO / "config/config.yaml")
    for name in overlays:
        cfg = deep_merge(cfg, load_yaml(REPO / f"config/{name}.yaml"))
    if "large" in overlays:
        cfg = deep_merge(cfg, {"base_model": {"hub_id": "org/large"}})
    return validate_config(cfg)


@pytest.mark.parametrize("overlays", OVERLAYS, ids=lambda o: "+".join(o) or "paper")
def test_every_resolved_phase_round_trips(overlays):
    cfg = _config(overlays)
    sections = [resolve_phase(cfg, v, ph) for v in cfg["pretraining"]["variants"] for ph in ("phase1", "decay")]
    if cfg["base_model"]["build"]:
        sections.append(base_build_section(cfg))
    for section in sections:
        settings = PhaseSettings.from_dict(section)
        assert settings.as_dict() == section  # the run hash and run.json see the same values
        assert "lr" not in section["optimizer"] and settings.lr == section["lr"]  # one learning-rate key
    assert FinetuneSettings.from_dict(finetune_settings(cfg)).tie_tolerance == cfg["evaluation"]["tie_tolerance"]


def test_a_missing_or_unknown_key_is_named():
    section = resolve_phase(_config([]), "clm-detour", "decay")
    broken = copy.deepcopy(section)
    del broken["warmup_tokens"]
    with pytest.raises(ConfigError, match=r"decay: missing key\(s\) \['warmup_tokens'\]"):
        PhaseSettings.from_dict(broken, "decay")
    with pytest.raises(ConfigError, match=r"decay\.optimizer: unknown key\(s\) \['lr'\]"):
        PhaseSettings.from_dict(dict(section, optimizer=dict(section["optimizer"], lr=1.0)), "decay")
    with pytest.raises(ConfigError, match=r"evaluation: missing key\(s\) \['tie_tolerance'\]"):
        FinetuneSettings.from_dict({k: 0 for k in FINETUNE_KEYS if k != "tie_tolerance"})


def test_finetune_settings_fields_are_the_grids_finetune_keys():
    assert [f.name for f in dataclasses.fields(FinetuneSettings)] == list(FINETUNE_KEYS)


@pytest.mark.parametrize("bad", [0, -3, True, "128", 12.5])
def test_a_task_max_length_is_refused_once_at_planning_naming_the_key(bad):
    from clmdetour.evaluation.grid import finetune_task_params

    config = validate_config(load_yaml(REPO / "config/config.yaml"))
    task = next(iter(config["tasks"]))
    config["tasks"][task]["max_length"] = bad
    with pytest.raises(ConfigError, match=rf"tasks\.{task}\.max_length: {bad!r} is not a whole number of tokens >= 1"):
        finetune_task_params(config, task)


def test_the_finetune_keys_are_the_settings_fields():
    assert FINETUNE_KEYS == tuple(f.name for f in dataclasses.fields(FinetuneSettings))
    assert "ner_context_tokens" in FINETUNE_KEYS and "threshold_grid" in FINETUNE_KEYS
