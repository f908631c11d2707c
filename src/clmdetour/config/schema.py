"""Validation of the merged config against its JSON schema (``workflow/schemas/*.schema.yaml``), defaults
filled, then the planning checks (:func:`clmdetour.config.checks.cross_check`).

The workflow validates the merged config (``config/config.yaml`` plus any overlay such as
``config/demo.yaml``) once when it loads. Errors are one line naming the key path
(``pretraining.variants.clm-freeze-low.phase1.freeze[0]``) and the bad value.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import yaml

from clmdetour.config.checks import cross_check
from clmdetour.config.load import ConfigError, UniqueKeyLoader, drop_removed_entries, drop_removed_variants, key_path
from clmdetour.config.phase import resolve_fraction_specs

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "workflow" / "schemas"


def load_schema_registry(schema_dir: Path):
    """The ``referencing`` registry of every ``*.schema.yaml`` in ``schema_dir``, each under its file name
    (``config.schema.yaml`` is the root; sub-schemas lose their ``$schema`` so that defaults are filled through
    ``$ref``). Read by :func:`validate_config` and :mod:`clmdetour.config_docs`."""
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

    # JSON Schema counts 16.0 as an integer; the jobs do not (range(16.0) is a TypeError at job time)
    integers = Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, x: isinstance(x, int) and not isinstance(x, bool))
    cls = validators.extend(Draft202012Validator, {"properties": set_defaults}, type_checker=integers)
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
    drop_removed_variants(config)
    drop_removed_entries(config)
    registry = load_schema_registry(schema_dir)
    schema = registry.contents("config.schema.yaml")
    validator = _validator_with_defaults(schema, registry)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    while errors and _coerce_command_line_scalars(config, errors):
        errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    check_finite_numbers(config)
    if errors:
        e = errors[0]
        path = list(e.absolute_path)
        if e.validator == "additionalProperties":
            extra = re.findall(r"'([^']+)' was unexpected", e.message)
            allowed = sorted((e.schema.get("properties") or {}).keys())
            removed = (e.schema.get("x-removed") or {}).get(extra[0]) if extra else None
            if removed:
                raise ConfigError(f"config key {key_path(path + extra[:1])!r} is no longer accepted: {removed}")
            raise ConfigError(f"config key {key_path(path + extra[:1])!r} is unknown; allowed keys here: {allowed}")
        if _whole_float_for_integer(e):
            raise ConfigError(f"config key {key_path(path)!r}: {e.instance!r} is a float where a whole number is "
                              f"expected; write {int(e.instance)}")
        if e.validator == "type" and isinstance(e.instance, str) and _yaml11_float_string(e.instance):
            types = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
            raise ConfigError(f"config key {key_path(path)!r}: {e.instance!r} is a string, not a number: YAML 1.1 "
                              f"(which Snakemake and PyYAML read) needs a dot in the mantissa and a sign in the "
                              f"exponent; write {_yaml11_float_spelling(e.instance, 'number' not in types)}")
        raise ConfigError(f"config key {key_path(path)!r}: {e.message}")
    resolve_fraction_specs(config)
    cross_check(config)
    return config


def check_finite_numbers(value: Any, path: tuple = ()) -> None:
    """Refuse NaN and infinite floats anywhere in ``value`` (a config, or a part of it at ``path``).

    YAML reads ``.nan``, ``.inf`` and ``-.inf`` as floats, and NaN compares false with every schema
    bound, so ``lr: .nan`` passed the schema and failed at job time; ``lr: .inf`` trained to all-NaN
    weights. No key of the schema means anything by a non-finite value, so every number is checked.

    Raises:
        ConfigError: naming the first such key (``pretraining.optimizer.lr``) and its value.
    """
    if isinstance(value, dict):
        for k, v in value.items():
            check_finite_numbers(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_finite_numbers(v, (*path, i))
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"config key {key_path(path)!r}: {value!r} is not a finite number (YAML .nan, .inf "
                          "and -.inf read as floats); give a finite value")


def _whole_float_for_integer(e) -> bool:
    """Whether the schema error ``e`` is a float without a fractional part (``8.0``) where a whole number is
    expected: a ``type`` error naming integer, or a ``oneOf``/``anyOf`` one of whose choices is an integer
    (``micro_batch_sequences``: an integer or ``auto``)."""
    if not (isinstance(e.instance, float) and e.instance.is_integer()):
        return False
    if e.validator == "type":
        return "integer" in (e.validator_value if isinstance(e.validator_value, list) else [e.validator_value])
    return e.validator in ("oneOf", "anyOf") and any(
        isinstance(choice, dict) and choice.get("type") == "integer" for choice in e.validator_value)


def _yaml11_float_string(text: str) -> bool:
    """Whether ``text`` is a number in exponent notation that YAML 1.1 (PyYAML) reads as a string: a
    mantissa without a dot (``1e-5``) or an exponent without a sign (``1.0e5``)."""
    return re.fullmatch(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+", text.strip()) is not None


def _yaml11_float_spelling(text: str, integer: bool = False) -> str:
    """The spelling of the number ``text`` that YAML 1.1 reads as a number: ``1e-5`` -> ``1.0e-5``,
    ``1.0e5`` -> ``1.0e+5``; for an integer key, the whole number with underscores (``1e5`` -> ``100_000``)."""
    value = float(text)
    if integer and value.is_integer():
        return f"{int(value):_}"
    mantissa, exponent = re.split(r"[eE]", text.strip())
    if "." not in mantissa:
        mantissa += ".0"
    if exponent[0] not in "+-":
        exponent = "+" + exponent
    return f"{mantissa}e{exponent}"


def _coerce_command_line_scalars(config: dict, errors) -> bool:
    """Turn strings where the schema wants a number, boolean or null into that type, in place.

    Snakemake parses nested ``--config`` values with YAML's BaseLoader, so
    ``--config cluster='{pretrain_nodes: 2}'`` arrives as the string ``'2'``.
    Returns whether anything changed.
    """
    changed = False
    yaml_types = {"integer": int, "number": (int, float), "boolean": bool, "null": type(None)}
    for e in errors:
        if e.validator != "type" or not isinstance(e.instance, str) or not e.absolute_path:
            continue
        wanted = [e.validator_value] if isinstance(e.validator_value, str) else list(e.validator_value)
        try:
            value = yaml.load(e.instance, Loader=UniqueKeyLoader)  # bounded, as every config YAML
        except yaml.YAMLError:
            continue
        if any(isinstance(value, yaml_types[t]) and not (t != "boolean" and isinstance(value, bool))
               for t in wanted if t in yaml_types):
            *parents, last = list(e.absolute_path)
            holder = config
            for k in parents:
                holder = holder[k]
            holder[last] = value
            changed = True
    return changed
