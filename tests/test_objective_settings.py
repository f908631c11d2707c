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
        own = get_objective(resolved["objective"]).settings.owned_keys()
        assert section.objective_values == {k: resolved[k] for k in own}  # only its own objective's keys
        assert ("masking_rate" in resolved) == (resolved["objective"] == "mlm")  # CLM carries no masking rate
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


#: sha256 of every demo and paper phase's weight-changing section (clmdetour.config.training_loop_section),
#: pinned with issue 59's move (objective keys owned by their objective, loss_chunk_tokens out of the hash):
#: an addition that moves one of them reruns finished pretraining, and must say so in CHANGELOG.
def _section_digests(cfg: dict) -> dict[str, str]:
    from clmdetour.config import training_loop_section
    from clmdetour.io import sha256_json

    return {f"{v}/{ph}": sha256_json(training_loop_section(resolve_phase(cfg, v, ph)))[:12]
            for v in sorted(cfg["pretraining"]["variants"]) for ph in ("phase1", "decay")}


def _paper() -> dict:
    return validate_config(load_yaml(REPO / "config/config.yaml"))


PINNED_DEMO: dict[str, str] = {
    "clm-detour/phase1": "ad6874078836",
    "clm-detour/decay": "d13add5108a9",
    "clm-freeze-low/phase1": "ef99b6da0f10",
    "clm-freeze-low/decay": "d13add5108a9",
    "clm-freeze-mid/phase1": "dc3056bb98e3",
    "clm-freeze-mid/decay": "d13add5108a9",
    "clm-long-decay/phase1": "ad6874078836",
    "clm-long-decay/decay": "79a8ddf96134",
    "mlm-baseline/phase1": "a37671232214",
    "mlm-baseline/decay": "d13add5108a9",
}
PINNED_PAPER: dict[str, str] = {
    "clm-detour/phase1": "03cb433e7cfe",
    "clm-detour/decay": "3eb84fc54229",
    "clm-freeze-low/phase1": "ef63c638ab11",
    "clm-freeze-low/decay": "3eb84fc54229",
    "clm-freeze-low-emb/phase1": "4b5ab6ec3114",
    "clm-freeze-low-emb/decay": "3eb84fc54229",
    "clm-freeze-mid/phase1": "a2cd812e096d",
    "clm-freeze-mid/decay": "3eb84fc54229",
    "clm-long-decay/phase1": "03cb433e7cfe",
    "clm-long-decay/decay": "749df45b051c",
    "mlm-baseline/phase1": "bdee9bec4973",
    "mlm-baseline/decay": "3eb84fc54229",
}


def test_the_phases_run_hash_sections_are_pinned():
    assert _section_digests(_demo()) == PINNED_DEMO
    assert _section_digests(_paper()) == PINNED_PAPER


def test_an_objective_with_a_knob_added_through_the_registry_moves_no_existing_phase(monkeypatch):
    """Issue 59 item 1: a toy objective registered with its own settings class (a knob), its default written
    in every phase section as a schema default would be: no existing phase's params or hash section moves."""
    import dataclasses

    import clmdetour.config.phase as phase_module
    from clmdetour import objectives

    @dataclasses.dataclass(frozen=True)
    class SpanSettings(ObjectiveSettings):
        span_length: int

    toy = objectives.Objective("span", causal=False, collator="MLMCollator", settings=SpanSettings,
                               describe=lambda section, impl: "span")
    registry = dict(objectives.OBJECTIVES, span=toy)
    keys = (*objectives.OBJECTIVE_KEYS, "span_length")
    monkeypatch.setattr(objectives, "OBJECTIVES", registry)
    monkeypatch.setattr(objectives, "OBJECTIVE_KEYS", keys)
    monkeypatch.setattr(phase_module, "OBJECTIVE_KEYS", keys)
    for load, pinned in ((_demo, PINNED_DEMO), (_paper, PINNED_PAPER)):
        cfg = load()
        for phase in ("phase1", "decay"):
            cfg["pretraining"][phase]["span_length"] = 3  # the new knob's default, in every phase section
        assert _section_digests(cfg) == pinned
        cfg["pretraining"]["variants"]["clm-detour"]["phase1"] = dict(
            cfg["pretraining"]["variants"]["clm-detour"]["phase1"], objective="span")
        moved = {k for k, v in _section_digests(cfg).items() if pinned[k] != v}
        assert moved == {"clm-detour/phase1"} | {f"{v}/phase1" for v, spec in cfg["pretraining"]["variants"].items()
                                               if spec.get("phase1_from") == "clm-detour"}
        assert resolve_phase(cfg, "clm-detour", "phase1")["span_length"] == 3  # its own knob reaches it
