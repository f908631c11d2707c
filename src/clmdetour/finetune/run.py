"""One fine-tuning job: one model on one task, every seed, in one process.

For each seed: seed every RNG (Composer's ``reproducibility.seed_all``), load
the model with a fresh classification head, train with Composer's ``Trainer``
(Composer's DecoupledAdamW as in pretraining, ``tasks.{task}.finetune`` betas, eps and
weight decay (schema defaults (0.9, 0.98), 1e-6, 1e-5), no decay on biases and norms; linear warm-up then linear decay to 0; fp32 on
CPU, bf16 autocast on GPU), score dev after every epoch (and at the end of a
fractional last epoch) and keep the best weights (model selection on dev),
then score test with them. Each seed writes
``seed{seed}.json`` atomically as soon as it ends, so a seed that fails
leaves the others' records; the failed seed's record has ``status: failed``
and no metrics (the table shows it as missing). Tokenisation is done once per
job and shared by the seeds; nothing a seed does depends on the seeds run
before it, so a seed gives the same metrics alone or among others.

Record keys: ``model``, ``task``, ``seed``, ``status``, ``metric`` (the name
the table reports), ``metrics`` (test), ``dev_metric``, ``dev_metrics``,
``best_epoch``, ``dev_history``, ``attention`` (the back-end used and why:
:func:`clmdetour.runtime.attention.settle_attention`), ``hyperparameters``, ``data`` (examples,
model inputs, truncated inputs, and per split the task type's own counts:
:meth:`clmdetour.tasktypes.TaskType.split_counts`), ``versions``, ``device``, ``wall_time_s``, and
``error`` for a failed seed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from clmdetour.finetune.memory import DEFAULT_MEMORY_LIMIT_GIB, encoder_sizes, plan_finetune_micro_batch
from clmdetour.finetune.sweep import choose_lr
from clmdetour.io import atomic_write_json, versions
from clmdetour.modeling.attention import select_attn_implementation
from clmdetour.settings import FinetuneSettings, TaskFinetuneSettings, TaskSettings
from clmdetour.tasks.contract import SPLITS, TaskData, TaskDataError, load_task_data
from clmdetour.tasktypes import Encoded, TokenizerAdditions
from clmdetour.tasktypes.rescoring import prediction_problems, write_predictions

log = logging.getLogger("clmdetour.finetune")


def predict_logits(model, examples: list[dict], collator, batch_size: int, autocast: Callable = nullcontext) -> list[np.ndarray]:
    """The model's outputs for every example, in input order (fp32 numpy), as the task type reads them
    (:meth:`clmdetour.tasktypes.TaskType.example_outputs`; ``collator.task`` is the type).

    Returns:
        One array per example (a token task: ``[L_i, C]``, ``L_i`` its length; a sequence task: ``[C]``).
    """
    import torch

    from clmdetour.finetune.data import LengthGroupedBatchSampler

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list = [None] * len(examples)
    sampler = LengthGroupedBatchSampler([len(e["input_ids"]) for e in examples], batch_size, shuffle=False)
    with torch.no_grad(), autocast():
        for idx in sampler:
            batch = collator([{"input_ids": examples[i]["input_ids"]} for i in idx])
            output = model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device))
            for i, row in zip(idx, collator.task.example_outputs(output, [len(examples[i]["input_ids"]) for i in idx])):
                out[i] = row
    model.train(was_training)
    return out


def _device_and_precision(gpus: int, precision: str) -> tuple[str, str]:
    import torch

    from clmdetour.runtime.precision import effective_precision

    on_gpu = gpus > 0 and torch.cuda.is_available()
    return ("gpu" if on_gpu else "cpu"), effective_precision(precision, on_gpu)


def task_model(model_dir: str, tokenizer, task: TaskData, train_examples: list[dict], settings: FinetuneSettings,
               device: str, precision: str, additions: TokenizerAdditions | None = None):
    """The task type's model on ``model_dir``, wrapped for Composer, with its collator and attention back-end.

    Args:
        additions: what the type added to ``tokenizer`` (:meth:`clmdetour.tasktypes.TaskType.prepare_tokenizer`;
            None: nothing), handed to its :meth:`clmdetour.tasktypes.TaskType.init_head`.

    Returns:
        ``(hf, composer_model, collator, attention)``: the transformers model
        (:func:`clmdetour.finetune.model.load_classifier`, then the type's ``init_head``: e.g. new marker
        rows), its Composer wrapper, the batch collator, and the
        :class:`clmdetour.modeling.attention.AttentionChoice` settled on two training examples
        (:func:`clmdetour.runtime.attention.settle_attention`).
    """
    from clmdetour.finetune.data import PaddingCollator
    from clmdetour.finetune.model import composer_model, load_classifier
    from clmdetour.runtime.attention import settle_attention

    candidate = select_attn_implementation(settings.attn_implementation, on_gpu=device == "gpu", finetuning=True)
    hf = load_classifier(model_dir, task.task_type, task.labels, attn_implementation=candidate)
    task.task_type.init_head(hf, tokenizer, additions or TokenizerAdditions())
    model = composer_model(hf, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    collator = PaddingCollator(pad_id, task.task_type)
    attention = settle_attention(hf, settings.attn_implementation, candidate, train_examples, collator,
                                 device == "gpu", precision, finetuning=True)
    log.info("attention %s (%s); not compiled", attention.implementation, attention.reason)
    return hf, model, collator, attention


def dev_selector(task: TaskData, dev: Encoded, hf, collator, batch_size: int, settings: FinetuneSettings):
    """A Composer callback that scores ``dev`` after every epoch (and at the end of a fractional last
    epoch) and keeps the best epoch's weights (first best on ties): ``history`` (metrics per
    evaluation), ``best`` (the best metrics, ``epoch`` added), ``best_state`` (CPU copy of the weights),
    ``best_predictions`` (the best epoch's dev :class:`clmdetour.tasktypes.Predictions`)."""
    from composer import Callback
    from composer.core.precision import get_precision_context

    class DevSelection(Callback):
        """Score dev after every epoch and keep the best epoch's weights (first best on ties)."""

        def __init__(self):
            self.history, self.best, self.best_state, self.last_batch = [], None, None, -1
            self.best_predictions = None

        def epoch_end(self, state, logger):
            self._evaluate(state)

        def fit_end(self, state, logger):  # a fractional last epoch ends without EPOCH_END
            if int(state.timestamp.batch) != self.last_batch:
                self._evaluate(state)

        def _evaluate(self, state):
            self.last_batch = int(state.timestamp.batch)
            with get_precision_context(state.precision):
                outputs = predict_logits(hf, dev.examples, collator, batch_size)
                predictions = task.task_type.predictions(task.labels, task.metric, dev, outputs, None, settings)
                m = task.task_type.rescore(task.labels, predictions.rows, predictions.fitted)
            self.history.append(m)
            if self.best is None or m[task.metric] > self.best[task.metric]:
                self.best = dict(m, epoch=len(self.history))
                self.best_predictions = predictions
                self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in hf.state_dict().items()}

    return DevSelection()


#: A fine-tuning run diverged when its training loss, averaged over the last tenth of its steps, ends above this
#: multiple of its first step's loss (it rose instead of falling), or when any step's loss is not finite.
FINETUNE_DIVERGENCE_RATIO = 3.0


def loss_trace():
    """A Composer callback that keeps each step's training loss (``losses``, nats; Composer's total over the
    step's micro-batches)."""
    from composer import Callback

    class LossTrace(Callback):
        def __init__(self):
            self.losses: list[float] = []

        def batch_end(self, state, logger):
            loss = (getattr(state, "total_loss_dict", None) or {}).get("loss/train/total", state.loss)
            if isinstance(loss, dict):
                loss = sum(loss.values())
            self.losses.append(float(loss.detach().float().cpu()) if hasattr(loss, "detach") else float(loss))

    return LossTrace()


def train_loss_summary(losses: list[float]) -> dict:
    """The record's ``train_loss``: ``first``, ``last`` (mean of the last tenth of the steps), ``lowest``, ``steps``
    and ``diverged`` (None, or why: a non-finite loss, or the last above :data:`FINETUNE_DIVERGENCE_RATIO` x the
    first). Losses in nats per target (the type's loss)."""
    if not losses:
        return {"first": None, "last": None, "lowest": None, "steps": 0, "diverged": None}
    tail = losses[-max(1, len(losses) // 10):]
    bad = next((i for i, x in enumerate(losses) if not math.isfinite(x)), None)
    last = sum(tail) / len(tail) if bad is None else math.nan
    out = {"first": losses[0], "last": last, "lowest": min((x for x in losses if math.isfinite(x)), default=None),
           "steps": len(losses), "diverged": None}
    if bad is not None:
        out["diverged"] = f"training loss {losses[bad]} at step {bad + 1} (not finite)"
    elif math.isfinite(losses[0]) and last > FINETUNE_DIVERGENCE_RATIO * losses[0]:
        out["diverged"] = (f"training loss rose from {losses[0]:.4g} (first step) to {last:.4g} (last tenth), over "
                           f"{FINETUNE_DIVERGENCE_RATIO:g} x")
    return out


def train_one_seed(seed: int, *, model_dir: str, tokenizer, task: TaskData, data: dict[str, Encoded],
                   finetune: TaskFinetuneSettings, lr: float, settings: FinetuneSettings, device: str, precision: str,
                   additions: TokenizerAdditions | None = None, micro_batch: int | None = None) -> dict:
    """Fine-tune one seed at one learning rate; returns the record's result fields (metrics, dev, epochs).

    Args:
        finetune: the task's ``finetune`` block (:class:`clmdetour.settings.TaskFinetuneSettings`: epochs,
            passes over train, may be fractional; batch_size; warmup_ratio, fraction of all steps;
            weight_decay, decoupled units of Composer's DecoupledAdamW, i.e. the fraction of each weight
            removed per step at peak lr; betas, eps).
        lr: the peak learning rate (a point of ``finetune.lr_grid``).
        settings: the ``evaluation`` keys that change fine-tuning (:class:`clmdetour.settings.FinetuneSettings`).
        additions: what the task type added to ``tokenizer`` (:class:`PreparedTask`), handed to its
            ``init_head`` (:func:`task_model`).
        micro_batch: sequences per forward pass, a divisor of ``finetune.batch_size`` (gradient accumulation;
            :func:`clmdetour.finetune.memory.plan_finetune_micro_batch`); None: the whole batch.

    Raises:
        ValueError: ``micro_batch`` does not divide the batch size.
    """
    from composer import Trainer
    from composer.core.precision import get_precision_context
    from composer.optim import LinearWithWarmupScheduler
    from composer.utils import reproducibility

    from clmdetour.finetune.data import make_dataloader
    from clmdetour.modeling.freeze import optimizer_param_groups
    from clmdetour.runtime.composer_setup import cheap_cpu_model
    from clmdetour.runtime.optim import FusedDecoupledAdamW

    bs = int(finetune.batch_size)
    micro = bs if micro_batch is None else int(micro_batch)
    if micro < 1 or bs % micro:
        raise ValueError(f"micro-batch {micro_batch} does not divide the batch size {bs}")
    reproducibility.seed_all(seed)
    hf, model, collator, attention = task_model(model_dir, tokenizer, task, data["train"].examples, settings, device,
                                                precision, additions)
    train_dl = make_dataloader(data["train"].examples, bs, shuffle=True, seed=seed, collator=collator)
    optimizer = FusedDecoupledAdamW(optimizer_param_groups(hf, float(finetune.weight_decay)), lr=float(lr),
                               betas=tuple(finetune.betas), eps=float(finetune.eps))
    epochs = float(finetune.epochs)
    duration = f"{int(epochs)}ep" if epochs == int(epochs) else f"{max(1, math.ceil(epochs * len(train_dl)))}ba"
    selector = dev_selector(task, data["dev"], hf, collator, 2 * bs, settings)
    trace = loss_trace()
    with cheap_cpu_model():  # Composer's constructor would start a Python process to name the CPU
        trainer = Trainer(
            model=model, train_dataloader=train_dl, max_duration=duration,
            optimizers=optimizer,
            schedulers=LinearWithWarmupScheduler(t_warmup=f"{float(finetune.warmup_ratio)}dur", alpha_f=0.0),
            step_schedulers_every_batch=True, device=device, precision=precision, seed=seed,
            device_train_microbatch_size=micro,
            callbacks=[selector, trace], loggers=[], progress_bar=False, log_to_console=False,
            save_folder=None, autoresume=False, run_name=f"finetune-seed{seed}", python_log_level=None,
        )
    try:
        trainer.fit()
        hf.load_state_dict(selector.best_state)
        with get_precision_context(trainer.state.precision):
            fitted = task.task_type.fitted_on_dev(selector.best)
            outputs = predict_logits(hf, data["test"].examples, collator, 2 * bs)
            test_predictions = task.task_type.predictions(task.labels, task.metric, data["test"], outputs, fitted,
                                                          settings)
            test = task.task_type.rescore(task.labels, test_predictions.rows, test_predictions.fitted)
    finally:
        trainer.close()
    dev = {k: v for k, v in selector.best.items() if k != "epoch"}
    return {"metrics": test, "dev_metric": dev[task.metric], "dev_metrics": dev, "best_epoch": selector.best["epoch"],
            "dev_history": [h[task.metric] for h in selector.history], "attention": attention.as_dict(),
            "train_loss": train_loss_summary(trace.losses),
            "predictions": {"dev": split_predictions(task, "dev", selector.best_predictions),
                            "test": split_predictions(task, "test", test_predictions)}}


def split_predictions(task: TaskData, split: str, predictions) -> dict:
    """One split's :class:`clmdetour.tasktypes.Predictions` as saved: ``{"fitted", "rows"}``, each row led by
    the ``id`` of the task row it predicts (rows are documents, in split order).

    Raises:
        ValueError: the predictions do not have one row per document of the split.
    """
    docs = task.splits[split]
    if len(docs) != len(predictions.rows):
        raise ValueError(f"{task.name} {split}: {len(predictions.rows)} predicted documents for {len(docs)} rows")
    return {"fitted": predictions.fitted, "rows": [{"id": d["id"], **r} for d, r in zip(docs, predictions.rows)]}


@dataclass
class PreparedTask:
    """A task read and tokenised once for a job (shared by its seeds and grid points)."""

    data: TaskData
    tokenizer: object
    encoded: dict[str, Encoded]
    max_length: int  # tokens per model input: min(task max_length, model limit, reference limit)
    model_limit: int  # the model's own token limit
    info: dict  # the record's ``data`` section: examples, model inputs, truncated (+ the type's split_counts), encode_s
    # what the task type added to the tokenizer (TaskType.prepare_tokenizer: a relation task's markers)
    additions: TokenizerAdditions = field(default_factory=TokenizerAdditions)


def prepare_task_inputs(task: str, task_dir: str | Path, task_settings: TaskSettings, model_dir: str | Path,
                        settings: FinetuneSettings, model_max_length: int | None = None) -> PreparedTask:
    """Check the task's settings against its folder, then tokenise every split once.

    The task type prepares the job's tokenizer first (:meth:`clmdetour.tasktypes.TaskType.prepare_tokenizer`:
    e.g. a relation task's entity markers become special tokens), then encodes each split
    (:meth:`clmdetour.tasktypes.TaskType.encode`: inputs of at most ``max_length`` tokens, specials
    included, no token_type_ids, no padding) and checks it (:meth:`clmdetour.tasktypes.TaskType.check_encoded`:
    e.g. a NER split whose gold entities no prediction can reach gets a warning).

    Args:
        task_settings: the task's fine-tuning keys (:class:`clmdetour.settings.TaskSettings`).

    Raises:
        TaskDataError: the folder's type disagrees with ``tasks.{task}.type``, or bad task data.
        InputError: ``max_length`` leaves no room for text.
        ValueError: a token the type adds does not encode to one token (e.g. a marker).
    """
    from transformers import AutoConfig, AutoTokenizer

    from clmdetour.finetune.model import model_token_limit

    data = load_task_data(task_dir, task)
    ttype = data.task_type
    if ttype.name != task_settings.type:
        raise TaskDataError(f"{Path(task_dir) / 'labels.json'}: type {ttype.name!r} but tasks.{task}.type is {task_settings.type!r}")
    data.metric = task_settings.metric or data.metric
    t0 = time.perf_counter()
    from clmdetour.modeling.folders import check_model_folder

    check_model_folder(model_dir)  # any architecture: reference models are BERT, CamemBERT, ModernBERT
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    additions = ttype.prepare_tokenizer(tokenizer, data)  # nothing unless the type adds tokens (labels.json marker_tokens)
    limit = model_token_limit(AutoConfig.from_pretrained(str(model_dir)), tokenizer)
    max_length = min(task_settings.max_length, limit, model_max_length or limit)
    encoded = {s: ttype.encode(data.splits[s], data.labels, tokenizer, max_length, settings, data.name) for s in SPLITS}
    info = {"examples": {s: len(data.splits[s]) for s in SPLITS},
            "model_inputs": {s: len(encoded[s].examples) for s in SPLITS},
            "truncated": {s: encoded[s].truncated for s in SPLITS}}
    counts = {s: ttype.split_counts(encoded[s]) for s in SPLITS}
    for key in counts[SPLITS[0]]:
        info[key] = {s: counts[s][key] for s in SPLITS}
    for s in SPLITS:
        ttype.check_encoded(task, s, encoded[s])
    warn_truncated(task, info, max_length, ttype.truncated_unit)
    if additions.tokens:
        info[additions.record_key] = dict(additions.tokens)
    info["encode_s"] = round(time.perf_counter() - t0, 3)
    return PreparedTask(data, tokenizer, encoded, max_length, limit, info, additions)


def warn_truncated(task: str, info: dict, max_length: int, unit: str) -> bool:
    """One log warning per split whose inputs were cut at ``max_length`` tokens (``info``: the record's
    ``data`` section, ``truncated`` and ``model_inputs`` per split; ``unit``: what ``truncated`` counts,
    the type's ``truncated_unit``), with the share of the split's model inputs; returns whether it warned."""
    warned = False
    for s in SPLITS:
        n, total = info["truncated"][s], info["model_inputs"][s]
        if n:
            log.warning("task %s: %d %s of %s cut at max_length %d tokens (%d model inputs, %.1f %%); raise "
                        "tasks.%s.max_length (within the model's limit) to keep them whole", task, n, unit, s,
                        max_length, total, 100 * n / max(total, 1), task)
            warned = True
    return warned


def hyperparameters_record(task: TaskSettings, prepared: PreparedTask, settings: FinetuneSettings, precision: str) -> dict:
    """The record's ``hyperparameters``: the task's ``finetune`` keys plus what the job resolved
    (token limits, precision, NER context, attention, optimizer, scheduler, model selection)."""
    return dict(task.finetune.as_dict(), max_length=prepared.max_length, task_max_length=task.max_length,
                model_token_limit=prepared.model_limit, precision=precision,
                ner_context_tokens=settings.ner_context_tokens,
                attn_implementation=settings.attn_implementation,
                optimizer="composer DecoupledAdamW semantics (betas, eps, weight_decay above; torch's fused AdamW kernel: training.optim), no decay on biases/norms",
                scheduler="linear warm-up, linear decay to 0", model_selection=f"best dev {prepared.data.metric} over epochs")


#: The fields of a stored (seed, lr) run that the job reads back: :func:`train_one_seed`'s result and ``wall_s``.
RESULT_FIELDS = ("metrics", "dev_metric", "dev_metrics", "best_epoch", "dev_history", "attention", "train_loss",
                 "predictions", "wall_s")
#: Correlation metrics (similarity tasks) lie in [-1, 1] and are NaN when a side is constant; other scores in [0, 1].
_CORRELATIONS = ("spearman", "pearson")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _score_problem(name: str, value, where: str) -> str | None:
    """Why ``value`` is not a score of metric ``name`` (``where`` names the field), or None."""
    low = -1.0 if name in _CORRELATIONS else 0.0
    if not _number(value):
        return f"{where} is {value!r}, not a number"
    if math.isnan(value) and name in _CORRELATIONS:
        return None
    if not (math.isfinite(value) and low <= value <= 1.0):
        return f"{where} is {value!r}, not a finite score in [{low:g}, 1]"
    return None


def stored_run_problem(stored, binding: dict, metric: str) -> str | None:
    """Why a stored (seed, lr) run may not be reused, or None when it may (:class:`FinishedRuns`).

    It must be a JSON object whose binding (``task``, ``model``, ``seed``, ``lr``, ``run_key``,
    ``model_digest``) equals ``binding`` and which holds every field of :data:`RESULT_FIELDS` with its
    type: ``metrics`` and ``dev_metrics`` maps of scores holding ``metric``, ``dev_metric`` equal to
    ``dev_metrics[metric]``, ``dev_history`` a non-empty list of scores, ``best_epoch`` an epoch of it,
    ``attention`` a map, ``wall_s`` finite seconds >= 0 (scores: finite numbers in [0, 1]; correlations
    in [-1, 1] or NaN).
    """
    if not isinstance(stored, dict):
        return f"holds {type(stored).__name__}, not a JSON object"
    for key, want in binding.items():
        if key not in stored:
            return f"no {key!r} binding it to its run (expected {want!r})"
        if stored[key] != want or type(stored[key]) is bool:
            return f"{key} is {stored[key]!r}, this run's is {want!r}"
    missing = [k for k in RESULT_FIELDS if k not in stored]
    if missing:
        return f"missing field(s) {missing}"
    for field_name in ("metrics", "dev_metrics"):
        scores = stored[field_name]
        if not isinstance(scores, dict) or metric not in scores:
            return f"{field_name} is not a map holding {metric!r}"
        bad = next((p for p in (_score_problem(k, v, f"{field_name}.{k}") for k, v in scores.items()) if p), None)
        if bad:
            return bad
    history = stored["dev_history"]
    if not isinstance(history, list) or not history:
        return "dev_history is not a non-empty list"
    bad = next((p for p in (_score_problem(metric, v, "dev_history") for v in [stored["dev_metric"], *history]) if p), None)
    if bad:
        return bad
    if stored["dev_metric"] != stored["dev_metrics"][metric] and not math.isnan(stored["dev_metric"]):
        return f"dev_metric {stored['dev_metric']!r} is not dev_metrics.{metric} {stored['dev_metrics'][metric]!r}"
    epoch = stored["best_epoch"]
    if not (isinstance(epoch, int) and not isinstance(epoch, bool) and 1 <= epoch <= len(history)):
        return f"best_epoch {epoch!r} is not an epoch of dev_history (1..{len(history)})"
    if not isinstance(stored["attention"], dict):
        return "attention is not a map"
    wall = stored["wall_s"]
    if not (_number(wall) and math.isfinite(wall) and wall >= 0):
        return f"wall_s is {wall!r}, not seconds >= 0"
    return None


class FinishedRuns:
    """The finished (seed, learning rate) runs of one fine-tuning job, kept in scratch as they finish.

    A job runs every seed at every grid point and writes its records only at the end; a job killed
    before (``kill -9``, a lost node, a time limit) would lose every finished run. Each run's result is
    written here atomically (``seed{seed}-lr{lr}.json``) as soon as it finishes, in a folder keyed by
    what determines the result (the model's files, the prepared task, the task's fine-tuning keys and
    the job's settings), so a rerun of the same job reuses the finished runs and trains only the rest;
    each run seeds itself (``reproducibility.seed_all(seed)``), so the records come out the same.
    The folder is removed once the job has written its records.

    The scratch folder is not trusted: each file is bound to its run (``task``, ``model``, ``seed``,
    ``lr``, ``run_key``: the folder's hash, ``model_digest``: sha256 of the model folder's file hashes)
    and is reused only when :func:`stored_run_problem` finds nothing wrong; any other file (foreign,
    forged, empty, cut short) is moved aside to ``{name}.rejected`` with a warning naming it and why,
    and the run is trained again.

    Args:
        root: ``{checkpoint_root}/finetune/{model}/{task}`` (scratch; never a declared output).
        key: the hash of the inputs (:func:`finished_runs_key`).
        model, task: the job's config keys; model_digest: :func:`model_folder_digest` of its model folder.
        metric: the task's metric (the name the table reports), which every stored score map must hold.
    """

    def __init__(self, root: str | Path, key: str, *, model: str, task: str, model_digest: str, metric: str,
                 data: TaskData | None = None):
        self.folder = Path(root) / key
        self.binding = {"task": task, "model": model, "run_key": key, "model_digest": model_digest}
        self.metric = metric
        self.data = data  # with it, a stored run's predictions must give its scores and carry the task's gold

    @classmethod
    def for_job(cls, root: str | Path, *, model: str, task: str, model_dir: str | Path, task_dir: str | Path,
                task_settings: TaskSettings, settings: FinetuneSettings, model_max_length: int | None,
                metric: str, data: TaskData | None = None) -> FinishedRuns:
        """The job's store: the model folder's files are hashed once, for both the key and the digest."""
        files = model_folder_files(model_dir)
        key = finished_runs_key(model_dir, task_dir, task_settings, settings, model_max_length, model_files=files)
        return cls(root, key, model=model, task=task, model_digest=model_folder_digest(files), metric=metric,
                   data=data)

    def _path(self, seed: int, lr: float) -> Path:
        return self.folder / f"seed{seed}-lr{lr!r}.json"

    def _binding(self, seed: int, lr: float) -> dict:
        return dict(self.binding, seed=seed, lr=lr)

    def get(self, seed: int, lr: float) -> dict | None:
        """The stored result of ``(seed, lr)`` (the :data:`RESULT_FIELDS`), or None: never stored, or refused
        (:func:`stored_run_problem`; unreadable, not JSON), in which case it is moved aside and trained again."""
        path = self._path(seed, lr)
        if not path.is_file():
            return None
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            problem = f"unreadable ({type(e).__name__}: {str(e)[:200]})"
        else:
            problem = stored_run_problem(stored, self._binding(seed, lr), self.metric)
            if problem is None and self.data is not None:
                problem = self._predictions_problem(stored)
        if problem is None:
            return {k: stored[k] for k in RESULT_FIELDS}
        aside = path.with_name(path.name + ".rejected")
        try:
            os.replace(path, aside)
        except OSError as e:
            aside = f"not moved aside ({e.strerror or e})"
        log.warning("%s: stored fine-tuning run not reused: %s; moved to %s; the run is trained again", path, problem,
                    aside.name if isinstance(aside, Path) else aside)
        return None

    def _predictions_problem(self, stored: dict) -> str | None:
        """Why a stored run's scores are not what its saved predictions give (or their gold not the task's)."""
        if not isinstance(stored["predictions"], dict):
            return "predictions is not a map"
        _, problems = prediction_problems(self.data.task_type, self.data.labels, stored["predictions"],
                                          {"dev": stored["dev_metrics"], "test": stored["metrics"]}, self.data.splits)
        return f"its scores are not what its saved predictions give ({'; '.join(problems[:3])})" if problems else None

    def put(self, seed: int, lr: float, result: dict) -> None:
        """Store the result of ``(seed, lr)`` atomically, with its binding (``result`` is not modified).

        Raises:
            DiskSpaceError: the scratch disk filled up (names the file and the bytes free).
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self._path(seed, lr), dict(result, **self._binding(seed, lr)))

    def clear(self) -> None:
        """Remove the stored runs (the job's records are written) and the folder, unless it holds files set
        aside as ``*.rejected``: those stay for a look."""
        if not self.folder.is_dir():
            return
        for p in self.folder.iterdir():
            if p.name.endswith(".rejected"):
                continue
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.folder.rmdir()


def model_folder_files(model_dir: str | Path) -> dict[str, str]:
    """sha256 of each weight, config and tokenizer file of a model folder (``.safetensors``, ``.bin``,
    ``.json``), by file name."""
    from clmdetour.io import sha256_file

    return {p.name: sha256_file(p) for p in sorted(Path(model_dir).iterdir())
            if p.is_file() and p.suffix in (".safetensors", ".bin", ".json")}


def model_folder_digest(files: dict[str, str]) -> str:
    """sha256 (hex) of a model folder's :func:`model_folder_files`: what a stored run was trained from."""
    from clmdetour.io import sha256_json

    return sha256_json(files)


def finished_runs_key(model_dir: str | Path, task_dir: str | Path, task_settings: TaskSettings, settings: FinetuneSettings,
                      model_max_length: int | None, model_files: dict[str, str] | None = None) -> str:
    """sha256 (16 hex digits) of what a fine-tuning run's result depends on: the model folder's weight,
    config and tokenizer files (``model_files``: :func:`model_folder_files`, computed here when None),
    the prepared task's ``manifest.json`` and ``labels.json``, the task's fine-tuning keys (the rule's
    ``task`` params, :meth:`clmdetour.settings.TaskSettings.as_dict`) and the job's settings."""
    from clmdetour.io import sha256_file, sha256_json

    task_files = [p for p in (Path(task_dir) / "manifest.json", Path(task_dir) / "labels.json") if p.is_file()]
    return sha256_json({"model": model_folder_files(model_dir) if model_files is None else model_files,
                        "task": {p.name: sha256_file(p) for p in task_files}, "task_config": task_settings.as_dict(),
                        "settings": dataclasses.asdict(settings), "model_max_length": model_max_length})[:16]


def sweep_seeds(*, model: str, task: str, model_dir: str | Path, prepared: PreparedTask, task_settings: TaskSettings,
                settings: FinetuneSettings, seeds: list[int], device: str, precision: str,
                finished: FinishedRuns | None = None, micro_batch: int | None = None) -> tuple[dict[int, list[dict]], dict[int, str], dict[int, float]]:
    """Train every seed at every grid learning rate (seeds in the order given, ``task_settings.finetune``'s
    :attr:`clmdetour.settings.TaskFinetuneSettings.lr_points` in order).

    A seed stops at its first failed grid point; the other seeds go on. With ``finished``, a run
    already stored there is read instead of trained, and each new result is stored as it finishes.
    ``micro_batch``: sequences per forward pass (:func:`train_one_seed`).

    Returns:
        ``(results, errors, walls)``: per seed, one :func:`train_one_seed` result per
        grid point finished; the error of each failed seed; wall time (seconds; a reused run counts
        the seconds it took when it ran).
    """
    data = prepared.data
    results: dict[int, list[dict]] = {}
    errors: dict[int, str] = {}
    walls: dict[int, float] = {}
    for seed in seeds:
        results[seed], walls[seed] = [], 0.0
        for lr in task_settings.finetune.lr_points:
            start = time.perf_counter()
            res = finished.get(seed, lr) if finished else None
            if res is not None:
                log.info("%s / %s seed %d lr %g: finished before (%s), reused", model, task, seed, lr, finished.folder)
            else:
                try:
                    res = train_one_seed(seed, model_dir=str(model_dir), tokenizer=prepared.tokenizer, task=data,
                                         data=prepared.encoded, finetune=task_settings.finetune, lr=lr,
                                         settings=settings, device=device, precision=precision,
                                         additions=prepared.additions, micro_batch=micro_batch)
                except Exception as e:  # noqa: BLE001 (one failed seed must not lose the others' records)
                    log.error("%s / %s seed %d lr %g failed:\n%s", model, task, seed, lr, traceback.format_exc())
                    errors[seed] = f"{type(e).__name__} at lr {lr:g}: {e}"
                    walls[seed] += time.perf_counter() - start
                    break
                res = json.loads(json.dumps(res, default=str))  # the values the records hold, stored or not
                res["wall_s"] = time.perf_counter() - start
                if finished:
                    finished.put(seed, lr, res)
            walls[seed] += res.pop("wall_s")
            log.info("%s / %s seed %d lr %g: dev %s %.4f, test %.4f", model, task, seed, lr, data.metric,
                     res["dev_metric"], res["metrics"][data.metric])
            results[seed].append(res)
    return results, errors, walls


def sweep_record(grid: list[float], tolerance: float, seed_results: list[dict], metric: str, choice,
                 seeds_in_mean: list[int]) -> dict:
    """A seed record's ``lr_sweep``: the grid, this seed's dev and test score at each point and,
    when a choice was made (:func:`choose_lr`), the mean dev curve and the chosen point."""
    sweep = {"grid": grid, "tie_tolerance": tolerance,
             "selection": "mean dev score over the job's seeds; ties within tie_tolerance go toward the grid's middle",
             "seed_dev": [r["dev_metric"] for r in seed_results],
             "seed_test": [r["metrics"][metric] for r in seed_results]}
    if choice is not None:
        sweep.update(dev_mean=choice.dev_mean, seeds_in_mean=seeds_in_mean, chosen_lr=choice.lr, chosen_index=choice.index,
                     ties=[grid[i] for i in choice.ties], flat=choice.flat)
    return sweep


def job_lr_choice(model: str, task: str, grid: list[float], results: dict[int, list[dict]], errors: dict[int, str],
                  tolerance: float):
    """The job's learning-rate choice (:func:`choose_lr` on the mean dev score of the seeds that finished the
    sweep: ``results`` and ``errors`` of :func:`sweep_seeds`), logged. A diverged grid point
    (``train_loss.diverged``) is left out of the choice (its dev score counts as -inf, with a line); a seed whose
    every point diverged is left out (its record says ``diverged``).

    Returns:
        ``(ok, choice)``: ``{seed: dev score at each grid point}`` of those seeds, and the
        :class:`clmdetour.finetune.sweep.SweepChoice` (None when no seed finished).
    """
    ok = {}
    for s, rs in results.items():
        if s in errors:
            continue
        for g, r in zip(grid, rs):
            if diverged(r):
                log.warning("%s / %s seed %d lr %g diverged (%s): left out of the learning-rate choice", model, task,
                            s, g, r["train_loss"]["diverged"])
        if rs and all(diverged(r) for r in rs):
            continue
        ok[s] = [-math.inf if diverged(r) else r["dev_metric"] for r in rs]
    choice = choose_lr(grid, ok, tolerance) if ok else None
    if choice is not None:
        log.info("%s / %s: lr %g chosen (mean dev over %d seeds: %s; ties %s%s)", model, task, choice.lr, len(ok),
                 ", ".join(f"{g:g}: {m:.4f}" for g, m in zip(grid, choice.dev_mean)), [grid[i] for i in choice.ties],
                 "; flat curve" if choice.flat else "")
    return ok, choice


def diverged(result: dict) -> bool:
    """Whether a (seed, lr) run's training loss diverged (:func:`train_loss_summary`)."""
    return bool((result.get("train_loss") or {}).get("diverged"))


def run_task(*, model: str, task: str, model_dir: str | Path, task_dir: str | Path, task_config: TaskSettings | dict,
             settings: FinetuneSettings | dict, outputs: dict[int, str | Path], gpus: int = 0, threads: int | None = None,
             model_max_length: int | None = None, scratch_dir: str | Path | None = None,
             memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> list[dict]:
    """Fine-tune ``model`` on ``task`` for every seed and write one record per seed.

    Steps: :func:`prepare_task_inputs` (once), :func:`sweep_seeds` (every seed x grid
    point), :func:`job_lr_choice` (:func:`choose_lr` on the mean dev score), then one record per seed at the
    chosen learning rate.

    Args:
        model, task: the config keys (recorded).
        model_dir: HF model folder; task_dir: ``results/tasks/{task}``.
        task_config: the task's fine-tuning keys (the rule's ``task`` params,
            :func:`clmdetour.evaluation.grid.finetune_task_params`: ``type``, ``metric``, ``max_length``,
            ``seeds``, ``finetune``), as a dict (checked and turned into a
            :class:`clmdetour.settings.TaskSettings`) or as one.
        settings: the ``evaluation`` keys that change fine-tuning (``first_seed``, ``precision``, ...;
            :func:`clmdetour.evaluation.grid.finetune_settings`), as a dict (checked and turned into a
            :class:`clmdetour.settings.FinetuneSettings`) or as one.
        outputs: ``{seed: path of its JSON record}``; seeds run in increasing order.
        gpus: 0 = CPU; threads: torch CPU threads (None = torch's default).
        model_max_length: a reference model's declared limit (tokens), if any.
        scratch_dir: where each finished (seed, lr) run is kept until the records are written
            (:class:`FinishedRuns`; the rule passes ``{checkpoint_root}/finetune/{model}/{task}``), so a
            killed job's rerun trains only what had not finished; None keeps nothing.
        memory_limit_gib: GiB per device a step is planned under (``pretraining.memory_limit_gib``; the
            micro-batch, :func:`clmdetour.finetune.memory.plan_finetune_micro_batch`, recorded in
            ``hyperparameters.memory``; it splits a batch, never changes it).

    Returns:
        The records written (failed seeds included, with ``status: failed``).

    Raises:
        ConfigError: a key of ``task_config`` or ``settings`` missing or unknown, a ``max_length`` that is
            not a positive integer, or a learning-rate grid that is empty or not strictly increasing
            (naming the key; nothing is written then).
        TaskDataError, ValueError: before any seed runs, when the task data or
            its config do not agree (nothing is written then).
        clmdetour.runtime.driver.DriverError: ``gpus`` > 0 and the NVIDIA driver cannot run the installed torch.
    """
    import torch

    check_gpu_driver(gpus, f"fine-tuning {model} on {task} on {gpus} GPU(s)")
    if threads:
        torch.set_num_threads(threads)
    task_settings = (task_config if isinstance(task_config, TaskSettings)
                     else TaskSettings.from_dict(task_config, f"tasks.{task}"))  # ConfigError naming the key
    if not isinstance(settings, FinetuneSettings):
        settings = FinetuneSettings.from_dict(settings, "evaluation (the fine-tune job's settings)")
    prepared = prepare_task_inputs(task, task_dir, task_settings, model_dir, settings, model_max_length)
    data = prepared.data
    device, precision = _device_and_precision(gpus, settings.precision)
    hyper = hyperparameters_record(task_settings, prepared, settings, precision)
    memory = job_memory_plan(model_dir, prepared, task_settings, memory_limit_gib, precision)
    hyper["memory"] = memory.as_dict()
    revision = Path(model_dir) / "revision.txt"
    grid = task_settings.finetune.lr_points
    tolerance = settings.tie_tolerance
    finished = (FinishedRuns.for_job(scratch_dir, model=model, task=task, model_dir=model_dir, task_dir=task_dir,
                                     task_settings=task_settings, settings=settings, model_max_length=model_max_length,
                                     metric=data.metric, data=data) if scratch_dir else None)
    results, errors, walls = sweep_seeds(model=model, task=task, model_dir=model_dir, prepared=prepared,
                                         task_settings=task_settings, settings=settings, seeds=sorted(outputs),
                                         device=device, precision=precision, finished=finished,
                                         micro_batch=memory.micro_batch_sequences)
    ok, choice = job_lr_choice(model, task, grid, results, errors, tolerance)
    base = {"data": prepared.info, "versions": versions(), "device": device,
            "model_revision": revision.read_text().strip() if revision.exists() else None}
    records = []
    for seed, out in sorted(outputs.items()):
        chosen = results[seed][choice.index] if seed not in errors and seed in ok and choice else None
        record = seed_record(model, task, seed, data, dict(hyper, lr=choice.lr if choice else None), base,
                             sweep_record(grid, tolerance, results[seed], data.metric, choice, sorted(ok)),
                             None if chosen is None or diverged(chosen) else chosen, seed_error(seed, errors, results))
        records.append(write_seed_record(out, dict(record, wall_time_s=round(walls[seed], 3)), data))
    if finished:
        finished.clear()
    return records


def check_gpu_driver(gpus: int, where: str) -> None:
    """Before any work of a GPU job: the NVIDIA driver against the installed torch build
    (:func:`clmdetour.runtime.driver.check_driver`; a driver too old for the build would leave the job on the CPU).

    Raises:
        clmdetour.runtime.driver.DriverError: one line naming both and the build to install.
    """
    if gpus > 0:
        from clmdetour.runtime.driver import check_driver

        warning = check_driver(where)
        if warning:
            log.warning(warning)


def job_memory_plan(model_dir, prepared: PreparedTask, task_settings: TaskSettings, limit_gib: float, precision: str):
    """The job's micro-batch plan (:func:`clmdetour.finetune.memory.plan_finetune_micro_batch`) at its resolved
    ``max_length`` and the task's batch size; bf16/fp16 activations under an ``amp_`` precision."""
    return plan_finetune_micro_batch(encoder_sizes(model_dir), prepared.max_length,
                                     int(task_settings.finetune.batch_size), limit_gib,
                                     2 if precision.startswith("amp_") else 4)


def seed_error(seed: int, errors: dict[int, str], results: dict[int, list[dict]]) -> str:
    """Why a seed has no score: its error, every grid point diverged, or no seed finishing the sweep."""
    if seed in errors:
        return errors[seed]
    rs = results.get(seed) or []
    if rs and all(diverged(r) for r in rs):
        return "diverged at every learning rate of the grid: " + "; ".join(r["train_loss"]["diverged"] for r in rs)
    return "no seed finished the sweep"


def seed_record(model: str, task: str, seed: int, data: TaskData, hyper: dict, base: dict, lr_sweep: dict,
                result: dict | None, error: str) -> dict:
    """One seed's record: the job's fields (``base``: data, versions, device, model revision), its
    ``hyperparameters`` and ``lr_sweep``, then the chosen run's ``result`` (``status: ok``) or, when None,
    ``status: failed`` with ``error``."""
    record = {"model": model, "task": task, "seed": seed, "metric": data.metric, "task_type": data.task_type.name,
              "hyperparameters": hyper, **base, "lr_sweep": lr_sweep}
    if result is None:
        status = "diverged" if error.startswith("diverged") else "failed"
        record.update(status=status, metrics=None, dev_metric=None, error=error)
    else:
        record.update(result)
        record["status"] = "ok"
        log.info("%s / %s seed %d: test %s %.4f (dev %.4f, epoch %d, lr %g)", model, task, seed, data.metric,
                 record["metrics"][data.metric], record["dev_metric"], record["best_epoch"], hyper["lr"])
    return record


def write_seed_record(out: str | Path, record: dict, data: TaskData) -> dict:
    """Write a seed's record, after its predictions beside it (:func:`clmdetour.tasktypes.rescoring.write_predictions`;
    the record keeps their file name and sha256 in ``predictions``), each atomically; returns the record written."""
    saved = record.pop("predictions", None)
    if saved is not None:
        header = {k: record[k] for k in ("model", "task", "seed", "task_type", "metric")}
        record["predictions"] = write_predictions(out, dict(header, labels=list(data.labels)), saved)
    atomic_write_json(out, record)
    return record


def exit_status(records: list[dict]) -> int:
    """Exit status of a fine-tuning job (rule ``finetune``): 0 when at least one seed succeeded or diverged
    (a diverged seed is a result: ``status: diverged``, named in the table's notes), 1 when every seed failed
    (an error). Logs the failed and the diverged seeds."""
    failed = [r["seed"] for r in records if r["status"] == "failed"]
    gone = [r["seed"] for r in records if r["status"] == "diverged"]
    if failed:
        log.warning("seeds %s failed; their records say status=failed and the table shows them as missing", failed)
    if gone:
        log.warning("seeds %s diverged at every learning rate; their records say status=diverged", gone)
    return 1 if failed and len(failed) == len(records) else 0
