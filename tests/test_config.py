
import pytest
from helpers import REPO

from clmdetour.config import ConfigError, deep_merge, load_yaml, parse_layer_spec, resolve_phase, validate_config


def paper():
    return load_yaml(REPO / "config/config.yaml")


def demo():
    return deep_merge(paper(), load_yaml(REPO / "config/demo.yaml"))


def test_paper_and_demo_configs_validate_and_fill_defaults():
    for cfg in (paper(), demo()):
        validate_config(cfg)
        assert cfg["corpus"]["decontamination"]["ngram_words"] == 13
        assert cfg["pretraining"]["optimizer"]["betas"] == [0.9, 0.98]


def test_paper_recipe_values():
    cfg = validate_config(paper())
    p1 = resolve_phase(cfg, "clm-detour", "phase1")
    decay = resolve_phase(cfg, "clm-detour", "decay")
    assert p1["objective"] == "clm" and p1["tokens"] == 10_000_000_000
    assert decay["objective"] == "mlm" and decay["masking_rate"] == 0.15 and decay["final_lr_fraction"] == 0.1
    assert decay["lr"] == 2e-4 and "lr" not in decay["optimizer"] and decay["global_batch_sequences"] == 384 and decay["seq_len"] == 8192
    assert resolve_phase(cfg, "clm-freeze-low", "phase1")["freeze"] == ["0-7"]
    assert resolve_phase(cfg, "clm-freeze-low-emb", "phase1")["freeze"] == ["embeddings", "0-7"]
    # phase1_from reuses the owner's phase 1; the long decay is as long as phase 1
    assert resolve_phase(cfg, "clm-long-decay", "phase1") == p1
    assert resolve_phase(cfg, "clm-long-decay", "decay")["tokens"] == p1["tokens"]


@pytest.mark.parametrize("patch, key", [
    ({"corpus": {"seq_lenn": 3}}, "corpus.seq_lenn"),
    ({"pretraining": {"decay": {"masking_rate": 1.5}}}, "pretraining.decay.masking_rate"),
    ({"pretraining": {"phase1": {"tokens": 0}}}, "pretraining.phase1.tokens"),
    ({"pretraining": {"phase1": {"tokens": "many"}}}, "pretraining.phase1.tokens"),
    ({"pretraining": {"variants": {"clm-freeze-low": {"phase1": {"freeze": ["0-9"]}}}}},
     "pretraining.variants.clm-freeze-low.phase1.freeze[0]"),
    ({"pretraining": {"variants": {"x": {"phase1_from": "nope"}}}}, "pretraining.variants.x.phase1_from"),
    ({"pretraining": {"variants": {"pretrain-all": {"phase1": {"objective": "clm"}}}}}, "pretraining.variants"),
])
def test_bad_values_name_the_key(patch, key):
    with pytest.raises(ConfigError) as e:
        validate_config(deep_merge(demo(), patch))
    assert key in str(e.value)
    assert "\n" not in str(e.value)


def test_an_overlay_removes_a_variant_with_null():
    cfg = validate_config(demo())  # config/demo.yaml: clm-freeze-low-emb: null
    assert "clm-freeze-low-emb" in validate_config(paper())["pretraining"]["variants"]
    assert "clm-freeze-low-emb" not in cfg["pretraining"]["variants"]
    assert list(cfg["pretraining"]["variants"])[:2] == ["clm-detour", "mlm-baseline"]
    # a removed variant that another variant still reuses is reported by name
    with pytest.raises(ConfigError, match=r"clm-long-decay\.phase1_from: 'clm-detour' is not a variant"):
        validate_config(deep_merge(demo(), {"pretraining": {"variants": {"clm-detour": None}}}))


def test_layer_spec():
    assert parse_layer_spec("0-3", 6) == [0, 1, 2, 3]
    assert parse_layer_spec("embeddings", 6) == ["embeddings"]
    with pytest.raises(ConfigError, match="beyond the model depth"):
        parse_layer_spec("6", 6)
    with pytest.raises(ConfigError, match="empty"):
        parse_layer_spec("3-1", 6)


def test_invalid_yaml_names_file_and_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("a: 1\nb: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: line \d"):
        load_yaml(p)


@pytest.mark.parametrize("overlays", [[], ["demo"], ["real-small"], ["demo", "slurm-test"]])
def test_shipped_configs_make_phase1_one_pass_over_the_corpus(overlays):
    # corpus.train_tokens is phase 1's budget: phase 1 reads the stream once, to within the
    # rounding of phases to whole global batches (docs/fidelity.md).
    cfg = paper()
    for name in overlays:
        cfg = deep_merge(cfg, load_yaml(REPO / f"config/{name}.yaml"))
    cfg = validate_config(cfg)
    stream = cfg["corpus"]["train_tokens"]
    for variant, v in cfg["pretraining"]["variants"].items():
        if v.get("phase1_from"):
            continue
        p1 = resolve_phase(cfg, variant, "phase1")
        batch_tokens = p1["global_batch_sequences"] * cfg["corpus"]["seq_len"]
        assert abs(p1["tokens"] - stream) <= batch_tokens, (overlays, variant, p1["tokens"], stream)


@pytest.mark.parametrize("overlay", ["demo", "real-small"])
def test_base_build_section_is_the_former_one_and_ignores_every_variant(overlay):
    """Issue 17: build_base's params carry only the shared pretraining keys and base_model.build."""
    import copy

    from clmdetour.config import base_build_section, deep_merge, load_yaml, resolve_phase, validate_config

    cfg = validate_config(deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / f"config/{overlay}.yaml")))
    build = cfg["base_model"]["build"]
    first = next(iter(cfg["pretraining"]["variants"]))
    former = resolve_phase(cfg, first, "phase1")  # what the rule carried before, then overridden by build_base
    former.update(phase="phase1", objective="mlm", tokens=build["pretrain_tokens"], lr=build["lr"],
                  warmup_tokens=build["warmup_tokens"], freeze=[], masking_rate=build["masking_rate"],
                  seed=build["seed"])
    former.pop("quality_floor")  # a recipe phase's end check, not the base build's (clmdetour.training.quality)
    section = base_build_section(cfg)
    assert section == former  # the same base model, trained the same way
    edited = copy.deepcopy(cfg)
    edited["pretraining"]["variants"][first]["phase1"] = {"objective": "mlm", "freeze": ["0-1"], "tokens": 12_345,
                                                          "masking_rate": 0.4, "warmup_tokens": 1}
    edited["pretraining"]["phase1"]["warmup_tokens"] = 7
    assert base_build_section(edited) == section
    edited["pretraining"]["micro_batch_sequences"] = 1  # a shared key still counts
    assert base_build_section(edited) != section


@pytest.mark.parametrize("text, key", [
    ("pretraining: {optimizer: {lr: .inf}}", "pretraining.optimizer.lr"),
    ("pretraining: {optimizer: {lr: .nan}}", "pretraining.optimizer.lr"),
    ("pretraining: {optimizer: {betas: [0.9, .nan]}}", "pretraining.optimizer.betas[1]"),
    ("pretraining: {variants: {clm-detour: {phase1: {lr: -.inf}}}}", "pretraining.variants.clm-detour.phase1.lr"),
    ("pretraining: {decay: {masking_rate: .NaN}}", "pretraining.decay.masking_rate"),
    ("pretraining: {memory_limit_gib: .Inf}", "pretraining.memory_limit_gib"),
    ("evaluation: {lr_grid: [1.0e-5, .inf]}", "evaluation.lr_grid[1]"),
])
def test_non_finite_numbers_are_refused_at_planning_naming_the_key(text, key):
    """Issue run-guards item 2: YAML .inf / .nan read as floats and passed the schema (nan compares false with
    every bound; lr: .inf trained to all-NaN weights and exited 0)."""
    import yaml

    with pytest.raises(ConfigError) as e:
        validate_config(deep_merge(demo(), yaml.safe_load(text)))
    assert str(e.value).startswith(f"config key {key!r}: ") and "not a finite number" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_non_finite_number_given_on_the_command_line_is_refused():
    # --config values arrive as strings; '.nan' becomes a float when it is coerced to the schema's number
    with pytest.raises(ConfigError, match=r"^config key 'pretraining.optimizer.lr': nan is not a finite number"):
        validate_config(deep_merge(demo(), {"pretraining": {"optimizer": {"lr": ".nan"}}}))
