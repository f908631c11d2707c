"""What a planned DAG costs in GPU-hours, before submission: pretraining phase jobs and the fine-tuning grid.

Units: tokens (input tokens a GPU processes), seconds, GPU-hours (one GPU busy for one hour). A rate is
**tokens per second per GPU**; a job on ``n`` GPUs is assumed to scale linearly, so its GPU-hours do not
depend on ``n`` and its wall hours are ``GPU-hours / n``.

- A pretraining phase job: ``tokens / rate / 3600`` GPU-hours, ``tokens`` its resolved
  ``pretraining.{phase}.tokens`` (variant overrides included), the rate of its objective (CLM or MLM).
  Every variant's decay is a job; phase 1 is a job of its owner only (a ``phase1_from`` variant reuses
  its owner's, so ``clm-long-decay`` adds one decay job and no phase 1). The CPU-only jobs (corpus,
  tasks, analysis, a base model built by the pipeline) are not counted.
- A fine-tuning run (one model, task, seed and learning rate): ``train examples x epochs x tokens per
  example`` tokens trained, plus ``(dev examples x epochs + test examples) x tokens per example`` evaluated
  (dev after every epoch, test once) at a third of a training token's cost (forward only). Tokens per
  example: the task's ``max_length``, capped at the model's own limit when the config knows it: an upper
  bound (batches are padded to their longest input only, and most inputs are shorter). Runs of a
  (model, task): ``tasks.{task}.seeds x len(lr grid)``, exact from the config.

The rates are read from one data file with their provenance (:mod:`clmdetour.pipeline.rates`,
``gpu_rates.json``) into :data:`MEASURED_RATES`; an estimate says so in the printed notes; callers
(benchmarks) override them with ``rates=``. They are scaled to the planned model by the ratio of FLOPs
per token (:func:`clmdetour.training.flops.model_flops_per_token`) of the 150M measurement
(:data:`REFERENCE_MODEL`) to the planned model, when planning can read the latter's config; otherwise the
150M base is assumed, and the printed block says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

from clmdetour.config import known_max_positions, phase1_owner, pretrain_devices, resolve_phase
from clmdetour.objectives import get_objective
from clmdetour.pipeline.paths import task_dir


class Rate(NamedTuple):
    """A throughput figure: ``tokens_per_s`` per GPU on sequences of ``seq_len`` tokens, with where it comes
    from (``source``) and whether it was measured for this use (False: a stated placeholder)."""

    tokens_per_s: float
    seq_len: int
    source: str
    measured: bool = True


def _stored_rates() -> dict[str, Rate]:
    """:data:`MEASURED_RATES` from the rates file (:mod:`clmdetour.pipeline.rates`), provenance in ``source``."""
    from clmdetour.pipeline.rates import provenance, read_rates

    return {kind: Rate(float(e["tokens_per_s"]), int(e["seq_len"]), provenance(e), bool(e["measured"]))
            for kind, e in read_rates().items()}


#: Tokens/s per GPU by rate kind, from ``gpu_rates.json`` (one data file with each rate's device, torch, date and
#: commit; ``python -m clmdetour.pipeline.rates update <gpu.json>`` rewrites it from a device run).
MEASURED_RATES: dict[str, Rate] = _stored_rates()

#: The architecture the rates were measured on (almanach/moderncamembert-base's, benchmarks/gpu.py BASE_150M).
REFERENCE_MODEL = {"vocab_size": 32768, "hidden_size": 768, "num_hidden_layers": 22, "intermediate_size": 1152,
                   "global_attn_every_n_layers": 3, "local_attention": 128}

#: How a pretraining rate kind reads in the printed block (the kind comes from the objective's ``causal``).
KIND_LABEL = {"causal": "CLM", "masked": "MLM"}

#: Fraction of positions through the LM head, per rate kind (FLOPs scaling; fine-tuning: no LM head).
PREDICTED_FRACTION = {"causal": 1.0, "masked": 0.15, "finetune": 0.0}

#: Examples per split assumed for a task whose files planning cannot read (neither ``results/tasks/{task}``
#: prepared nor the task's own JSON-lines files): the order of the paper's French biomedical tasks.
ASSUMED_EXAMPLES = {"train": 1000, "dev": 200, "test": 200}

#: Cost of an evaluated token relative to a trained one (forward only: 2 N of 6 N FLOPs).
EVAL_COST = 1 / 3

SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class CostRow:
    """One line of the projection.

    Attributes:
        stage: ``pretraining`` or ``fine-tuning``.
        name: what the row counts (``phase 1 CLM``, ``decay MLM``, or a task).
        jobs: the planned jobs (``variant/phase``, or ``model/task``).
        count: phase jobs, or fine-tuning runs (models x seeds x learning rates).
        tokens: tokens trained over the whole row (fine-tuning: evaluation tokens not included).
        rate: tokens/s per GPU assumed for training (a mean weighted by tokens when models differ).
        gpu_hours: GPU-hours of the row (fine-tuning: evaluation included).
        job_hours: wall hours of the row's longest job on the GPUs it asks for.
    """

    stage: str
    name: str
    jobs: tuple[str, ...]
    count: int
    tokens: float
    rate: float
    gpu_hours: float
    job_hours: float


@dataclass
class CostProjection:
    """The rows, and the notes saying what was assumed (placeholders, unreadable configs or task files)."""

    rows: list[CostRow]
    notes: list[str] = field(default_factory=list)
    limits: dict[str, float] = field(default_factory=dict)  # stage -> its job's wall limit, hours

    def gpu_hours(self, stage: str | None = None) -> float:
        """GPU-hours of one stage (``pretraining``, ``fine-tuning``) or of everything."""
        return sum(r.gpu_hours for r in self.rows if stage in (None, r.stage))

    def count(self, stage: str) -> int:
        """Phase jobs (``pretraining``) or fine-tuning runs (``fine-tuning``)."""
        return sum(r.count for r in self.rows if r.stage == stage)


def resolve_rates(rates: dict | None = None) -> dict[str, Rate]:
    """:data:`MEASURED_RATES` with ``rates`` over them: a :class:`Rate`, or a number (tokens/s per GPU,
    keeping the constant's sequence length, counted as measured).

    Raises:
        KeyError: a key that is not one of :data:`MEASURED_RATES`.
    """
    out = dict(MEASURED_RATES)
    for key, value in (rates or {}).items():
        if key not in out:
            raise KeyError(f"rates: unknown rate {key!r}; known: {sorted(out)}")
        out[key] = value if isinstance(value, Rate) else Rate(float(value), out[key].seq_len, "given by the caller")
    return out


def gpu_work_planned(config: dict) -> bool:
    """Whether the config asks for GPUs (``cluster.pretrain_gpus`` or ``cluster.finetune_gpus`` above 0)."""
    cluster = config.get("cluster") or {}
    return bool(cluster.get("pretrain_gpus", 4)) or bool(cluster.get("finetune_gpus", 1))


def flops_per_token(arch: dict, seq_len: int, predicted_fraction: float) -> float:
    """Training FLOPs per token of a ModernBERT architecture (a dict of its config keys); imports torch."""
    from clmdetour.training.flops import model_flops_per_token

    return model_flops_per_token(SimpleNamespace(**arch), seq_len, predicted_fraction)


def scaled_rate(rate: Rate, kind: str, arch: dict | None, seq_len: int, predicted_fraction: float | None = None) -> float:
    """``rate`` (measured on :data:`REFERENCE_MODEL` at ``rate.seq_len``) for ``arch`` (None: the reference)
    at ``seq_len`` tokens: times FLOPs per token of the measurement / FLOPs per token of the planned case."""
    ref_fraction = PREDICTED_FRACTION[kind]
    fraction = ref_fraction if predicted_fraction is None else predicted_fraction
    if arch in (None, REFERENCE_MODEL) and seq_len == rate.seq_len and fraction == ref_fraction:
        return float(rate.tokens_per_s)  # nothing to scale (and torch is not imported at planning)
    return rate.tokens_per_s * (flops_per_token(REFERENCE_MODEL, rate.seq_len, ref_fraction)
                                / flops_per_token(arch or REFERENCE_MODEL, seq_len, fraction))


_ARCH_KEYS = tuple(REFERENCE_MODEL)


def _arch_from_folder(folder: Path) -> tuple[dict | None, str]:
    import json

    cfg = folder / "config.json"
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, "config.json not readable at planning"
    if not all(isinstance(data.get(k), int) for k in _ARCH_KEYS):
        return None, "config.json not a ModernBERT config"
    return {k: data[k] for k in _ARCH_KEYS}, str(cfg)


def base_architecture(config: dict) -> tuple[dict | None, str]:
    """The base model's architecture (:data:`REFERENCE_MODEL`'s keys) when planning can read it, and from
    where: ``base_model.build``, or the ``config.json`` of ``base_model.path`` or of the fetched Hub copy
    (``resources/models/{key}``); ``(None, why)`` otherwise."""
    base = config["base_model"]
    build = base.get("build")
    if build:
        arch = {k: build[k] for k in _ARCH_KEYS if k in build}
        arch["num_hidden_layers"] = build.get("num_layers", base["num_layers"])
        return (arch, "base_model.build") if set(arch) == set(_ARCH_KEYS) else (None, "base_model.build incomplete")
    return _arch_from_folder(Path(base["path"]) if base.get("path") else Path("resources/models") / base["key"])


def model_architecture(config: dict, model: str) -> tuple[dict | None, str]:
    """A grid model's architecture and its source: the base's for a variant, the base model and a
    ``random-init`` reference; a reference model's fetched ``config.json`` otherwise (:func:`base_architecture`)."""
    ref = (config.get("reference_models") or {}).get(model)
    if ref is None or ref.get("build") == "random-init":
        return base_architecture(config)
    return _arch_from_folder(Path("resources/models") / model)


def phase_jobs(config: dict) -> list[tuple[str, str, str, int]]:
    """The planned phase jobs ``(variant, phase, objective, tokens)``: phase 1 of every variant that owns
    its phase 1 (a ``phase1_from`` variant shares its owner's), then every variant's decay."""
    variants = list(config["pretraining"]["variants"])
    out = []
    for phase in ("phase1", "decay"):
        for v in variants:
            if phase == "phase1" and phase1_owner(config, v) != v:
                continue
            section = resolve_phase(config, v, phase)
            out.append((v, phase, section["objective"], int(section["tokens"])))
    return out


def _phase_kind(objective: str) -> str:
    return "causal" if get_objective(objective).causal else "masked"


def pretraining_rows(config: dict, rates: dict[str, Rate], arch: dict | None) -> list[CostRow]:
    """One row per (phase, objective, tokens) of the planned phase jobs (:func:`phase_jobs`)."""
    groups: dict[tuple, list[str]] = {}
    for variant, phase, objective, tokens in phase_jobs(config):
        kind = _phase_kind(objective)
        section = resolve_phase(config, variant, phase)
        fraction = get_objective(objective).predicted_fraction(section)
        rate = scaled_rate(rates[kind], kind, arch, int(section["seq_len"]), fraction)
        groups.setdefault((phase, kind, tokens, rate), []).append(f"{variant}/{phase}")
    devices = pretrain_devices(config)
    rows = []
    for (phase, kind, tokens, rate), jobs in groups.items():
        hours = tokens / rate / SECONDS_PER_HOUR
        rows.append(CostRow("pretraining", f"{'phase 1' if phase == 'phase1' else 'decay'} {KIND_LABEL[kind]}",
                            tuple(jobs), len(jobs), tokens * len(jobs), rate, hours * len(jobs), hours / devices))
    return rows


def _prepared_counts(folder: Path) -> dict[str, int] | None:
    """Rows per split of a prepared task (``results/tasks/{task}``: one ``datasets`` folder per split)."""
    if not all((folder / split).is_dir() for split in ASSUMED_EXAMPLES):
        return None
    import pyarrow as pa

    counts = {}
    try:
        for split in ASSUMED_EXAMPLES:
            files = sorted((folder / split).glob("*.arrow"))
            if not files:
                return None
            counts[split] = 0
            for f in files:
                with pa.memory_map(str(f)) as source:
                    counts[split] += sum(batch.num_rows for batch in pa.ipc.open_stream(source))
    except (OSError, pa.ArrowException):
        return None
    return counts


def _jsonl_counts(config: dict, task: str) -> dict[str, int] | None:
    """Lines per split of a task given as JSON-lines files (``{path}/{split}.jsonl``), when all three exist."""
    spec = (config.get("tasks") or {}).get(task) or {}
    if spec.get("format") != "jsonl" or not spec.get("path"):
        return None
    counts = {}
    for split in ASSUMED_EXAMPLES:
        f = Path(spec["path"]) / f"{split}.jsonl"
        try:
            with f.open("rb") as fh:
                counts[split] = sum(1 for line in fh if line.strip())
        except OSError:
            return None
    return counts


def task_examples(config: dict, task: str) -> tuple[dict[str, int], str]:
    """Examples per split (``train``, ``dev``, ``test``) of a task and where the counts come from: the
    prepared task folder, else the task's own JSON-lines files, else :data:`ASSUMED_EXAMPLES` (``assumed``)."""
    prepared = Path(task_dir(task))
    counts = _prepared_counts(prepared)
    if counts is not None:
        return counts, str(prepared)
    counts = _jsonl_counts(config, task)
    if counts is not None:
        return counts, str(config["tasks"][task]["path"])
    return dict(ASSUMED_EXAMPLES), "assumed"


def finetune_rate_key(rates: dict[str, Rate], seq_len: int) -> str:
    """The fine-tuning rate measured nearest ``seq_len`` tokens (ratio of lengths)."""
    keys = [k for k in rates if k.startswith("finetune_")]
    return min(keys, key=lambda k: (abs(math.log(rates[k].seq_len / seq_len)), k))


def _model_limit(config: dict, model: str) -> int | None:
    """A grid model's input limit in tokens when the config knows it: ``reference_models.{model}.max_length``,
    else the base model's ``max_position_embeddings`` for the variants, the base and a ``random-init``."""
    ref = (config.get("reference_models") or {}).get(model)
    if ref is not None and ref.get("max_length"):
        return int(ref["max_length"])
    if ref is not None and ref.get("build") != "random-init":
        return None
    known = known_max_positions(config)
    return known[0] if known else None


@dataclass(frozen=True)
class FinetuneCell:
    """One (model, task) of the grid: one fine-tuning job running ``runs`` runs one after the other."""

    model: str
    task: str
    runs: int
    train_tokens: float  # per run
    eval_tokens: float  # per run (dev after every epoch, test once)
    rate: float  # tokens/s per GPU, training

    @property
    def gpu_hours(self) -> float:
        return self.runs * (self.train_tokens + EVAL_COST * self.eval_tokens) / self.rate / SECONDS_PER_HOUR


def finetune_cells(config: dict, rates: dict[str, Rate], archs: dict[str, dict | None],
                   examples: dict[str, dict[str, int]]) -> list[FinetuneCell]:
    """Every (model, task) of the evaluation grid with its runs (seeds x learning rates) and tokens per run."""
    from clmdetour.evaluation.grid import eval_models, finetune_task_params, task_names, task_seeds

    cells = []
    for task in task_names(config):
        params = finetune_task_params(config, task)
        runs = len(task_seeds(config, task)) * len(params["finetune"]["lr_grid"])
        epochs = float(params["finetune"]["epochs"])
        n = examples[task]
        for model in eval_models(config):
            limit = _model_limit(config, model)
            length = min(int(params["max_length"]), limit) if limit else int(params["max_length"])
            rate = scaled_rate(rates[finetune_rate_key(rates, length)], "finetune", archs[model], length)
            cells.append(FinetuneCell(model, task, runs, n["train"] * epochs * length,
                                      (n["dev"] * math.ceil(epochs) + n["test"]) * length, rate))
    return cells


def finetuning_rows(config: dict, cells: list[FinetuneCell]) -> list[CostRow]:
    """One row per task: its cells summed over models."""
    gpus = max(1, (config.get("cluster") or {}).get("finetune_gpus", 1))
    rows = []
    for task in dict.fromkeys(c.task for c in cells):
        mine = [c for c in cells if c.task == task]
        train = sum(c.runs * c.train_tokens for c in mine)
        train_s = sum(c.runs * c.train_tokens / c.rate for c in mine)
        rows.append(CostRow("fine-tuning", task, tuple(f"{c.model}/{task}" for c in mine), sum(c.runs for c in mine),
                            train, train / train_s if train_s else 0.0, sum(c.gpu_hours for c in mine),
                            max(c.gpu_hours for c in mine) / gpus))
    return rows


def _architectures(config: dict, overrides: dict | None) -> tuple[dict[str, dict | None], list[str]]:
    """The base model's and every grid model's architecture (None: the 150M reference), and the notes
    naming the models whose architecture was assumed."""
    from clmdetour.evaluation.grid import eval_models

    base_key = config["base_model"]["key"]
    variants = set(config["pretraining"]["variants"])
    archs, assumed = {}, {}
    for model in dict.fromkeys([base_key, *eval_models(config)]):
        if model in (overrides or {}):
            archs[model] = overrides[model]
            continue
        archs[model], source = model_architecture(config, model)
        if archs[model] is None and model not in variants:  # a variant is named with its base model
            assumed.setdefault(source, []).append(f"{model} (and the variants)" if model == base_key else model)
    notes = [f"150M base architecture assumed for {', '.join(models)}: {source}" for source, models in assumed.items()]
    return archs, notes


def _examples(config: dict, overrides: dict | None) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Examples per split of every task of the grid, and a note naming the tasks whose counts were assumed."""
    from clmdetour.evaluation.grid import task_names

    counts, assumed = {}, []
    for task in task_names(config):
        if task in (overrides or {}):
            counts[task] = dict(overrides[task])
            continue
        counts[task], source = task_examples(config, task)
        if source == "assumed":
            assumed.append(task)
    each = ", ".join(f"{v:,} {k}" for k, v in ASSUMED_EXAMPLES.items())
    return counts, [f"examples assumed for {', '.join(assumed)} ({each} each: task files not readable at planning)"
                    ] if assumed else []


def _rate_notes(rates: dict[str, Rate]) -> list[str]:
    """A note on the fine-tuning rates that are placeholders, and one on any other unmeasured rate."""
    notes = []
    ft = [k for k, r in rates.items() if not r.measured and k.startswith("finetune_")]
    if ft:
        shown = ", ".join(f"{rates[k].tokens_per_s:,.0f} at {rates[k].seq_len:,} tokens" for k in ft)
        notes.append(f"fine-tuning rate: not yet measured on a GPU, Trainer MLM rate assumed (tokens/s per GPU: "
                     f"{shown}; {rates[ft[0]].source})")
    notes += [f"{k} rate: not measured ({r.source})" for k, r in rates.items() if not r.measured and k not in ft]
    return notes


def project_cost(config: dict, rates: dict | None = None, examples: dict[str, dict[str, int]] | None = None,
                 architectures: dict[str, dict | None] | None = None) -> CostProjection:
    """The GPU-hours of ``all`` under a validated config: every planned phase job and fine-tuning run.

    Args:
        config: the validated config (``clmdetour.config.validate_config``).
        rates: tokens/s per GPU over :data:`MEASURED_RATES` (:func:`resolve_rates`), e.g. a benchmark's
            measured ``{"causal": 250_000.0}``.
        examples: ``{task: {"train": n, "dev": n, "test": n}}`` over what planning reads
            (:func:`task_examples`).
        architectures: ``{model key: architecture or None}`` over what planning reads
            (:func:`model_architecture`; None = the 150M reference); the base model's key sets pretraining's.

    Returns:
        a :class:`CostProjection`: rows in tokens, tokens/s per GPU and GPU-hours, and notes on what was assumed.
    """
    rates = resolve_rates(rates)
    archs, arch_notes = _architectures(config, architectures)
    counts, example_notes = _examples(config, examples)
    rows = pretraining_rows(config, rates, archs[config["base_model"]["key"]])
    rows += finetuning_rows(config, finetune_cells(config, rates, archs, counts))
    cluster = config.get("cluster") or {}
    limits = {"pretraining": cluster.get("pretrain_runtime_min", 2880) / 60,
              "fine-tuning": cluster.get("finetune_runtime_min", 480) / 60}
    return CostProjection(rows, _rate_notes(rates) + arch_notes + example_notes, limits)


def _tokens(n: float) -> str:
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:,.1f}{unit}"
    return f"{n:,.0f}"


def _hours(h: float) -> str:
    return f"{h:,.0f}" if h >= 100 else f"{h:,.1f}" if h >= 1 else f"{h:.2f}"


_HEAD = "{:<24}{:>7}{:>11}{:>14}{:>10}  {}"


def _row_line(row: CostRow, gpus: int, limit_h: float, limit_key: str) -> str:
    longest = f"{_hours(row.job_hours)} h on {gpus} GPU{'s' if gpus > 1 else ''}"
    if row.job_hours > limit_h:
        longest += f", over cluster.{limit_key} ({limit_h * 60:,.0f} min)"
    return _HEAD.format("    " + row.name, f"{row.count:,}", _tokens(row.tokens), f"{row.rate:,.0f}",
                        _hours(row.gpu_hours), longest)


def format_cost(projection: CostProjection, config: dict) -> str:
    """The printed block: a header, one line per row (count, tokens, tokens/s per GPU, GPU-hours, wall hours
    of the row's longest job), the totals, then the notes on what was assumed."""
    cluster = config.get("cluster") or {}
    pre_gpus, ft_gpus = pretrain_devices(config), max(1, cluster.get("finetune_gpus", 1))
    lines = [("Projected GPU-hours of `all` under this config, before submission (jobs already done are not "
              "subtracted; rates: src/clmdetour/pipeline/gpu_rates.json, tokens/s per GPU):"),
             _HEAD.format("  pretraining", "jobs", "tokens", "tokens/s/GPU", "GPU-h", "longest job")]
    for row in projection.rows:
        if row.stage == "pretraining":
            lines.append(_row_line(row, pre_gpus, projection.limits["pretraining"], "pretrain_runtime_min"))
    lines.append(_HEAD.format("  fine-tuning", "runs", "tokens", "tokens/s/GPU", "GPU-h", "longest job"))
    for row in projection.rows:
        if row.stage == "fine-tuning":
            lines.append(_row_line(row, ft_gpus, projection.limits["fine-tuning"], "finetune_runtime_min"))
    total, pre, ft = projection.gpu_hours(), projection.gpu_hours("pretraining"), projection.gpu_hours("fine-tuning")
    lines.append(f"  total: {_hours(total)} GPU-h = pretraining {_hours(pre)} ({projection.count('pretraining')} "
                 f"phase jobs) + fine-tuning {_hours(ft)} ({projection.count('fine-tuning'):,} runs: models x "
                 f"seeds x lr grid points)")
    lines.append("  fine-tuning tokens: train examples x epochs x max_length per run (an upper bound: inputs are "
                 "shorter), plus dev every epoch and test at 1/3 the cost")
    lines += [f"  - {note}" for note in projection.notes]
    return "\n".join(lines)


def planning_cost_message(config: dict) -> str:
    """The block :func:`format_cost` prints at planning, or '' when the config plans no GPU work (the CPU demo)."""
    if not gpu_work_planned(config):
        return ""
    return format_cost(project_cost(config), config)
