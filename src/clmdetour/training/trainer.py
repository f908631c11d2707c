"""The Composer ``Trainer`` of a pretraining phase: optimizer, schedule, loggers, callbacks and checkpoints.

:func:`build_trainer` gives Composer the phase's token budget as ``max_duration``, Composer's
``DecoupledAdamW`` (:func:`build_optimizer`), the warm-up and decay schedule
(:func:`clmdetour.training.schedulers.make_scheduler`), the loggers ``pretraining.loggers`` turns on
and checkpoints with autoresume named as :mod:`clmdetour.training.checkpoints` expects
(:data:`clmdetour.training.checkpoints.SAVE_FILENAME`, run name = the run hash).
"""

from __future__ import annotations

from pathlib import Path

from clmdetour.runtime.composer_setup import cheap_cpu_model
from clmdetour.runtime.precision import effective_precision
from clmdetour.settings import PhaseSettings
from clmdetour.training.checkpoints import SAVE_FILENAME
from clmdetour.training.flops import model_flops_per_token, peak_flops


def build_optimizer(model, section: PhaseSettings):
    """Step: Composer's ``DecoupledAdamW`` over :func:`clmdetour.modeling.freeze.optimizer_param_groups`, its
    update done by torch's fused AdamW kernel (:class:`clmdetour.runtime.optim.FusedDecoupledAdamW`: the same
    semantics, state and checkpoints)."""
    from clmdetour.modeling.freeze import optimizer_param_groups  # transformers' ModernBERT internals
    from clmdetour.runtime.optim import FusedDecoupledAdamW  # Composer

    opt = section.optimizer
    return FusedDecoupledAdamW(optimizer_param_groups(model, opt.weight_decay), lr=section.lr, betas=tuple(opt.betas),
                          eps=opt.eps, weight_decay=opt.weight_decay)


def build_loggers(section: PhaseSettings, ckpt_dir: Path, variant: str) -> list:
    """Step: the Composer loggers that ``pretraining.loggers`` turns on (TensorBoard, MLflow, W&B)."""
    from composer.loggers import MLFlowLogger, TensorboardLogger, WandBLogger

    phase, lg, loggers = section.phase, section.loggers, []
    if lg.tensorboard:
        loggers.append(TensorboardLogger(log_dir=str(ckpt_dir / "tensorboard")))
    if lg.mlflow:
        loggers.append(MLFlowLogger(experiment_name=f"clmdetour-{variant}", run_name=f"{variant}-{phase}"))
    if lg.wandb:
        loggers.append(WandBLogger(project=lg.wandb_project or "clmdetour", name=f"{variant}-{phase}"))
    return loggers


def build_train_log(model, section: PhaseSettings, live_log: Path, on_gpu: bool):
    """Step: the :class:`clmdetour.training.callbacks.TrainLog` callback (MFU on GPU: the labelled fraction of
    positions is the objective's, :meth:`clmdetour.objectives.ObjectiveSettings.labelled_fraction`: every token
    under CLM, ``masking_rate`` of them under MLM)."""
    from clmdetour.training.callbacks import TrainLog  # Composer

    predicted = section.objective_settings.labelled_fraction()
    return TrainLog(str(live_log), section.log_interval_steps,
                    flops_per_token=model_flops_per_token(model.config, section.seq_len, predicted) if on_gpu else None,
                    peak_flops=peak_flops() if on_gpu else None, total_tokens=section.tokens)


def build_trainer(*, model, tokenizer, section: PhaseSettings, stream, data_spec, ckpt_dir: Path, rhash: str, variant: str,
                  on_gpu: bool, callbacks: list, micro_batch: int, document_sep_id: int | None = None, heldout=None):
    """Step: the Composer ``Trainer`` of a phase (schedule, checkpoints with autoresume, loggers).

    Composer's autoresume loads ``latest-rank0.pt`` of ``ckpt_dir`` here: call it under
    :func:`clmdetour.training.checkpoints.safe_loading`. The callbacks run after
    :class:`clmdetour.training.callbacks.StopOnNonFiniteLoss` and, with ``section.divergence``,
    :class:`clmdetour.training.callbacks.DivergenceGuard` (on ``heldout``: a callable giving the held-out loss),
    which stop a diverged phase.

    Returns:
        ``(trainer, precision)``; the precision is fp32 on CPU.
    """
    from composer import Trainer

    from clmdetour.training.callbacks import DivergenceGuard, StopOnNonFiniteLoss  # Composer
    from clmdetour.training.composer_model import PretrainingModel  # Composer
    from clmdetour.training.schedulers import make_scheduler  # Composer

    seq_len = section.seq_len
    precision = effective_precision(section.precision, on_gpu)
    from clmdetour.training.model_setup import resolve_compile

    what = f"{variant}/{section.phase}"
    guards = [StopOnNonFiniteLoss(what, section.phase, variant, str(ckpt_dir))]
    if section.divergence is not None:
        guards.append(DivergenceGuard(what, section.phase, variant, str(ckpt_dir), heldout, section.divergence,
                                      total_steps=len(stream) // section.global_batch_sequences))
    composer_model = PretrainingModel(model, tokenizer, section.objective, section.loss_chunk_tokens,
                                      document_sep_id=document_sep_id, compile_loss=resolve_compile(section, on_gpu))
    with cheap_cpu_model():  # Composer's constructor would start a Python process to name the CPU
        trainer = Trainer(
            model=composer_model, train_dataloader=data_spec, max_duration=f"{len(stream) * seq_len}tok",
            optimizers=build_optimizer(model, section), schedulers=[make_scheduler(section)],
            step_schedulers_every_batch=True, device="gpu" if on_gpu else "cpu", precision=precision,
            device_train_microbatch_size=micro_batch,
            save_folder=str(ckpt_dir), save_filename=SAVE_FILENAME,
            save_interval=section.checkpoint_interval, save_num_checkpoints_to_keep=section.keep_checkpoints,
            save_overwrite=False, autoresume=True, run_name=rhash, seed=section.seed,
            loggers=build_loggers(section, ckpt_dir, variant), callbacks=[*guards, *callbacks],
            progress_bar=section.progress_bar, log_to_console=not section.progress_bar,
            console_log_interval=f"{section.log_interval_steps}ba", python_log_level=None,
        )
    return trainer, precision
