"""Configuration: reading the files, validating the merged config, and resolving each pretraining phase.

One module per concern:

- :mod:`clmdetour.config.load`: reading config files (bounded YAML, a repeated key refused), overlays
  merged and their removals, canonical rule params, and :class:`ConfigError`;
- :mod:`clmdetour.config.schema`: JSON-schema validation with defaults (:func:`validate_config`);
- :mod:`clmdetour.config.checks`: the planning checks the schema cannot state (:func:`cross_check`);
- :mod:`clmdetour.config.phase`: a phase's resolved section (:func:`resolve_phase`) and the key that set a value;
- :mod:`clmdetour.config.batch`: the batch plan and its one division rule (:func:`plan_batch`), used at
  planning and by the phase job;
- :mod:`clmdetour.config.warnings`: one-line warnings at planning.

The public names of all six are importable from ``clmdetour.config`` (the rule files and the library do).
"""

from clmdetour.config.batch import (
    BatchPlan,
    BatchWording,
    PlanningWording,
    check_batch_division,
    plan_batch,
    pretrain_devices,
)
from clmdetour.config.checks import (
    check_context_length,
    check_mask_token,
    check_phase_trains,
    cross_check,
    known_max_positions,
)
from clmdetour.config.load import (
    MAX_ALIAS_NODES,
    REMOVABLE_SECTIONS,
    YTE_KEY,
    ConfigError,
    UniqueKeyLoader,
    canonical,
    check_config_files,
    deep_merge,
    drop_removed_entries,
    drop_removed_variants,
    key_path,
    load_yaml,
)
from clmdetour.config.phase import (
    PHASES,
    base_build_section,
    fraction_layer_range,
    parse_layer_spec,
    phase1_owner,
    phase_key,
    resolve_fraction_specs,
    resolve_phase,
    training_loop_section,
    variant_target,
)
from clmdetour.config.schema import SCHEMA_DIR, check_finite_numbers, load_schema_registry, validate_config
from clmdetour.config.warnings import frozen_encoder_warning, lr_grid_warning, max_length_warning

__all__ = [
    "MAX_ALIAS_NODES", "PHASES", "REMOVABLE_SECTIONS", "SCHEMA_DIR", "YTE_KEY", "BatchPlan", "BatchWording",
    "ConfigError", "PlanningWording", "UniqueKeyLoader", "base_build_section", "canonical", "check_batch_division",
    "check_config_files", "check_context_length", "check_finite_numbers", "check_mask_token", "check_phase_trains",
    "cross_check", "deep_merge", "drop_removed_entries", "drop_removed_variants", "fraction_layer_range",
    "frozen_encoder_warning", "key_path", "known_max_positions", "load_schema_registry", "load_yaml", "lr_grid_warning",
    "max_length_warning", "parse_layer_spec", "phase1_owner", "phase_key", "plan_batch", "pretrain_devices",
    "resolve_fraction_specs", "resolve_phase", "training_loop_section", "validate_config", "variant_target",
]
