"""Typed settings: the schema-filled config sections that training and fine-tuning read, as frozen
dataclasses built once after validation.

The JSON schema (``workflow/schemas/``) is the one place that states each key's default; the
rules hand each job its section as canonical JSON (``clmdetour.config.resolve_phase``,
``clmdetour.evaluation.grid``), and the job builds these objects from it with ``from_dict``, which
refuses a missing or an unknown key by name. Nothing reads these sections through
``.get(key, default)``: a default stated there could contradict the schema's.

``as_dict`` gives back the section exactly as it came in (lists, not tuples), so the run hash and
``run.json`` are computed from the same values as before.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from clmdetour.config import ConfigError
from clmdetour.objectives import OBJECTIVE_KEYS, OBJECTIVES, ObjectiveSettings, get_objective


def _build(cls, data: Mapping[str, Any], where: str, nested: Mapping[str, type] | None = None):
    """``cls(**data)`` with every field present and no other key; nested dataclasses built from their dicts.

    Raises:
        ConfigError: a required key is missing or an unknown key is present (naming ``where``).
    """
    check_keys(cls, data, where)
    values = dict(data)
    for name, sub in (nested or {}).items():
        if name in values:
            values[name] = sub.from_dict(values[name], f"{where}.{name}")
    return cls(**values)


def check_keys(cls, data: Mapping[str, Any], where: str) -> None:
    """Refuse a ``data`` that is not a mapping, holds a key that is not a field of ``cls`` or lacks a field
    without a default.

    Raises:
        ConfigError: naming ``where`` and the keys.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(fields)}")
    required = [n for n, f in fields.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [n for n in required if n not in data]
    if missing:
        raise ConfigError(f"{where}: missing key(s) {missing} (the schema fills them: was the config validated?)")


def _plain(value: Any) -> Any:
    """A dataclass or tuple turned back into JSON's plain types (dicts, lists)."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class OptimizerSettings:
    """``pretraining.optimizer`` less its learning rate (the phase's ``lr``): Composer's ``DecoupledAdamW``.

    ``weight_decay`` is in decoupled units (ModernBERT's setting, 1e-5), ``eps`` Adam's epsilon.
    """

    betas: list
    eps: float
    weight_decay: float

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "pretraining.optimizer") -> OptimizerSettings:
        """Raises: ConfigError (missing or unknown key)."""
        return _build(cls, data, where)


@dataclass(frozen=True)
class LoggerSettings:
    """``pretraining.loggers``: which Composer loggers a phase turns on."""

    tensorboard: bool
    mlflow: bool
    wandb: bool
    wandb_project: str | None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "pretraining.loggers") -> LoggerSettings:
        """Raises: ConfigError (missing or unknown key)."""
        return _build(cls, data, where)


@dataclass(frozen=True)
class DivergenceSettings:
    """``pretraining.divergence``: when a phase whose loss explodes (and stays finite) is stopped
    (:class:`clmdetour.training.callbacks.DivergenceGuard`). Ratios are multiples of a loss (nats per
    labelled token); ``patience`` counts consecutive evaluations (held-out) or steps (training)."""

    heldout_evals: int
    heldout_ratio: float
    train_ratio: float
    patience: int

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "pretraining.divergence") -> DivergenceSettings:
        """Raises: ConfigError (missing or unknown key)."""
        return _build(cls, data, where)


@dataclass(frozen=True)
class QualityFloorSettings:
    """``pretraining.quality_floor``: the end-of-phase floor (:func:`clmdetour.training.quality.check_quality_floor`)
    of each phase, a multiple of the held-out rows' unigram entropy (nats per token); None: no floor."""

    phase1: float | None
    decay: float | None

    def fraction(self, phase: str) -> float | None:
        """The floor of ``phase`` (``phase1`` or ``decay``)."""
        return self.decay if phase == "decay" else self.phase1

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "pretraining.quality_floor") -> QualityFloorSettings:
        """Raises: ConfigError (missing or unknown key)."""
        return _build(cls, data, where)


@dataclass(frozen=True)
class PhaseSettings:
    """One pretraining phase's resolved section (``clmdetour.config.resolve_phase``).

    Units: ``tokens``, ``warmup_tokens``, ``seq_len`` and ``loss_chunk_tokens`` in tokens;
    batches in sequences of ``seq_len`` tokens; ``lr`` the peak learning rate (the one
    learning-rate key of a phase); ``checkpoint_margin_s`` and ``process_group_timeout_s`` in
    seconds; ``checkpoint_interval`` a Composer time string (``"50ba"``). ``final_lr_fraction`` and
    ``load_optimizer_state`` exist in the decay phase only (None / False in phase 1).

    The keys an objective owns (:data:`clmdetour.objectives.OBJECTIVE_KEYS`: ``masking_rate``) are not
    fields: they are kept in ``objective_values`` as they came in, and the phase's objective reads its own
    from them (:attr:`objective_settings`), so an objective's new key needs no field here. A resolved
    section holds only its own objective's keys (:func:`clmdetour.config.phase.drop_other_objectives_keys`).

    It holds values only, as the phase job's ``--section`` JSON does: the config key that set a value is
    known at planning (:func:`clmdetour.config.phase_key`), where the batch plan is checked with it.
    """

    phase: str
    objective: str
    tokens: int
    lr: float
    seq_len: int
    seed: int
    global_batch_sequences: int
    micro_batch_sequences: int | str
    freeze: list
    warmup_tokens: int
    precision: str
    attn_implementation: str
    document_mask: bool
    compile: bool | str
    memory_limit_gib: float
    valid_sequences: int
    loss_chunk_tokens: int
    checkpoint_interval: str
    checkpoint_margin_s: float
    checkpoint_root: str
    keep_checkpoints: int
    log_interval_steps: int
    process_group_timeout_s: float
    progress_bar: bool
    optimizer: OptimizerSettings
    loggers: LoggerSettings
    final_lr_fraction: float | None = None
    load_optimizer_state: bool = False
    divergence: DivergenceSettings | None = None  # None: only a non-finite loss stops the phase
    quality_floor: QualityFloorSettings | None = None  # None: no floor at the phase's end
    objective_values: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "phase section") -> PhaseSettings:
        """Build from a resolved section (the phase job's ``--section`` JSON, or
        :func:`clmdetour.config.resolve_phase`'s dict); the keys objectives own go to ``objective_values``.

        Raises:
            ConfigError: a missing or unknown key, naming it (``objective_values`` too: not a section key).
        """
        missing = []
        if isinstance(data, Mapping):
            if "objective_values" in data:
                raise ConfigError(f"{where}: unknown key(s) ['objective_values'] (not a section key)")
            objective = OBJECTIVES.get(data.get("objective")) if isinstance(data.get("objective"), str) else None
            owned = objective.settings.owned_keys() if objective else ()
            missing = [k for k in owned if k not in data]  # the phase's own objective's keys only
            data = dict({k: v for k, v in data.items() if k not in OBJECTIVE_KEYS},
                        objective_values={k: data[k] for k in OBJECTIVE_KEYS if k in data})
        settings = _build(cls, data, where, {"optimizer": OptimizerSettings, "loggers": LoggerSettings,
                                             "divergence": DivergenceSettings,
                                             "quality_floor": QualityFloorSettings})
        if missing:
            raise ConfigError(f"{where}: missing key(s) {missing} (the schema fills them: was the config validated?)")
        return settings

    @property
    def objective_settings(self) -> ObjectiveSettings:
        """The phase's objective's own settings (:meth:`clmdetour.objectives.Objective.settings_of`), from which
        its collator and its labelled fraction are built."""
        return get_objective(self.objective, "phase section objective").settings_of(self.objective_values)

    def as_dict(self) -> dict:
        """The section as plain JSON types, without the decay-only keys in phase 1 (as it came in)."""
        out = _plain(self)
        out.update(out.pop("objective_values"))
        if self.final_lr_fraction is None:
            out.pop("final_lr_fraction")
        if self.phase != "decay":
            out.pop("load_optimizer_state")
        if self.divergence is None:
            out.pop("divergence")
        if self.quality_floor is None:
            out.pop("quality_floor")
        return out


@dataclass(frozen=True)
class FinetuneSettings:
    """The ``evaluation`` keys that change fine-tuning results (:data:`FINETUNE_KEYS`, derived from the fields).

    ``tie_tolerance`` in score units (fractions of 1); ``ner_context_tokens`` in tokens each side of a
    NER window; ``threshold_grid`` the multilabel decision thresholds tried on dev.
    """

    first_seed: int
    precision: str
    attn_implementation: str
    ner_context_tokens: int
    threshold_grid: list | None
    tie_tolerance: float

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "evaluation") -> FinetuneSettings:
        """Raises: ConfigError (missing or unknown key)."""
        return _build(cls, data, where)


#: The ``evaluation`` keys a fine-tuning job receives (its ``settings`` params), in field order.
FINETUNE_KEYS = tuple(f.name for f in dataclasses.fields(FinetuneSettings))


def check_lr_grid(grid, key: str) -> None:
    """The rule of a learning-rate grid: not empty, strictly increasing (the sweep breaks ties toward the grid's
    middle, which needs the order; :func:`clmdetour.finetune.sweep.choose_lr`). Its one implementation.

    Args:
        grid: the peak learning rates as given (numbers).
        key: the config key that set the grid, named in the message (``evaluation.lr_grid`` or
            ``tasks.{task}.finetune.lr_grid``).

    Raises:
        ConfigError: (a ``ValueError``) an empty grid, or a point not above the one before it, naming ``key``
            and the grid as given.
    """
    values = [float(x) for x in grid]
    if not values:
        raise ConfigError(f"{key}: no learning-rate grid (set evaluation.lr_grid)")
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise ConfigError(f"{key}: {grid} is not strictly increasing (the sweep breaks ties toward "
                          f"the grid's middle, which needs the order); sort it and drop repeats")


def _real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def finetune_value_problem(block) -> str | None:
    """What is wrong with the values of a ``finetune`` block (attributes ``epochs``, ``batch_size``,
    ``warmup_ratio``, ``betas``, ``eps``, ``weight_decay``), as ``"key: why"``, or None. The rules (the schema's,
    for a block built without it): ``batch_size`` a whole number >= 1; ``epochs`` > 0; ``warmup_ratio`` in [0, 1);
    ``betas`` two numbers in [0, 1) (Adam, Kingma & Ba 2015); ``eps`` > 0; ``weight_decay`` >= 0."""
    if isinstance(block.batch_size, bool) or not isinstance(block.batch_size, int) or block.batch_size < 1:
        return f"batch_size: {block.batch_size!r} is not a whole number of examples >= 1"
    checks = (("epochs", lambda v: v > 0, "> 0"), ("warmup_ratio", lambda v: 0 <= v < 1, "in [0, 1)"),
              ("eps", lambda v: v > 0, "> 0"), ("weight_decay", lambda v: v >= 0, ">= 0"))
    for key, ok, rule in checks:
        value = getattr(block, key)
        if not (_real(value) and ok(value)):
            return f"{key}: {value!r} is not a number {rule}"
    betas = block.betas
    if not (isinstance(betas, (list, tuple)) and len(betas) == 2 and all(_real(b) and 0 <= b < 1 for b in betas)):
        return f"betas: {betas!r} is not two numbers in [0, 1)"
    return None


@dataclass(frozen=True)
class TaskFinetuneSettings:
    """A task's ``finetune`` block (``tasks.{task}.finetune``, schema-filled, ``lr_grid`` resolved), checked once.

    Units: ``lr_grid`` peak learning rates, strictly increasing (:func:`check_lr_grid`); ``epochs`` passes
    over train (may be fractional); ``batch_size`` examples per optimizer step; ``warmup_ratio`` the fraction
    of all steps with linear warm-up; ``betas``, ``eps`` Adam's; ``weight_decay`` in decoupled units
    (Composer's DecoupledAdamW, as in pretraining). Schema defaults: ``workflow/schemas/tasks.schema.yaml``.
    The task types' own fine-tuning knobs are ``evaluation`` keys (:class:`FinetuneSettings`).

    ``lr_grid_key`` is not a block key: the config key that set ``lr_grid`` (``evaluation.lr_grid`` or
    ``tasks.{task}.finetune.lr_grid``), named when the grid is refused; :meth:`as_dict` leaves it out.
    """

    lr_grid: list
    epochs: float
    batch_size: int
    warmup_ratio: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    lr_grid_key: str = "finetune.lr_grid"

    def __post_init__(self):
        check_lr_grid(self.lr_grid, self.lr_grid_key)
        problem = finetune_value_problem(self)
        if problem:
            raise ConfigError(f"finetune.{problem}")
        object.__setattr__(self, "betas", tuple(self.betas))  # as_dict gives the list back

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "finetune",
                  lr_grid_key: str | None = None) -> TaskFinetuneSettings:
        """Build from a task's resolved ``finetune`` keys; ``lr_grid_key``: the key that set the grid
        (default ``{where}.lr_grid``).

        Raises:
            ConfigError: a missing or unknown key (``lr_grid_key`` too: not a block key), an empty grid or one
                that is not strictly increasing, naming the key.
        """
        if isinstance(data, Mapping) and "lr_grid_key" in data:
            raise ConfigError(f"{where}: unknown key(s) ['lr_grid_key'] (not a block key: pass it as an argument)")
        check_keys(cls, data, where)
        problem = finetune_value_problem(SimpleNamespace(**data))
        if problem:
            raise ConfigError(f"{where}.{problem}")
        return cls(**data, lr_grid_key=lr_grid_key or f"{where}.lr_grid")

    @property
    def lr_points(self) -> list[float]:
        """The grid's learning rates as floats, in order: the sweep's points (:mod:`clmdetour.finetune.sweep`)."""
        return [float(x) for x in self.lr_grid]

    def as_dict(self) -> dict:
        """The block as plain JSON types, exactly as it came in (without ``lr_grid_key``)."""
        out = _plain(self)
        out.pop("lr_grid_key")
        return out
