"""Configuration: JSON-schema validation with defaults, and per-phase resolution.

The workflow validates the merged config (``config/config.yaml`` plus any
overlay such as ``config/demo.yaml``) once when it loads. Errors are one line
naming the key path (``pretraining.variants.clm-freeze-low.phase1.freeze[0]``)
and the bad value. Each rule then receives only its own resolved section
(``resolve_phase``), so editing a fine-tuning hyperparameter never changes a
pretraining rule's params.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "workflow" / "schemas"
PHASES = ("phase1", "decay")
# Keys of ``pretraining`` shared by both phases (everything but phase sections and variants).
_PHASE_KEYS = ("objective", "tokens", "warmup_tokens", "lr", "final_lr_fraction", "masking_rate", "freeze",
               "load_optimizer_state", "global_batch_sequences", "micro_batch_sequences", "seed")
# Rule names a variant's target name must not shadow (variant "-" -> "_").
RESERVED_TARGETS = {"all", "pretrain_all", "base", "random_init", "prepare_corpus", "demo_corpus", "build_base",
                    "eval_table", "eval_all", "analysis_all", "report", "release_all", "demo_tasks",
                    "prepare_task", "fetch_url", "fetch_task_hub", "fetch_dataset", "fetch_model", "layer_drift",
                    "layer_drift_table", "plot_layer_drift", "plot_training_curves", "plot_eval_scores", "config_used",
                    "finetune", "random_init", "stage_release", "push_release", "held_apart_corpus", "build_base",
                    "pretrain_phase1", "pretrain_decay", "demo_task_source"}


class ConfigError(ValueError):
    """A configuration value cannot be used; the message names the key."""


def _key_path(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<root>"


def _load_schema_registry(schema_dir: Path):
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    resources = []
    for f in sorted(schema_dir.glob("*.schema.yaml")):
        contents = yaml.safe_load(f.read_text(encoding="utf-8"))
        if f.name != "config.schema.yaml":
            # A sub-schema's own $schema would make jsonschema switch to the stock validator
            # class on $ref, which does not fill defaults.
            contents.pop("$schema", None)
        resources.append((f.name, DRAFT202012.create_resource(contents)))
    return Registry().with_resources(resources)


def _validator_with_defaults(schema: dict, registry):
    """A Draft 2020-12 validator that fills ``default`` values of missing properties."""
    from jsonschema import Draft202012Validator, validators

    base_props = Draft202012Validator.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
                elif isinstance(sub, dict) and "$ref" in sub and name not in instance:
                    target = validator._resolver.lookup(sub["$ref"]).contents
                    if isinstance(target, dict) and "default" in target:
                        instance[name] = copy.deepcopy(target["default"])
        yield from base_props(validator, properties, instance, schema)

    cls = validators.extend(Draft202012Validator, {"properties": set_defaults})
    return cls(schema, registry=registry)


def validate_config(config: dict, schema_dir: str | Path | None = None) -> dict:
    """Validate ``config`` against the schema, fill defaults, and run cross-checks.

    Args:
        config: the merged configuration (modified in place: defaults are filled).
        schema_dir: folder of ``*.schema.yaml`` files (default: ``workflow/schemas``).

    Returns:
        The same dict, with defaults filled in.

    Raises:
        ConfigError: one line naming the key path, the bad value and what is allowed.
    """
    schema_dir = Path(schema_dir) if schema_dir else SCHEMA_DIR
    registry = _load_schema_registry(schema_dir)
    schema = registry.contents("config.schema.yaml")
    validator = _validator_with_defaults(schema, registry)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    if errors:
        e = errors[0]
        path = list(e.absolute_path)
        if e.validator == "additionalProperties":
            extra = re.findall(r"'([^']+)' was unexpected", e.message)
            allowed = sorted((e.schema.get("properties") or {}).keys())
            removed = (e.schema.get("x-removed") or {}).get(extra[0]) if extra else None
            if removed:
                raise ConfigError(f"config key {_key_path(path + extra[:1])!r} is no longer accepted: {removed}")
            raise ConfigError(f"config key {_key_path(path + extra[:1])!r} is unknown; allowed keys here: {allowed}")
        raise ConfigError(f"config key {_key_path(path)!r}: {e.message}")
    _cross_check(config)
    return config


def parse_layer_spec(spec: str, num_layers: int, where: str = "freeze") -> list[int | str]:
    """Expand one freeze spec into layer indices (or ``"embeddings"``).

    Args:
        spec: ``"embeddings"``, ``"N"`` or ``"A-B"`` (absolute, inclusive).
        num_layers: model depth; indices must be in ``[0, num_layers)``.
        where: key path used in error messages.

    Raises:
        ConfigError: malformed spec, empty range, or an index at or beyond ``num_layers``.
    """
    if spec == "embeddings":
        return ["embeddings"]
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", spec)
    if not m:
        raise ConfigError(f"{where}: layer spec {spec!r} is not 'embeddings', 'N' or 'A-B'")
    a = int(m.group(1))
    b = int(m.group(2)) if m.group(2) is not None else a
    if b < a:
        raise ConfigError(f"{where}: layer range {spec!r} is empty (end before start)")
    if b >= num_layers:
        raise ConfigError(f"{where}: layer index {b} in {spec!r} is beyond the model depth ({num_layers} layers: 0-{num_layers - 1})")
    return list(range(a, b + 1))


def _cross_check(config: dict) -> None:
    pre = config["pretraining"]
    variants = pre["variants"]
    n_layers = config["base_model"]["num_layers"]
    for name, v in variants.items():
        target = name.replace("-", "_")
        if target in RESERVED_TARGETS or f"pretrain_{target}" in RESERVED_TARGETS:
            raise ConfigError(f"pretraining.variants.{name}: name collides with the rule {target!r}; choose another name")
        src = v.get("phase1_from")
        if src is not None:
            if src not in variants:
                raise ConfigError(f"pretraining.variants.{name}.phase1_from: {src!r} is not a variant; variants: {sorted(variants)}")
            if variants[src].get("phase1_from"):
                raise ConfigError(f"pretraining.variants.{name}.phase1_from: {src!r} itself reuses another phase 1; point at the owner")
            if v.get("phase1"):
                raise ConfigError(f"pretraining.variants.{name}: give either phase1_from or phase1, not both")
        for phase in PHASES:
            if src is not None and phase == "phase1":
                continue
            section = resolve_phase(config, name, phase)
            where = f"pretraining.variants.{name}.{phase}"
            for i, spec in enumerate(section.get("freeze", [])):
                parse_layer_spec(spec, n_layers, f"{where}.freeze[{i}]")
            for key in ("objective", "tokens", "lr"):
                if section.get(key) is None:
                    raise ConfigError(f"{where}.{key}: missing (set it in pretraining.{phase} or in the variant)")
            if phase == "decay" and section["objective"] != "mlm":
                raise ConfigError(f"{where}.objective: the decay phase is MLM, got {section['objective']!r}")
            gb, mb = section["global_batch_sequences"], section["micro_batch_sequences"]
            if gb < mb:
                raise ConfigError(f"{where}: global_batch_sequences ({gb}) is smaller than micro_batch_sequences ({mb})")
    for task in config["corpus"].get("decontaminate_against", []):
        if config.get("tasks") and task not in config["tasks"]:
            raise ConfigError(f"corpus.decontaminate_against: {task!r} is not a task; tasks: {sorted(config['tasks'])}")


def _deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def phase1_owner(config: dict, variant: str) -> str:
    """The variant whose phase 1 ``variant`` uses (itself unless ``phase1_from``)."""
    return config["pretraining"]["variants"][variant].get("phase1_from") or variant


def resolve_phase(config: dict, variant: str, phase: str) -> dict:
    """The fully resolved training section of one phase of one variant.

    Merges, in order: the ``pretraining`` keys shared by all phases
    (batch, precision, optimizer, checkpointing ...), ``pretraining.{phase}``,
    and ``pretraining.variants.{variant}.{phase}``. The decay phase's objective
    is always ``mlm``. A ``phase1_from`` variant resolves phase 1 to its owner's.

    Raises:
        KeyError: unknown variant or phase.
    """
    if phase not in PHASES:
        raise KeyError(f"phase must be one of {PHASES}, got {phase!r}")
    pre = config["pretraining"]
    if variant not in pre["variants"]:
        raise KeyError(f"variant {variant!r} is not in pretraining.variants: {sorted(pre['variants'])}")
    if phase == "phase1":
        variant = phase1_owner(config, variant)
    shared = {k: copy.deepcopy(v) for k, v in pre.items() if k not in ("phase1", "decay", "variants")}
    shared["lr"] = shared["optimizer"]["lr"]
    shared["masking_rate"] = 0.15
    shared.setdefault("freeze", [])
    section = _deep_merge(shared, pre.get(phase) or {})
    section = _deep_merge(section, pre["variants"][variant].get(phase) or {})
    section["optimizer"]["lr"] = section["lr"]
    if phase == "decay":
        section["objective"] = "mlm"
        section.setdefault("final_lr_fraction", 0.1)
        section.setdefault("load_optimizer_state", False)
    section.setdefault("warmup_tokens", 0)
    section["phase"] = phase
    section["seq_len"] = config["corpus"]["seq_len"]
    return section


def training_loop_section(section: dict) -> dict:
    """The part of a resolved phase that changes the trained weights (hashed for resume).

    Excludes keys that only change logging or checkpoint placement, so that
    turning on TensorBoard does not discard a half-finished run.
    """
    skip = {"progress_bar", "loggers", "log_interval_steps", "checkpoint_root", "keep_checkpoints",
            "checkpoint_margin_s", "checkpoint_interval"}
    return {k: v for k, v in section.items() if k not in skip}


def variant_target(variant: str) -> str:
    """Rule-name form of a variant (``clm-freeze-low`` -> ``clm_freeze_low``)."""
    return variant.replace("-", "_")


def load_yaml(path: str | Path) -> dict:
    """Read a YAML file; errors name the file and line.

    Raises:
        ConfigError: the file is missing or is not valid YAML.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} invalid YAML: {getattr(e, 'problem', e)}") from None
