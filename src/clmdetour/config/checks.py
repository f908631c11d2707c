"""The planning checks of a validated config that its schema cannot state: names, paths, the base model,
each variant's phases (budgets, warm-up, checkpoints, freeze specs, the batch plan, one pass over the
corpus) and the context length. :func:`cross_check` runs them all (called by
:func:`clmdetour.config.schema.validate_config`); every refusal is a :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from clmdetour.config.batch import check_batch_division
from clmdetour.config.load import ConfigError
from clmdetour.config.phase import PHASES, base_build_section, parse_layer_spec, phase_key, resolve_phase
from clmdetour.objectives import DECAY_OBJECTIVE


def cross_check(config: dict) -> None:
    """Every planning check of a schema-valid config (defaults filled, fraction specs resolved), in order:
    paths, language, base model, names, context length, the variants' phases, the base model's build, the
    mask token, ``corpus.decontaminate_against``.

    Raises:
        ConfigError: naming the key of the first problem.
    """
    _check_paths(config)
    _check_language(config)
    _check_base_model(config)
    _check_build_shape(config)
    _check_task_splits(config)
    _check_names(config)
    known = known_max_positions(config)
    if known:
        check_context_length(config["corpus"]["seq_len"], known[0], f"the base model ({known[1]})")
    _check_variants(config)
    if config["base_model"].get("build"):
        check_phase_trains(config, None, "build", base_build_section(config))
    check_mask_token(config)
    listed = config["corpus"].get("decontaminate_against", "all")
    for task in [] if listed == "all" else listed:
        if config.get("tasks") and task not in config["tasks"]:
            raise ConfigError(f"corpus.decontaminate_against: {task!r} is not a task; tasks: {sorted(config['tasks'])}")


def _check_variants(config: dict) -> None:
    """Each variant's ``phase1_from`` and each phase it trains: freeze specs, required keys, the budget
    (:func:`check_phase_trains`), the batch plan (:func:`clmdetour.config.batch.check_batch_division`) and,
    for phase 1, one pass over the corpus; then the decay's objective.

    Raises:
        ConfigError: naming the key.
    """
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
            check_batch_division(config, name, phase, section)
            if phase == "phase1":
                _check_one_pass(config, name, section)
    _check_decay_objective(config)


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
        tokens_key, warm_key, gb_key = (phase_key(config, variant, phase, k)
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
        key = "pretraining.checkpoint_interval" if variant is None else phase_key(
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


def _check_build_shape(config: dict) -> None:
    """A built base model's attention heads must divide its hidden size (each head gets ``hidden_size /
    num_attention_heads`` dimensions: transformers' ModernBERT refuses the model at job time otherwise).

    Raises:
        ConfigError: naming both keys and the nearest sizes that divide.
    """
    build = config["base_model"].get("build")
    if not build:
        return
    hidden, heads = build["hidden_size"], build["num_attention_heads"]
    if hidden % heads:
        near = sorted({h for h in range(1, hidden + 1) if hidden % h == 0}, key=lambda h: (abs(h - heads), h))[:2]
        raise ConfigError(f"base_model.build.num_attention_heads: {heads} does not divide base_model.build.hidden_size "
                          f"{hidden} (each head gets hidden_size / heads dimensions); use {' or '.join(map(str, near))} "
                          f"heads, or a hidden size that is a multiple of {heads} (e.g. {hidden + heads - hidden % heads})")


def _check_task_splits(config: dict) -> None:
    """A hash split's ``dev_fraction`` + ``test_fraction`` must leave documents for train.

    Raises:
        ConfigError: naming the task's two keys and their sum.
    """
    for name, task in (config.get("tasks") or {}).items():
        split = (task or {}).get("split") or {}
        dev, test = split.get("dev_fraction", 0), split.get("test_fraction", 0)
        if split.get("policy") == "hash" and dev + test >= 1:
            raise ConfigError(f"tasks.{name}.split.dev_fraction ({dev:g}) + tasks.{name}.split.test_fraction "
                              f"({test:g}) = {dev + test:g} leaves no document for train; their sum must be below 1 "
                              "(defaults 0.1 and 0.2)")


def _check_base_model(config: dict) -> None:
    base = config["base_model"]
    if base.get("build") is None and not base.get("path") and not base.get("hub_id"):
        raise ConfigError(f"base_model.hub_id is null and neither base_model.path nor base_model.build is set: "
                          f"name the {base['key']!r} checkpoint to start from (a Hub id, or a local folder in "
                          f"base_model.path), e.g. --config base_model='{{hub_id: ORG/NAME}}'; it is never guessed, "
                          f"so a config for one size never trains another size's checkpoint")


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
    root = config["pretraining"].get("checkpoint_root")
    if isinstance(root, str) and root.strip():
        from pathlib import Path

        blocked = next((p for p in [Path(root), *Path(root).parents] if p.exists() and not p.is_dir()), None)
        if blocked is not None:
            raise ConfigError(f"pretraining.checkpoint_root: {root!r}: {str(blocked)!r} is a file, not a folder; "
                              "checkpoints, corpus shards and fine-tuning scratch go in folders under it: give "
                              "another path or move the file")
