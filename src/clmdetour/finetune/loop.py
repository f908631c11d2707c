"""The training loop of one fine-tuning run: one seed at one learning rate.

For a seed: seed every RNG (Composer's ``reproducibility.seed_all``), load the model with a fresh
classification head (:func:`task_model`), train with Composer's ``Trainer`` (Composer's DecoupledAdamW as in
pretraining, the task's ``finetune`` betas, eps and weight decay (schema defaults (0.9, 0.98), 1e-6, 1e-5), no
decay on biases and norms; linear warm-up then linear decay to 0; fp32 on CPU, bf16 autocast on GPU), score dev
after every epoch (and at the end of a fractional last epoch: :func:`dev_selector`) and keep the best weights
(model selection on dev), then score test with them. The training loss of every step is kept
(:func:`loss_trace`) and summarised (:func:`train_loss_summary`: a diverged run says so).

The job around it (every seed x every grid point, the learning-rate choice, the records) is
:mod:`clmdetour.finetune.run`; what it trains on is :mod:`clmdetour.finetune.inputs`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from contextlib import nullcontext

import numpy as np

from clmdetour.modeling.attention import select_attn_implementation
from clmdetour.settings import FinetuneSettings, TaskFinetuneSettings
from clmdetour.tasks.contract import TaskData
from clmdetour.tasktypes import Encoded, TokenizerAdditions

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


def device_and_precision(gpus: int, precision: str) -> tuple[str, str]:
    """``("gpu" | "cpu", Composer precision)`` of a job with ``gpus`` GPUs: the GPU only when torch sees one;
    ``precision`` as :func:`clmdetour.runtime.precision.effective_precision` resolves it there."""
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
        additions: what the task type added to ``tokenizer`` (:class:`clmdetour.finetune.inputs.PreparedTask`), handed to its
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

    bs = finetune.batch_size
    micro = bs if micro_batch is None else micro_batch
    if micro < 1 or bs % micro:
        raise ValueError(f"micro-batch {micro_batch} does not divide the batch size {bs}")
    reproducibility.seed_all(seed)
    hf, model, collator, attention = task_model(model_dir, tokenizer, task, data["train"].examples, settings, device,
                                                precision, additions)
    train_dl = make_dataloader(data["train"].examples, bs, shuffle=True, seed=seed, collator=collator)
    optimizer = FusedDecoupledAdamW(optimizer_param_groups(hf, finetune.weight_decay), lr=lr,
                                    betas=finetune.betas, eps=finetune.eps)
    epochs = finetune.epochs
    duration = f"{int(epochs)}ep" if epochs == int(epochs) else f"{max(1, math.ceil(epochs * len(train_dl)))}ba"
    selector = dev_selector(task, data["dev"], hf, collator, 2 * bs, settings)
    trace = loss_trace()
    with cheap_cpu_model():  # Composer's constructor would start a Python process to name the CPU
        trainer = Trainer(
            model=model, train_dataloader=train_dl, max_duration=duration,
            optimizers=optimizer,
            schedulers=LinearWithWarmupScheduler(t_warmup=f"{finetune.warmup_ratio!r}dur", alpha_f=0.0),
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
