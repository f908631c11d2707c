"""Typed settings: every resolved section of the shipped configs becomes its dataclass and back unchanged;
a missing or unknown key is refused by name."""

import copy
import dataclasses
import re

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


# ---------------------------------------------------------------- a task's typed finetune block

def _block(**over) -> dict:
    from helpers_finetune import FINETUNE_BLOCK

    return dict(FINETUNE_BLOCK, **over)


@pytest.mark.parametrize("overlays", OVERLAYS, ids=lambda o: "+".join(o) or "paper")
def test_every_task_params_round_trip_through_the_typed_block(overlays):
    """The rule's task params (hashed into the run key, recorded as hyperparameters) come back unchanged."""
    from clmdetour.evaluation.grid import finetune_task_params
    from clmdetour.settings import TaskFinetuneSettings
    from clmdetour.tasks.settings import TaskSettings

    cfg = _config(overlays)
    for task in cfg["tasks"]:
        params = finetune_task_params(cfg, task)
        settings = TaskSettings.from_dict(params, f"tasks.{task}")
        assert isinstance(settings.finetune, TaskFinetuneSettings)
        assert settings.as_dict() == params and settings.finetune.as_dict() == params["finetune"]
        assert "lr_grid_key" not in settings.finetune.as_dict()
        assert settings.finetune.lr_points == [float(x) for x in params["finetune"]["lr_grid"]]


@pytest.mark.parametrize("grid", [[3.0e-5, 1.0e-5], [1.0e-5, 1.0e-5], [1.0e-5, 3.0e-5, 2.0e-5]])
def test_a_grid_that_is_not_strictly_increasing_is_refused_naming_the_key(grid):
    from clmdetour.settings import TaskFinetuneSettings
    from clmdetour.tasks.settings import TaskSettings

    shown = re.escape(str(grid))
    with pytest.raises(ConfigError, match=rf"^tasks\.x\.finetune\.lr_grid: {shown} is not strictly increasing"):
        TaskFinetuneSettings.from_dict(_block(lr_grid=grid), "tasks.x.finetune")
    with pytest.raises(ConfigError, match=rf"^evaluation\.lr_grid: {shown} is not strictly increasing .* sort it"):
        TaskSettings.from_dict({"type": "ner", "metric": "f1_micro", "max_length": 8, "finetune": _block(lr_grid=grid)},
                               "tasks.x", lr_grid_key="evaluation.lr_grid")
    with pytest.raises(ConfigError, match=r"^finetune\.lr_grid: .* not strictly increasing"):
        TaskFinetuneSettings(**_block(lr_grid=grid))  # built directly: refused all the same
    assert TaskFinetuneSettings.from_dict(_block(lr_grid=sorted(set(grid)))).lr_points == sorted(set(grid))


def test_the_sweep_and_the_planning_refuse_a_grid_with_the_one_rule():
    from clmdetour.finetune.sweep import choose_lr
    from clmdetour.settings import check_lr_grid

    with pytest.raises(ConfigError, match=r"^lr grid: \[0\.001, 0\.0001\] is not strictly increasing"):
        choose_lr([1e-3, 1e-4], {0: [0.1, 0.2]}, 0.0)
    with pytest.raises(ConfigError, match=r"^k: \[2, 1\] is not strictly increasing"):
        check_lr_grid([2, 1], "k")
    check_lr_grid([1, 2.5], "k")  # increasing: no error


def test_the_typed_block_names_a_missing_unknown_or_empty_key():
    from clmdetour.settings import TaskFinetuneSettings
    from clmdetour.tasks.settings import TaskSettings

    block = _block()
    del block["eps"]
    with pytest.raises(ConfigError, match=r"^tasks\.x\.finetune: missing key\(s\) \['eps'\]"):
        TaskSettings.from_dict({"type": "ner", "metric": "f1_micro", "max_length": 8, "finetune": block}, "tasks.x")
    with pytest.raises(ConfigError, match=r"^tasks\.x\.finetune: unknown key\(s\) \['lr'\]"):
        TaskFinetuneSettings.from_dict(_block(lr=1e-3), "tasks.x.finetune")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['lr_grid_key'\] \(not a block key"):
        TaskFinetuneSettings.from_dict(_block(lr_grid_key="x"), "tasks.x.finetune")
    with pytest.raises(ConfigError, match=r"^tasks\.x\.finetune\.lr_grid: no learning-rate grid"):
        TaskFinetuneSettings.from_dict(_block(lr_grid=[]), "tasks.x.finetune")
