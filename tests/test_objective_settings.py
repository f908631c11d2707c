"""An objective owns its settings (issue 48 item 3): each objective builds its settings from the phase-section
keys it owns, its collator from those settings alone, and the typed phase section keeps those keys as they
came in (same run hash)."""
import copy

import pytest
import torch
from helpers import REPO
from transformers import AutoTokenizer

from clmdetour.config import ConfigError, deep_merge, load_yaml, resolve_phase, validate_config
from clmdetour.errors import InputError
from clmdetour.objectives import OBJECTIVE_KEYS, OBJECTIVES, MLMSettings, ObjectiveSettings, get_objective
from clmdetour.settings import PhaseSettings
from clmdetour.training.collators import CLMCollator, MLMCollator, clm_labels, make_collator


def _demo() -> dict:
    return validate_config(deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml")))


def test_each_objective_builds_its_own_settings_from_the_keys_it_owns():
    section = {"masking_rate": 0.3, "lr": 1e-4, "objective": "mlm"}
    assert get_objective("mlm").settings_of(section) == MLMSettings(masking_rate=0.3)
    assert get_objective("clm").settings_of(section) == ObjectiveSettings()
    assert MLMSettings.owned_keys() == ("masking_rate",) and ObjectiveSettings.owned_keys() == ()
    assert set(OBJECTIVE_KEYS) == {k for o in OBJECTIVES.values() for k in o.settings.owned_keys()}
    assert (MLMSettings(0.3).labelled_fraction(), ObjectiveSettings().labelled_fraction()) == (0.3, 1.0)
    with pytest.raises(InputError, match=r"decay: missing key\(s\) \['masking_rate'\]"):
        get_objective("mlm").settings_of({"lr": 1e-4}, "decay")


def test_the_typed_section_keeps_the_objective_keys_and_gives_the_phase_its_objective_settings():
    cfg = _demo()
    for variant, phase in (("clm-detour", "phase1"), ("clm-detour", "decay"), ("mlm-baseline", "phase1")):
        resolved = resolve_phase(cfg, variant, phase)
        section = PhaseSettings.from_dict(copy.deepcopy(resolved))
        assert section.as_dict() == resolved  # the run hash and run.json see the same values
        assert section.objective_values == {"masking_rate": resolved["masking_rate"]}
        expected = ObjectiveSettings() if resolved["objective"] == "clm" else MLMSettings(resolved["masking_rate"])
        assert section.objective_settings == expected


def test_the_typed_section_refuses_a_missing_objective_key_and_its_own_field_name():
    resolved = resolve_phase(_demo(), "clm-detour", "decay")
    with pytest.raises(ConfigError, match=r"^decay: missing key\(s\) \['masking_rate'\] \(the schema fills them"):
        PhaseSettings.from_dict({k: v for k, v in resolved.items() if k != "masking_rate"}, "decay")
    with pytest.raises(ConfigError, match=r"^decay: unknown key\(s\) \['objective_values'\]"):
        PhaseSettings.from_dict(dict(resolved, objective_values={}), "decay")


def _rows(tok, n=4, length=64):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, len(tok), (n, length), generator=g)
    ids[:, 0], ids[:, length // 2] = tok.cls_token_id, tok.sep_token_id
    return [{"input_ids": r.tolist(), "attention_mask": [1] * length} for r in ids]


def test_collators_are_built_from_the_objective_settings_with_the_same_batches(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = _rows(tok)
    built = make_collator("mlm", MLMSettings(0.3), tok, seed=5)
    assert isinstance(built, MLMCollator) and built.masking_rate == 0.3
    direct = MLMCollator(tok, 0.3, seed=5)
    for _ in range(2):  # the same generator draws, batch after batch
        a, b = built(rows), direct(rows)
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["labels"], b["labels"])
    clm = make_collator("clm", ObjectiveSettings(), tok)
    assert isinstance(clm, CLMCollator)
    batch = clm(rows)
    assert torch.equal(batch["labels"], clm_labels(batch["input_ids"], batch["attention_mask"], tok.sep_token_id))


def test_the_phase_builds_its_collators_from_its_section(tiny_model_dir):
    import datasets

    from clmdetour.training.phase import held_out

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    section = PhaseSettings.from_dict(resolve_phase(_demo(), "clm-detour", "decay"))
    valid = held_out(datasets.Dataset.from_list(_rows(tok, n=8)), tok, section, None)
    assert isinstance(valid.collator, MLMCollator) and valid.collator.masking_rate == section.objective_values[
        "masking_rate"] and valid.collator.seed == section.seed
