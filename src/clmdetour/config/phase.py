"""A pretraining phase resolved from the config: the merge order of its keys, the key that set a value,
the freeze specs (fractions resolved to layers), and the parts of a section that the run hash covers.

Each rule receives only its own resolved section (:func:`resolve_phase`), so editing a fine-tuning
hyperparameter never changes a pretraining rule's params.
"""

from __future__ import annotations

import copy
import math
import re

from clmdetour.config.load import ConfigError, deep_merge
from clmdetour.objectives import DECAY_OBJECTIVE, OBJECTIVE_KEYS, get_objective

PHASES = ("phase1", "decay")


def phase1_owner(config: dict, variant: str) -> str:
    """The variant whose phase 1 ``variant`` uses (itself unless ``phase1_from``)."""
    return config["pretraining"]["variants"][variant].get("phase1_from") or variant



def phase_key(config: dict, variant: str, phase: str, key: str) -> str:
    """The config key a resolved phase's value comes from, for messages: the variant's phase section (the
    phase-1 owner's for a ``phase1_from`` variant's phase 1), else ``pretraining.{phase}``, else the shared
    ``pretraining`` key (the merge order of :func:`resolve_phase`)."""
    pre = config["pretraining"]
    owner = phase1_owner(config, variant) if phase == "phase1" else variant
    if key in (pre["variants"][owner].get(phase) or {}):
        return f"pretraining.variants.{owner}.{phase}.{key}"
    if key in (pre.get(phase) or {}):
        return f"pretraining.{phase}.{key}"
    return f"pretraining.{key}"


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
    # One learning-rate key per phase: ``lr`` (pretraining.optimizer.lr, unless the phase or the variant sets
    # its own); the resolved optimizer keeps only betas, eps and weight decay.
    shared["lr"] = shared["optimizer"].pop("lr")
    shared.setdefault("freeze", [])
    # pre[phase] carries the schema's defaults (masking_rate, warmup_tokens; decay: final_lr_fraction,
    # load_optimizer_state): workflow/schemas/pretrain.schema.yaml is their one definition.
    section = deep_merge(shared, pre.get(phase) or {})
    section = deep_merge(section, pre["variants"][variant].get(phase) or {})
    if phase == "decay":
        section["objective"] = DECAY_OBJECTIVE
    drop_other_objectives_keys(section)
    section["phase"] = phase
    section["seq_len"] = config["corpus"]["seq_len"]
    return section


def drop_other_objectives_keys(section: dict) -> dict:
    """Remove, in place, the keys that objectives other than the section's own own (:data:`OBJECTIVE_KEYS`).

    A phase's resolved section, its rule's params and its run hash then hold only the keys of the objective
    it trains with: the CLM phase carries no ``masking_rate``, and adding an objective with a knob (its
    default in every phase section) changes no existing phase's params or hash (issue 59).

    Raises:
        InputError: the section's ``objective`` is not registered (naming it).
    """
    own = set(get_objective(section.get("objective"), "phase objective").settings.owned_keys())
    for key in OBJECTIVE_KEYS:
        if key not in own:
            section.pop(key, None)
    return section


def base_build_section(config: dict) -> dict:
    """The fully resolved training section of the base model's MLM pretraining (configs that build it).

    Only the ``pretraining`` keys shared by all phases (batch, precision, optimizer, checkpointing ...)
    and ``base_model.build`` (``pretrain_tokens``, ``lr``, ``warmup_tokens``, ``masking_rate``,
    ``seed``) enter it: no phase or variant section does, so editing a variant never rebuilds the base
    model (the rule ``build_base`` carries this as its params).

    Raises:
        KeyError: the config has no ``base_model.build`` section.
    """
    pre, build = config["pretraining"], config["base_model"]["build"]
    # no quality floor: a base built from scratch is the demo's stand-in for a released model, not a recipe phase
    section = {k: copy.deepcopy(v) for k, v in pre.items() if k not in ("phase1", "decay", "variants", "quality_floor")}
    section.update(phase="phase1", objective=DECAY_OBJECTIVE, tokens=build["pretrain_tokens"], lr=build["lr"],
                   warmup_tokens=build["warmup_tokens"], freeze=[], masking_rate=build["masking_rate"],
                   seed=build["seed"], seq_len=config["corpus"]["seq_len"])
    section["optimizer"] = {k: v for k, v in section["optimizer"].items() if k != "lr"}  # one lr key: ``lr``
    return section


def training_loop_section(section: dict) -> dict:
    """The part of a resolved phase that changes the trained weights (hashed for resume).

    Excludes keys that only change logging, checkpoint placement, compilation, the memory
    limit, the loss chunking (the same loss, in pieces), the divergence guard or the quality floor, so that turning on
    TensorBoard or compilation does not discard a half-finished run;
    ``document_mask`` enters only when on, so runs started before the key existed keep their hash.
    """
    skip = {"progress_bar", "loggers", "log_interval_steps", "checkpoint_root", "keep_checkpoints",
            "checkpoint_margin_s", "checkpoint_interval", "process_group_timeout_s", "compile", "memory_limit_gib",
            "divergence", "quality_floor", "loss_chunk_tokens"}
    out = {k: v for k, v in section.items() if k not in skip}
    if not out.get("document_mask", True):  # off (the default): hashed as before the key existed
        out.pop("document_mask")
    return out


def variant_target(variant: str) -> str:
    """Rule-name form of a variant (``clm-freeze-low`` -> ``clm_freeze_low``)."""
    return variant.replace("-", "_")


def fraction_layer_range(fraction, num_layers: int, where: str = "freeze") -> str:
    """The absolute layer range (``"A-B"``) of a fractional freeze spec ``{fraction: [a, b]}``.

    Rounding rule: with depth ``L``, the range holds layers
    ``round(a * L) .. round(b * L) - 1`` (inclusive, 0-based), rounding half
    up. So ``[0.0, 0.364]`` is ``0-7`` of 22 layers (the paper's "low") and
    ``0-9`` of 28; ``[0.364, 0.727]`` is ``8-15`` of 22 and ``10-19`` of 28.

    Args:
        fraction: ``[a, b]`` with ``0 <= a < b <= 1`` (fractions of the depth).
        num_layers: model depth ``L`` (``base_model.num_layers``).
        where: key path used in error messages.

    Raises:
        ConfigError: ``a >= b``, a value outside [0, 1], or a range that rounds to no layer.
    """
    a, b = (float(x) for x in fraction)
    if not 0.0 <= a < b <= 1.0:
        raise ConfigError(f"{where}: fraction {list(fraction)} must be [a, b] with 0 <= a < b <= 1")
    start, stop = math.floor(a * num_layers + 0.5), math.floor(b * num_layers + 0.5)
    if stop <= start:
        raise ConfigError(f"{where}: fraction {list(fraction)} of {num_layers} layers rounds to no layer "
                          f"(layers round(a*L)={start} .. round(b*L)-1={stop - 1}); widen it")
    return f"{start}-{stop - 1}"


def resolve_fraction_specs(config: dict) -> None:
    """Replace every ``{fraction: [a, b]}`` freeze item by its absolute range, in place.

    Runs when the config loads (``validate_config``), against
    ``base_model.num_layers``, so rule params and the run hash carry the
    resolved indices (rounding rule: :func:`fraction_layer_range`).

    Raises:
        ConfigError: a fraction that cannot be resolved (the message names its key).
    """
    pre = config.get("pretraining") or {}
    n_layers = config["base_model"]["num_layers"]
    holders = [(f"pretraining.{ph}", pre.get(ph)) for ph in PHASES]
    for name, v in (pre.get("variants") or {}).items():
        holders += [(f"pretraining.variants.{name}.{ph}", (v or {}).get(ph)) for ph in PHASES]
    for where, section in holders:
        if not isinstance(section, dict) or not isinstance(section.get("freeze"), list):
            continue
        section["freeze"] = [fraction_layer_range(item["fraction"], n_layers, f"{where}.freeze[{i}]")
                             if isinstance(item, dict) else item for i, item in enumerate(section["freeze"])]


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
