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
import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from clmdetour.errors import ExpectedError
from clmdetour.objectives import DECAY_OBJECTIVE

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "workflow" / "schemas"
PHASES = ("phase1", "decay")


class ConfigError(ExpectedError, ValueError):
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
    registry = _load_schema_registry(schema_dir)
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
                raise ConfigError(f"config key {_key_path(path + extra[:1])!r} is no longer accepted: {removed}")
            raise ConfigError(f"config key {_key_path(path + extra[:1])!r} is unknown; allowed keys here: {allowed}")
        if _whole_float_for_integer(e):
            raise ConfigError(f"config key {_key_path(path)!r}: {e.instance!r} is a float where a whole number is "
                              f"expected; write {int(e.instance)}")
        if e.validator == "type" and isinstance(e.instance, str) and _yaml11_float_string(e.instance):
            types = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
            raise ConfigError(f"config key {_key_path(path)!r}: {e.instance!r} is a string, not a number: YAML 1.1 "
                              f"(which Snakemake and PyYAML read) needs a dot in the mantissa and a sign in the "
                              f"exponent; write {_yaml11_float_spelling(e.instance, 'number' not in types)}")
        raise ConfigError(f"config key {_key_path(path)!r}: {e.message}")
    resolve_fraction_specs(config)
    _cross_check(config)
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
        raise ConfigError(f"config key {_key_path(path)!r}: {value!r} is not a finite number (YAML .nan, .inf "
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


def drop_removed_variants(config: dict) -> list[str]:
    """Remove the variants an overlay sets to ``null``, in place; return their names.

    Snakemake deep-merges ``--configfile`` overlays over ``config/config.yaml``, so
    an overlay inherits every variant of the paper config. ``clm-freeze-low-emb:
    null`` under ``pretraining.variants`` takes one out (the demo and real-small
    drop the paper-only ablations this way). A removed variant named by another
    variant's ``phase1_from`` is then reported by the cross-checks.
    """
    variants = (config.get("pretraining") or {}).get("variants")
    if not isinstance(variants, dict):
        return []
    removed = [name for name, v in variants.items() if v is None]
    for name in removed:
        del variants[name]
    return removed


REMOVABLE_SECTIONS = ("tasks", "reference_models")


def drop_removed_entries(config: dict) -> dict[str, list[str]]:
    """Remove the tasks and reference models an overlay sets to ``null``, in place; return their names.

    The same rule as :func:`drop_removed_variants`, for the other named sections an overlay inherits
    from ``config/config.yaml`` by Snakemake's deep merge: ``tasks: {emea: null}`` takes the task out
    of the configuration (it is then neither fetched, prepared, decontaminated against nor evaluated),
    ``reference_models: {drbert-7gb: null}`` a reference row (``config/english.yaml`` replaces the
    French grid this way). ``evaluation.tasks`` / ``evaluation.models`` only choose what enters the grid.

    Returns:
        ``{section: [removed names]}`` for the sections in :data:`REMOVABLE_SECTIONS` that had any.
    """
    removed = {}
    for section in REMOVABLE_SECTIONS:
        entries = config.get(section)
        if not isinstance(entries, dict):
            continue
        names = [name for name, v in entries.items() if v is None]
        for name in names:
            del entries[name]
        if names:
            removed[section] = names
    return removed


def _check_language(config: dict) -> None:
    """The card's ``release.language`` must include the config's ``language`` (the card's wording follows
    ``language``, its metadata ``release.language``): an English overlay that forgot ``release.language``
    would otherwise publish an English card declared in the default language.

    Raises:
        ConfigError: naming both keys and their values.
    """
    release = config.get("release") or {}
    listed = release.get("language")
    listed = [listed] if isinstance(listed, str) else list(listed or [])
    if listed and config["language"] not in listed:
        raise ConfigError(f"release.language {listed} does not include the config's language "
                          f"{config['language']!r} (config key language); add it, e.g. release: {{language: "
                          f"[{config['language']}]}}")


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
            value = yaml.load(e.instance, Loader=_UniqueKeyLoader)  # bounded, as every config YAML
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
    import math

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


def pretrain_devices(config: dict) -> int:
    """Training processes of a pretraining phase as planned: ``cluster.pretrain_nodes x cluster.pretrain_gpus``.

    A CPU phase (``pretrain_gpus: 0``) counts one process per node.
    """
    cluster = config.get("cluster") or {}
    return cluster.get("pretrain_nodes", 1) * max(cluster.get("pretrain_gpus", 4), 1)


def _batch_key(config: dict, variant: str, phase: str, key: str) -> str:
    """The config key a phase's batch value comes from (variant, phase defaults, or pretraining)."""
    pre = config["pretraining"]
    owner = phase1_owner(config, variant) if phase == "phase1" else variant
    if key in (pre["variants"][owner].get(phase) or {}):
        return f"pretraining.variants.{owner}.{phase}.{key}"
    if key in (pre.get(phase) or {}):
        return f"pretraining.{phase}.{key}"
    return f"pretraining.{key}"


def check_batch_division(config: dict, variant: str, phase: str, section: dict) -> None:
    """Check at planning that a phase's global batch splits over the planned devices.

    The global batch (sequences) must divide by ``cluster.pretrain_nodes x
    cluster.pretrain_gpus``, and a numeric micro-batch must divide the
    per-device batch (gradient accumulation = per-device / micro). A
    non-numeric micro-batch (``auto``) is chosen at run time.
    Example: 3 nodes x 4 GPUs give 384 / 12 = 32 sequences per device, which
    a micro-batch of 12 does not divide.

    Raises:
        ConfigError: naming the keys involved and their values.
    """
    cluster = config.get("cluster") or {}
    nodes, gpus = cluster.get("pretrain_nodes", 1), cluster.get("pretrain_gpus", 4)
    devices = pretrain_devices(config)
    gb, mb = section["global_batch_sequences"], section["micro_batch_sequences"]
    gb_key = _batch_key(config, variant, phase, "global_batch_sequences")
    mb_key = _batch_key(config, variant, phase, "micro_batch_sequences")
    if gb % devices:
        raise ConfigError(f"{gb_key} ({gb}) is not divisible by cluster.pretrain_nodes x cluster.pretrain_gpus "
                          f"= {nodes} x {gpus} = {devices} devices; choose a global batch that is a multiple of "
                          f"{devices} or another node/GPU count")
    if isinstance(mb, int) and not isinstance(mb, bool) and (gb // devices) % mb:
        raise ConfigError(f"{mb_key} ({mb}) does not divide the per-device batch {gb // devices} "
                          f"(= {gb_key} {gb} / (cluster.pretrain_nodes x cluster.pretrain_gpus = {nodes} x {gpus})); "
                          f"choose a divisor of {gb // devices}")


def check_phase_trains(config: dict, variant: str | None, phase: str, section: dict) -> None:
    """Refuse at planning a phase that cannot train as configured, naming the key that sets each value.

    - a budget under one global batch (``global_batch_sequences x corpus.seq_len`` tokens): one step
      at most, taken during the warm-up;
    - ``warmup_tokens`` longer than the phase: the learning rate would never reach its peak
      (the paper's peak is 2e-4);
    - a ``checkpoint_interval`` of 0: no checkpoint would ever be written, so the phase could not resume.

    Args:
        variant: the variant, or None for the base model's build (``phase`` ``"build"``:
            ``base_model.build.pretrain_tokens`` and ``base_model.build.warmup_tokens``).

    Raises:
        ConfigError: naming the keys and their values (tokens).
    """
    if variant is None:
        tokens_key, warm_key = "base_model.build.pretrain_tokens", "base_model.build.warmup_tokens"
        gb_key, what = "pretraining.global_batch_sequences", "the base model's build"
    else:
        tokens_key, warm_key, gb_key = (_batch_key(config, variant, phase, k)
                                        for k in ("tokens", "warmup_tokens", "global_batch_sequences"))
        what = f"{variant}'s {phase}"
    tokens, seq_len = section["tokens"], config["corpus"]["seq_len"]
    batch_tokens = section["global_batch_sequences"] * seq_len
    if tokens < batch_tokens:
        raise ConfigError(f"{tokens_key} ({tokens:,} tokens) is less than one global batch ({gb_key} "
                          f"{section['global_batch_sequences']} x corpus.seq_len {seq_len} = {batch_tokens:,} tokens): "
                          f"{what} would take at most one step; raise the budget or lower the batch")
    warm = section.get("warmup_tokens") or 0
    if phase == "decay" and warm:
        raise ConfigError(f"{warm_key} ({warm:,} tokens): the decay starts at its peak learning rate and decays "
                          "(1-sqrt); it has no warm-up, so the key would be ignored: remove it or set it to 0")
    if warm > tokens:
        raise ConfigError(f"{warm_key} ({warm:,} tokens) is longer than {what} ({tokens_key}: {tokens:,} tokens): "
                          "the learning rate would never reach its peak; shorten the warm-up")
    interval = str(section.get("checkpoint_interval", "1ba"))
    m = re.match(r"(\d+)", interval)
    if m and int(m.group(1)) == 0:
        key = "pretraining.checkpoint_interval" if variant is None else _batch_key(
            config, variant, phase, "checkpoint_interval")
        raise ConfigError(f"{key} ({interval!r}): no checkpoint would ever be written, so a killed or timed-out "
                          f"phase could not resume; give a positive interval, e.g. '200ba'")


def _check_decay_objective(config: dict) -> None:
    """The decay is MLM (the paper's phase 2): an ``objective`` other than ``mlm`` set for it is refused,
    not silently replaced (:func:`resolve_phase` fixes the decay's objective).

    Raises:
        ConfigError: naming the key.
    """
    pre = config["pretraining"]
    places = [("pretraining.decay", pre.get("decay") or {})]
    places += [(f"pretraining.variants.{n}.decay", v.get("decay") or {}) for n, v in pre["variants"].items()]
    for where, section in places:
        objective = section.get("objective")
        if objective is not None and objective != DECAY_OBJECTIVE:
            raise ConfigError(f"{where}.objective: the decay phase is MLM (the paper's phase 2), got {objective!r}; "
                              f"remove the key or set it to {DECAY_OBJECTIVE!r}")


def check_mask_token(config: dict) -> None:
    """Refuse at planning a base model whose tokenizer has no mask token: every variant's decay is MLM,
    so it would fail only after phase 1 trained. Read from the folder's ``tokenizer_config.json``
    (``mask_token``) or ``special_tokens_map.json`` when planning can see the folder (``base_model.path``,
    or a fetched Hub copy); a base built by the pipeline always has one (:mod:`clmdetour.demo.base`).
    The phase checks the loaded tokenizer again (:func:`clmdetour.training.model_setup.build_model`).

    Raises:
        ConfigError: naming the folder and ``base_model``.
    """
    import json

    base = config["base_model"]
    if base.get("build"):
        return
    folder = Path(base["path"]) if base.get("path") else Path("resources/models") / base["key"]
    found, read = False, False
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        f = folder / name
        if not f.is_file():
            continue
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return  # unreadable: the phase's own load reports it
        read = True
        found = found or bool(isinstance(data, dict) and data.get("mask_token"))
    if read and not found:
        raise ConfigError(f"base_model ({folder}): the tokenizer has no mask token (mask_token in "
                          f"tokenizer_config.json or special_tokens_map.json); the decay and the MLM baseline "
                          f"need one: add it to the tokenizer or start from another model")


def _check_base_model(config: dict) -> None:
    base = config["base_model"]
    if base.get("build") is None and not base.get("path") and not base.get("hub_id"):
        raise ConfigError(f"base_model.hub_id is null and neither base_model.path nor base_model.build is set: "
                          f"name the {base['key']!r} checkpoint to start from (a Hub id, or a local folder in "
                          f"base_model.path), e.g. --config base_model='{{hub_id: ORG/NAME}}'; it is never guessed, "
                          f"so a config for one size never trains another size's checkpoint")


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


def _check_one_pass(config: dict, variant: str, section: dict) -> None:
    """Phase 1 is one pass over the corpus: its tokens fit ``corpus.train_tokens`` plus one global batch.

    The packed stream is the weighted mix at ``corpus.train_tokens`` (the paper: 10B tokens, "Phase 1 —
    10B tokens"); phases are rounded up to whole global batches, hence the one-batch tolerance. The
    decay starts after phase 1 and continues into the next, reshuffled pass. Skipped when
    ``corpus.train_tokens`` is null (every source once: the size is known only after preparation).

    Raises:
        ConfigError: naming both keys, when phase 1 would read past the end of the stream.
    """
    stream = config["corpus"].get("train_tokens")
    if not stream:
        return
    batch_tokens = section["global_batch_sequences"] * config["corpus"]["seq_len"]
    if section["tokens"] > stream + batch_tokens:
        own = "tokens" in (config["pretraining"]["variants"][variant].get("phase1") or {})
        key = f"pretraining.variants.{variant}.phase1.tokens" if own else "pretraining.phase1.tokens"
        raise ConfigError(f"{key} ({section['tokens']:,} tokens) is more than corpus.train_tokens "
                          f"({stream:,}) plus one global batch ({batch_tokens:,} tokens): phase 1 is one pass over "
                          "the corpus; set corpus.train_tokens to phase 1's token budget (docs/fidelity.md)")


def check_context_length(seq_len: int, max_positions: int, model: str, key: str = "corpus.seq_len") -> None:
    """Refuse a training sequence longer than the model's position limit (``max_position_embeddings``).

    ModernBERT's rotary embeddings would run past the lengths the model was built for, and the
    released config and card would state the smaller limit. Both numbers are tokens.

    Raises:
        ConfigError: naming ``key``, both numbers and the model.
    """
    if seq_len > max_positions:
        raise ConfigError(f"{key} ({seq_len:,} tokens) is longer than {model}'s max_position_embeddings "
                          f"({max_positions:,} tokens); set {key} to at most {max_positions:,}")


def known_max_positions(config: dict) -> tuple[int, str] | None:
    """The base model's ``max_position_embeddings`` when planning can know it, with where it comes from:
    ``base_model.build.max_position_embeddings`` (a base built by the pipeline), or the ``config.json``
    of a base model folder that is already there (``base_model.path``, or a fetched Hub copy in
    ``resources/models/{key}``); None otherwise (checked at the phase's start instead)."""
    import json

    base = config["base_model"]
    if base.get("build"):
        return int(base["build"]["max_position_embeddings"]), "base_model.build"
    folder = Path(base["path"]) if base.get("path") else Path("resources/models") / base["key"]
    cfg = folder / "config.json"
    if cfg.is_file():
        try:
            value = json.loads(cfg.read_text(encoding="utf-8")).get("max_position_embeddings")
        except (OSError, ValueError):
            return None
        return (int(value), str(cfg)) if isinstance(value, int) else None
    return None


def max_length_warning(config: dict) -> str:
    """One line for planning naming the tasks whose ``max_length`` is above the base model's
    ``max_position_embeddings`` when planning can know it (:func:`known_max_positions`), else ''.

    Fine-tuning caps a task's inputs at each model's own limit (tokens), so such a task trains on
    shorter inputs than its config says: a warning, not a refusal (a grid may hold models of longer
    context than the base).
    """
    known = known_max_positions(config)
    if not known:
        return ""
    over = {t: spec["max_length"] for t, spec in (config.get("tasks") or {}).items()
            if isinstance(spec, dict) and isinstance(spec.get("max_length"), int) and spec["max_length"] > known[0]}
    if not over:
        return ""
    listed = ", ".join(f"tasks.{t}.max_length ({n:,})" for t, n in over.items())
    return (f"{listed} above the base model's max_position_embeddings ({known[0]:,} tokens, {known[1]}): its "
            f"fine-tuning inputs are capped at {known[0]:,} tokens; lower the key to say so")


def frozen_encoder_warning(config: dict) -> str:
    """One line for planning naming each variant phase whose ``freeze`` covers every encoder layer
    (``base_model.num_layers``), '' when none: only the MLM head (and the embeddings, unless frozen too)
    would train. A warning, not a refusal: training the head alone is a possible probe.
    """
    n_layers = config["base_model"]["num_layers"]
    found = []
    for name, v in config["pretraining"]["variants"].items():
        for phase in PHASES:
            if phase == "phase1" and v.get("phase1_from"):
                continue  # the owner's phase 1, said under the owner
            freeze = resolve_phase(config, name, phase)["freeze"]
            frozen = {x for i, spec in enumerate(freeze) for x in parse_layer_spec(spec, n_layers, f"freeze[{i}]")}
            if not set(range(n_layers)) <= frozen:
                continue
            emb = "embeddings" in frozen
            found.append(f"{_batch_key(config, name, phase, 'freeze')} {freeze} freezes every encoder layer (0-"
                         f"{n_layers - 1} of base_model.num_layers {n_layers}){' and the embeddings' if emb else ''} "
                         f"of {name}'s {phase}: only the {'MLM head trains' if emb else 'embeddings and the MLM head train'}")
    if not found:
        return ""
    return "; ".join(found) + "; free some layers in that key if this is not the experiment you meant"


def _check_names(config: dict) -> None:
    """Names that must be unique: corpus source names (each is a folder and a manifest row), and model
    keys (a variant named like the base model or a reference model would replace that row of the table).

    Raises:
        ConfigError: naming the key.
    """
    seen: dict[str, int] = {}
    for i, src in enumerate(config["corpus"]["sources"]):
        if src["name"] in seen:
            raise ConfigError(f"corpus.sources[{i}].name: {src['name']!r} is also the name of corpus.sources"
                              f"[{seen[src['name']]}]; each source needs its own name (its fetched folder and its "
                              "manifest row are named after it)")
        seen[src["name"]] = i
        fmt = src["format"]
        if fmt == "hub" and not src.get("hub_id"):
            raise ConfigError(f"corpus.sources[{i}] ({src['name']!r}): format hub needs hub_id (owner/name)")
        if fmt not in ("hub", "demo") and not src.get("path"):
            raise ConfigError(f"corpus.sources[{i}] ({src['name']!r}): format {fmt!r} needs path (a file or a folder)")
    base = config["base_model"]["key"]
    refs = set(config.get("reference_models") or {})
    for name in config["pretraining"]["variants"]:
        if name == base or name in refs:
            what = "the base model's key (base_model.key)" if name == base else f"a reference model (reference_models.{name})"
            raise ConfigError(f"pretraining.variants.{name}: the name is also {what}; the table would show one "
                              "row for both: rename the variant")


def _check_paths(config: dict) -> None:
    """Refuse an empty (or blank) path: ``pretraining.checkpoint_root: ''`` put the scratch folders at the file
    system's root (``/scratch/corpus-shards/``), and an empty ``path`` of a model, corpus source or task read
    the working directory or was taken for an unset one.

    Raises:
        ConfigError: naming the key.
    """
    keys = [("pretraining.checkpoint_root", config["pretraining"].get("checkpoint_root"), "checkpoints, the default"),
            ("base_model.path", config["base_model"].get("path"), None)]
    keys += [(f"corpus.sources[{i}].path", src.get("path"), None) for i, src in enumerate(config["corpus"]["sources"])]
    for section in ("tasks", "reference_models"):
        keys += [(f"{section}.{name}.path", (v or {}).get("path"), None) for name, v in (config.get(section) or {}).items()]
    for key, value, default in keys:
        if isinstance(value, str) and not value.strip():
            fix = f"remove the key for {default}" if default else "null (or remove the key) for none"
            raise ConfigError(f"{key}: {value!r} is an empty path; give a folder or file (relative paths: the "
                              f"working directory), or {fix}")


def _cross_check(config: dict) -> None:
    _check_paths(config)
    _check_language(config)
    _check_base_model(config)
    _check_names(config)
    known = known_max_positions(config)
    if known:
        check_context_length(config["corpus"]["seq_len"], known[0], f"the base model ({known[1]})")
    pre = config["pretraining"]
    variants = pre["variants"]
    n_layers = config["base_model"]["num_layers"]
    for name, v in variants.items():
        # a variant whose target name is a rule's: refused by clmdetour.pipeline.Pipeline (the wiring knows the rules)
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
            for i, spec in enumerate(section["freeze"]):
                parse_layer_spec(spec, n_layers, f"{where}.freeze[{i}]")
            for key in ("objective", "tokens", "lr"):
                if section.get(key) is None:
                    raise ConfigError(f"{where}.{key}: missing (set it in pretraining.{phase} or in the variant)")
            check_phase_trains(config, name, phase, section)
            gb, mb = section["global_batch_sequences"], section["micro_batch_sequences"]
            if mb != "auto" and gb < mb:
                raise ConfigError(f"{where}: global_batch_sequences ({gb}) is smaller than micro_batch_sequences ({mb})")
            check_batch_division(config, name, phase, section)
            if phase == "phase1":
                _check_one_pass(config, name, section)
    _check_decay_objective(config)
    if config["base_model"].get("build"):
        check_phase_trains(config, None, "build", base_build_section(config))
    check_mask_token(config)
    listed = config["corpus"].get("decontaminate_against", "all")
    for task in [] if listed == "all" else listed:
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
    # One learning-rate key per phase: ``lr`` (pretraining.optimizer.lr, unless the phase or the variant sets
    # its own); the resolved optimizer keeps only betas, eps and weight decay.
    shared["lr"] = shared["optimizer"].pop("lr")
    shared.setdefault("freeze", [])
    # pre[phase] carries the schema's defaults (masking_rate, warmup_tokens; decay: final_lr_fraction,
    # load_optimizer_state): workflow/schemas/pretrain.schema.yaml is their one definition.
    section = _deep_merge(shared, pre.get(phase) or {})
    section = _deep_merge(section, pre["variants"][variant].get(phase) or {})
    if phase == "decay":
        section["objective"] = DECAY_OBJECTIVE
    section["phase"] = phase
    section["seq_len"] = config["corpus"]["seq_len"]
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
    section = {k: copy.deepcopy(v) for k, v in pre.items() if k not in ("phase1", "decay", "variants")}
    section.update(phase="phase1", objective=DECAY_OBJECTIVE, tokens=build["pretrain_tokens"], lr=build["lr"],
                   warmup_tokens=build["warmup_tokens"], freeze=[], masking_rate=build["masking_rate"],
                   seed=build["seed"], seq_len=config["corpus"]["seq_len"])
    section["optimizer"] = {k: v for k, v in section["optimizer"].items() if k != "lr"}  # one lr key: ``lr``
    return section


def training_loop_section(section: dict) -> dict:
    """The part of a resolved phase that changes the trained weights (hashed for resume).

    Excludes keys that only change logging, checkpoint placement, compilation or the memory
    limit, so that turning on TensorBoard or compilation does not discard a half-finished run;
    ``document_mask`` enters only when on, so runs started before the key existed keep their hash.
    """
    skip = {"progress_bar", "loggers", "log_interval_steps", "checkpoint_root", "keep_checkpoints",
            "checkpoint_margin_s", "checkpoint_interval", "process_group_timeout_s", "compile", "memory_limit_gib"}
    out = {k: v for k, v in section.items() if k not in skip}
    if not out.get("document_mask", True):  # off (the default): hashed as before the key existed
        out.pop("document_mask")
    return out


def variant_target(variant: str) -> str:
    """Rule-name form of a variant (``clm-freeze-low`` -> ``clm_freeze_low``)."""
    return variant.replace("-", "_")


#: Nodes that aliases may add to one YAML file's tree: a config needs few; 8 nested levels of 10 aliases
#: (an "alias bomb" of 90 lines) would add 10^8, and walking them took minutes and gigabytes.
MAX_ALIAS_NODES = 10_000


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key (plain YAML keeps the last value silently),
    and refusing, while it composes, aliases that expand to more than :data:`MAX_ALIAS_NODES` nodes (or an
    alias inside its own anchor): the tree is never built, so reading a file costs time and memory in
    proportion to its text and the limit."""

    def __init__(self, stream):
        super().__init__(stream)
        self._expanded: dict[int, int] = {}  # id(node) -> nodes of its tree once every alias is expanded
        self._alias_nodes = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:  # an undefined alias: PyYAML's own error follows
                self._count_alias(event, node)
            return super().compose_node(parent, index)
        node = super().compose_node(parent, index)
        children = node.value if isinstance(node, yaml.SequenceNode) else (
            [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
        self._expanded[id(node)] = 1 + sum(self._expanded[id(child)] for child in children)
        return node

    def _count_alias(self, event, node) -> None:
        """Add the nodes alias ``event`` stands for; refuse past the limit, naming the line."""
        size = self._expanded.get(id(node))
        if size is None:
            raise yaml.composer.ComposerError(None, None, f"alias *{event.anchor} is inside its own anchor (a "
                                              "recursive structure, which no config key takes)", event.start_mark)
        self._alias_nodes += size
        if self._alias_nodes > MAX_ALIAS_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"aliases expand to more than {MAX_ALIAS_NODES:,} nodes (at *{event.anchor}), more than "
                "any config needs: refused before the file is built. Snakemake loads --configfiles without such a "
                "bound: check an overlay you did not write with `python -m clmdetour.pipeline.check_config FILES...` "
                "before giving it to snakemake", event.start_mark)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: merged keys may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: PyYAML's own error follows
                break
            if first is not None:
                where = f"line {line}" if first == line else f"lines {first} and {line}"
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping ({where}); YAML would keep only the "
                    "last value", key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


#: The key that makes Snakemake render a config file with yte (Python expressions run while it plans).
YTE_KEY = "__use_yte__"


def load_yaml(path: str | Path) -> dict:
    """Read a config YAML file; errors name the file and line.

    Raises:
        ConfigError: the file is missing, is not valid YAML, repeats a key in one mapping, has aliases that
            expand past :data:`MAX_ALIAS_NODES` nodes (refused while reading, in bounded time and memory), or
            does not hold a mapping at its top level.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a config file")
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
        try:  # JSON first, as Snakemake reads config files (a tab-indented JSON file is valid JSON, not YAML)
            data = json.loads(text, object_pairs_hook=lambda pairs: _unique_json_object(pairs, path))
        except json.JSONDecodeError:
            data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} invalid YAML: {getattr(e, 'problem', e)}") from None
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 text (byte {e.start}); "
                          "save the file as UTF-8") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file holds a mapping of keys at its top level, not a "
                          f"{type(data).__name__}")
    return data


def _unique_json_object(pairs: list, path: Path) -> dict:
    """``json.loads``'s object hook: a dict, refusing a key repeated in one object."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"{path}: key {key!r} appears twice in one JSON object; JSON readers keep only the "
                              "last value")
        out[key] = value
    return out


def check_config_files(paths: list[str | Path], allow_yte: bool = False) -> None:
    """Check the config files Snakemake merged (``workflow.configfiles``), which it reads without these checks.

    Each file is read again with :func:`load_yaml` (a key repeated in one mapping is refused: Snakemake
    keeps the last value silently). A file with ``__use_yte__: true`` is a yte template: Snakemake runs
    its Python expressions while it plans, before this check can stop anything, so such a file is code
    and this workflow refuses it unless ``allow_yte_configs: true`` (README, "Config files are code").

    Raises:
        ConfigError: naming the file (and line) of the first problem.
    """
    for path in paths:
        data = load_yaml(path)
        if data.get(YTE_KEY) and not allow_yte:
            raise ConfigError(f"{path}: {YTE_KEY}: true makes Snakemake run the file's Python expressions (yte) "
                              "whenever it plans, like a script: under snakemake, its expressions have already been "
                              "evaluated by Snakemake (it renders config files before the workflow starts, so before "
                              "this check); this workflow refuses templated config files unless a config file sets "
                              "allow_yte_configs: true. Before using an overlay you did not write, run "
                              "`python -m clmdetour.pipeline.check_config FILES...` (it reads templates as plain "
                              "YAML and runs nothing)")


def canonical(value: Any) -> Any:
    """A rule param in canonical form: mappings with sorted keys, only JSON's plain types.

    Snakemake decides that a finished job's "params have changed" by comparing
    the ``repr`` of each param with the one recorded when the job ran; the
    ``repr`` of a dict follows its insertion order, which for config sections
    follows the order in which config files were merged. Every rule param goes
    through this function, so that order never reschedules a job. Tuples become lists; numbers, strings, booleans and None stay.

    Raises:
        TypeError: a value JSON cannot represent (e.g. a set or a Path object);
            the message is ``json``'s, naming the type.
    """
    import json

    return json.loads(json.dumps(value, sort_keys=True))
