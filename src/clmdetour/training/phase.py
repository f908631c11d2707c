"""One pretraining phase (phase 1 CLM/MLM, or the MLM decay) with Composer.

``run_phase`` loads the input model (a plain HF folder), applies the phase's
objective and freeze spec, trains for the phase's token budget with
Composer's Trainer (DecoupledAdamW, token-based schedule, autoresume from
``{checkpoint_root}/{variant}/{phase}/{run_hash}``), then writes the phase
folder: ``model/`` (safetensors + config + tokenizer), ``train_log.jsonl``
and ``run.json``. Outputs are written under temporary names and renamed.

This module holds the orchestration and the run record; the steps of one concern live beside it:
checkpoint files and resume (:mod:`clmdetour.training.checkpoints`), the model readied for its first
step (:mod:`clmdetour.training.model_setup`, with :mod:`clmdetour.training.attention_check` and
:mod:`clmdetour.training.memory`) and the Composer Trainer (:mod:`clmdetour.training.trainer`).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from clmdetour.config import BatchPlan, ConfigError, plan_batch, training_loop_section
from clmdetour.io import atomic_write_json, disk_full, sha256_file, sha256_json, versioned_output_dir, versions
from clmdetour.modeling.attention import AttentionChoice
from clmdetour.modeling.folders import check_model_folder
from clmdetour.modeling.loss import CHUNK_TOKENS, chunked_lm_loss
from clmdetour.objectives import get_objective
from clmdetour.runtime.memory import MemoryPlan
from clmdetour.settings import PhaseSettings
from clmdetour.training.checkpoints import (
    FINAL_OPTIMIZER,
    LIVE_LOG,
    check_checkpoint_dir,
    checkpoint_dir,
    checkpoint_space_error,
    copy_train_log,
    prepare_checkpoint_dir,
    prune_checkpoints,
    restore_optimizer_state,
    safe_loading,
    save_optimizer_by_name,
    trim_live_log,
    weight_shapes,
)
from clmdetour.training.collators import make_collator
from clmdetour.training.data import phase_loader, phase_stream
from clmdetour.training.memory import peak_memory_gib
from clmdetour.training.model_setup import build_model, document_separator, prepare_model
from clmdetour.training.quality import phase_quality_floor
from clmdetour.training.ranks import rank_records
from clmdetour.training.trainer import build_train_log, build_trainer

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[3]


def git_sha() -> str:
    """The repository's HEAD commit, or ``unknown`` outside a git checkout."""
    try:
        return subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def model_hash(model_dir: str | Path) -> str:
    """sha256 over the weights and config files of an HF model folder (identifies the input model)."""
    model_dir = Path(model_dir)
    files = sorted(p for p in model_dir.iterdir() if p.suffix in (".safetensors", ".bin", ".json") and p.is_file())
    if not files:
        raise FileNotFoundError(f"{model_dir}: no model files (expected *.safetensors and config.json)")
    return sha256_json({p.name: sha256_file(p) for p in files})


def run_hash(section: PhaseSettings, input_model_hash: str, data_hash: str, offset_tokens: int) -> str:
    """Key of a phase's checkpoints: its weight-changing params, input model, data and stream offset.

    A changed config never resumes an old run: the hash covers every section key that changes the
    trained weights (:func:`clmdetour.config.training_loop_section`).
    """
    return sha256_json({"section": training_loop_section(section.as_dict()), "input_model": input_model_hash,
                        "data": data_hash, "offset_tokens": offset_tokens})[:16]


@torch.no_grad()
def heldout_loss(model, rows, collator, objective: str, batch_size: int = 8, chunk_tokens: int = CHUNK_TOKENS,
                 document_sep_id: int | None = None) -> float:
    """Mean loss (nats per labelled token) of ``model`` on held-out packed rows.

    MLM batches are masked by a seeded collator, rewound here (``reseed``),
    so start and end of a phase are scored on identical masks. The attention
    masks are the training ones: causal or not by objective, and the document
    mask when ``document_sep_id`` is given (``pretraining.document_mask``).
    """
    from clmdetour.modeling.causal import forward_encoder  # transformers' ModernBERT internals

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    if hasattr(collator, "reseed"):
        collator.reseed()
    try:
        for start in range(0, len(rows), batch_size):
            batch = collator([rows[i] for i in range(start, min(start + batch_size, len(rows)))])
            batch = {k: v.to(device) for k, v in batch.items()}
            hidden = forward_encoder(model, batch["input_ids"], batch["attention_mask"],
                                     causal=get_objective(objective).causal,
                                     document_sep_id=document_sep_id).last_hidden_state
            n = int((batch["labels"] != -100).sum())
            if n:
                loss = chunked_lm_loss(hidden, batch["labels"], lambda h: model.decoder(model.head(h)), chunk_tokens)
                total += float(loss) * n
                count += n
    finally:
        model.train(was_training)
    return total / max(count, 1)


@dataclass(frozen=True)
class HeldOut:
    """The held-out rows a phase is scored on at its start and its end, with their seeded collator."""

    rows: Any
    collator: Any
    objective: str
    chunk_tokens: int
    document_sep_id: int | None

    def loss(self, model) -> float:
        """:func:`heldout_loss` of ``model`` on these rows (nats per labelled token)."""
        return heldout_loss(model, self.rows, self.collator, self.objective, chunk_tokens=self.chunk_tokens,
                            document_sep_id=self.document_sep_id)


def held_out(valid_rows, tokenizer, section: PhaseSettings, document_sep_id: int | None) -> HeldOut:
    """Step: the first ``valid_sequences`` rows of the corpus's ``valid`` split and a collator seeded with
    ``section.seed`` (MLM: the same masks at start and end)."""
    collator = make_collator(section.objective, section.objective_settings, tokenizer, seed=section.seed)
    rows = valid_rows.select(range(min(section.valid_sequences, len(valid_rows))))
    return HeldOut(rows, collator, section.objective, section.loss_chunk_tokens, document_sep_id)


def batch_arithmetic(section: PhaseSettings, world: int) -> BatchPlan:
    """Step: the phase's batch plan over the ``world`` ranks it runs with (:func:`clmdetour.config.plan_batch`,
    the division rule planning checked against ``cluster``; sequences).

    Returns:
        The plan; its micro-batch is None while ``micro_batch_sequences`` is ``auto``
        (:func:`clmdetour.training.memory.plan_memory` chooses it).

    Raises:
        ConfigError: ``global_batch_sequences`` not divisible by the world size, or the per-device
            batch not a multiple of ``micro_batch_sequences``.
    """
    return plan_batch(section.global_batch_sequences, section.micro_batch_sequences, world)


def load_corpus(corpus_dir: str | Path, section: PhaseSettings):
    """Step: the packed train and valid rows of a prepared corpus, its train-token hash and sequence length.

    Returns:
        ``(train rows, valid rows, data hash, seq_len)`` (rows as numpy-formatted ``datasets.Dataset``).

    Raises:
        ConfigError: the corpus's sequences are not ``section.seq_len`` tokens long.
    """
    import datasets

    corpus_dir = Path(corpus_dir)
    train_rows = datasets.load_from_disk(str(corpus_dir / "train")).with_format("numpy")
    valid_rows = datasets.load_from_disk(str(corpus_dir / "valid")).with_format("numpy")
    manifest_path = corpus_dir / "manifest.json"
    data_hash = json.loads(manifest_path.read_text())["hashes"]["train_token_ids"] if manifest_path.exists() else "none"
    seq_len = len(train_rows[0]["input_ids"])
    if seq_len != section.seq_len:
        raise ConfigError(f"corpus.seq_len is {section.seq_len} but {corpus_dir}/train holds sequences of {seq_len}")
    return train_rows, valid_rows, data_hash, seq_len


def valid_is_held_out(corpus_dir: str | Path) -> bool | None:
    """Whether the corpus's validation text is held out (``manifest.json`` ``valid.held_out``); False when
    ``corpus.allow_train_as_valid`` let it fall back to training text; None for a manifest that predates the key."""
    manifest = Path(corpus_dir) / "manifest.json"
    if not manifest.exists():
        return None
    return json.loads(manifest.read_text(encoding="utf-8"))["valid"].get("held_out")


def identify_run(input_model: str, section: PhaseSettings, data_hash: str, offset_tokens: int,
                 checkpoint_root: str, variant: str) -> tuple[str, str]:
    """Step: the input model's hash and the phase's run hash (:func:`run_hash`), and the checkpoint folder
    checked before the model loads (:func:`clmdetour.training.checkpoints.check_checkpoint_dir`).

    Returns:
        ``(input model hash, run hash)``.

    Raises:
        ModelFolderError: the input folder is not a ModernBERT model folder.
        CheckpointPathError: a file where the checkpoint folder (or a folder above it) goes.
    """
    check_model_folder(input_model, model_type="modernbert")
    in_hash = model_hash(input_model)
    rhash = run_hash(section, in_hash, data_hash, offset_tokens)
    check_checkpoint_dir(checkpoint_dir(checkpoint_root, variant, section.phase, rhash))
    return in_hash, rhash


def init_process(section: PhaseSettings) -> tuple[bool, int, bool]:
    """Step: CPU threads (``CLMDETOUR_THREADS``), the process group and the seeds of a phase.

    A rank waits at most ``process_group_timeout_s`` (seconds) in a collective for a dead peer, then fails.

    Returns:
        ``(on_gpu, world size, is rank 0)``.
    """
    from composer.utils import dist, reproducibility

    on_gpu = torch.cuda.is_available()
    if not on_gpu:
        torch.set_num_threads(max(1, int(os.environ.get("CLMDETOUR_THREADS", torch.get_num_threads()))))
    dist.initialize_dist("gpu" if on_gpu else "cpu", timeout=section.process_group_timeout_s)
    reproducibility.seed_all(section.seed)
    return on_gpu, dist.get_world_size(), dist.get_global_rank() == 0


def build_dataloader(train_rows, tokenizer, section: PhaseSettings, offset_tokens: int, allow_repeat: bool, variant: str):
    """Step: the phase's slice of the packed stream and this rank's loader of it.

    Returns:
        ``(stream, Composer DataSpec, collator)``; the DataSpec counts ``input_ids.numel()`` tokens per batch.

    Raises:
        RepetitionError: the phase passes the corpus end and ``allow_repeat`` is false.
    """
    from composer.core import DataSpec
    from composer.utils import dist

    gb = section.global_batch_sequences
    collator = make_collator(section.objective, section.objective_settings, tokenizer)
    stream = phase_stream(train_rows, section.tokens, section.seq_len, gb, offset_tokens, section.seed,
                          allow_repeat, what=f"{variant}/{section.phase}")
    loader = phase_loader(stream, gb, collator, dist.get_world_size(), dist.get_global_rank())
    return stream, DataSpec(loader, get_num_tokens_in_batch=lambda b: int(b["input_ids"].numel())), collator


def start_trainer(*, model, tokenizer, section: PhaseSettings, stream, data_spec, ckpt_dir: Path, rhash: str,
                  variant: str, on_gpu: bool, callbacks: list, batch: BatchPlan, document_sep_id: int | None,
                  rank0: bool, heldout=None):
    """Step: the Trainer (:func:`clmdetour.training.trainer.build_trainer`; its autoresume loads the checkpoint
    under :func:`clmdetour.training.checkpoints.safe_loading`) and, on rank 0, the live log trimmed to the
    step it resumes from (:func:`clmdetour.training.checkpoints.trim_live_log`).

    Returns:
        ``(trainer, precision, TrainLog callback, step resumed from (0 for a fresh run))``.
    """
    live_log = ckpt_dir / LIVE_LOG
    train_log = build_train_log(model, section, live_log, on_gpu)
    with safe_loading():  # Composer's autoresume loads the checkpoint here: weights_only, whatever it asks
        trainer, precision = build_trainer(model=model, tokenizer=tokenizer, section=section, stream=stream,
                                           data_spec=data_spec, ckpt_dir=ckpt_dir, rhash=rhash, variant=variant,
                                           on_gpu=on_gpu, callbacks=[train_log, *callbacks],
                                           micro_batch=batch.micro_batch, document_sep_id=document_sep_id,
                                           heldout=heldout)
    resumed_from_step = int(trainer.state.timestamp.batch.value)
    if rank0:
        dropped = trim_live_log(live_log, resumed_from_step)
        if dropped:
            log.warning("%s: dropped %d line(s) past step %d, which this run trains again", live_log, dropped,
                        resumed_from_step)
    return trainer, precision, train_log, resumed_from_step


def fit(trainer, budget_tokens: int, what: str, ckpt_dir: Path) -> None:
    """Step: train to ``budget_tokens``, resuming from the last checkpoint; a finished run asked again
    (e.g. ``--forcerun``) only has its outputs rewritten.

    Raises:
        CheckpointSpaceError: a checkpoint save filled the disk (the files it cut short are removed;
            :func:`clmdetour.training.checkpoints.checkpoint_space_error`).
    """
    resumed = int(trainer.state.timestamp.batch.value)
    if resumed:
        log.warning("resuming %s from step %d (%s)", what, resumed, ckpt_dir)
    if trainer.state.timestamp.token.value >= budget_tokens:
        log.warning("%s: the checkpoint in %s already holds the whole budget; writing its outputs", what, ckpt_dir)
        return
    try:
        trainer.fit()
    except (OSError, RuntimeError) as e:
        if not disk_full(e):
            raise
        raise checkpoint_space_error(ckpt_dir, what) from e


@dataclass(frozen=True)
class PhaseOutcome:
    """What a phase chose and measured, for its run record (:func:`phase_record`; rank 0, after training).

    Units: ``tokens``, ``real_tokens`` and ``offset_tokens`` in tokens (``tokens`` counts positions, padding
    included; ``real_tokens`` the non-padding tokens of the rows trained on); ``steps`` and
    ``resumed_from_step`` in optimizer steps; losses in nats per labelled token; ``started_at`` and
    ``first_step_s`` in seconds (``time.time()``, the first step's duration).
    """

    variant: str
    section: PhaseSettings
    attention: AttentionChoice
    causality_check_max_diff: float | None
    frozen_parameters: list
    on_gpu: bool
    ranks: list
    precision: str
    seq_len: int
    batch: BatchPlan
    tokens: int
    steps: int
    real_tokens: int
    offset_tokens: int
    data_epochs: float
    resumed_from_step: int
    optimizer_state_loaded_parameters: int
    valid_loss_start: float | None
    valid_sequences: int
    input_model: str
    input_model_hash: str
    data_hash: str
    run_hash: str
    checkpoint_dir: Path
    started_at: float
    resume: dict
    memory: MemoryPlan
    compiled: bool
    first_step_s: float | None
    valid_held_out: bool | None


def phase_record(outcome: PhaseOutcome, trainer=None) -> dict:
    """The run record of a phase before its outputs are written (:func:`write_outputs` completes it):
    ``outcome`` plus the devices, wall time (s), peak memory (GiB), library versions and git commit, and the
    held-out losses the divergence guard measured in ``trainer`` (``valid_loss_history``, [[step, loss]])."""
    from composer.utils import dist

    from clmdetour.training.callbacks import DivergenceGuard

    o, section, batch = outcome, outcome.section, outcome.batch.as_dict()
    world = dist.get_world_size()
    record = {
        "variant": o.variant, "phase": section.phase, "objective": section.objective,
        "attention": dict(o.attention.as_dict(), causal=get_objective(section.objective).causal,
                          causality_check_max_diff=o.causality_check_max_diff, document_mask=section.document_mask),
        "frozen_parameters": o.frozen_parameters, "trainable_parameters": None, "total_parameters": None,
        "device": {"type": "gpu" if o.on_gpu else "cpu", "count": world,
                   "name": torch.cuda.get_device_name() if o.on_gpu else platform.processor() or "cpu"},
        "world_size": world, "nodes": world // dist.get_local_world_size(), "ranks": o.ranks,
        "precision": o.precision, "seq_len": o.seq_len, "global_batch_sequences": batch["global"],
        "micro_batch_sequences": batch["micro"], "per_device_batch_sequences": batch["per_device"],
        "grad_accum": batch["grad_accum"], "tokens_budget": section.tokens, "tokens": o.tokens, "steps": o.steps,
        # positions above; the non-padding tokens of the rows trained on (reporting only: budgets stay in positions)
        "real_tokens": o.real_tokens, "offset_tokens": o.offset_tokens, "data_epochs": round(o.data_epochs, 4),
        "resumed_from_step": o.resumed_from_step,
        "optimizer_state_loaded_parameters": o.optimizer_state_loaded_parameters,
        "valid_loss_start": o.valid_loss_start, "valid_loss_end": None, "valid_sequences": o.valid_sequences,
        "input_model": str(o.input_model), "input_model_hash": o.input_model_hash, "data_hash": o.data_hash,
        "run_hash": o.run_hash, "checkpoint_dir": str(o.checkpoint_dir), "optimizer_state_path": None,
        "wall_time_s": round(time.time() - o.started_at, 2), "peak_memory_gib": peak_memory_gib(),
        "versions": versions(), "git_sha": git_sha(),
        "section": section.as_dict(),
    }
    record["resume"] = o.resume
    record["memory"] = o.memory.as_dict()
    # first_step_s includes compilation when compiled; tokens_per_s in train_log.jsonl excludes the first step
    record["compile"] = {"enabled": o.compiled, "requested": section.compile, "first_step_s": o.first_step_s}
    record["valid_held_out"] = o.valid_held_out  # False: the "held-out" loss is on training text
    record["valid_loss_history"] = DivergenceGuard.history_of(trainer)
    return record


def write_outputs(*, trainer, model, tokenizer, output_dir: str, ckpt_dir: Path, record: dict, loss_end: float,
                  keep_checkpoints: int) -> dict:
    """Step (rank 0): the final model folder, ``train_log.jsonl``, the final optimizer state and ``run.json``.

    ``record`` holds what the earlier steps measured (:func:`phase_record`); this step adds the
    end-of-phase fields, writes every file atomically and prunes the checkpoints to ``keep_checkpoints``.

    Returns:
        The complete run record.

    Raises:
        DiskSpaceError: a write filled its disk (names the path and the bytes free; nothing half-written is left).
    """
    from clmdetour.modeling.freeze import trainable_parameter_count  # transformers' ModernBERT internals

    opt_path, live_log = ckpt_dir / FINAL_OPTIMIZER, ckpt_dir / LIVE_LOG
    save_optimizer_by_name(trainer.state.optimizers[0], model, opt_path)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with versioned_output_dir(out / "model") as tmp:  # a rerun that fails keeps the previous model
        model.to(torch.float32).save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    copy_train_log(live_log, out / "train_log.jsonl")
    record = dict(record, trainable_parameters=trainable_parameter_count(model),
                  total_parameters=sum(p.numel() for p in model.parameters()), valid_loss_end=loss_end,
                  optimizer_state_path=str(opt_path))
    atomic_write_json(out / "run.json", record)
    prune_checkpoints(ckpt_dir, keep_checkpoints)
    return record


def run_phase(*, input_model: str, corpus_dir: str, output_dir: str, section: PhaseSettings | dict, variant: str,
              checkpoint_root: str, offset_tokens: int = 0, optimizer_state: str | None = None,
              allow_repeat: bool = True, extra_callbacks: list | None = None) -> dict:
    """Train one phase and write ``{output_dir}/model``, ``train_log.jsonl`` and ``run.json``.

    Named steps: :func:`init_process`, :func:`load_corpus`, :func:`batch_arithmetic`, :func:`identify_run`,
    :func:`clmdetour.training.model_setup.build_model`, :func:`build_dataloader`,
    :func:`clmdetour.training.checkpoints.prepare_checkpoint_dir`, :func:`held_out`,
    :func:`clmdetour.training.model_setup.prepare_model`, :func:`start_trainer`,
    :func:`clmdetour.training.checkpoints.restore_optimizer_state`, :func:`fit`, :func:`phase_record` and
    :func:`write_outputs`.

    Args:
        input_model: HF folder of the starting ModernBertForMaskedLM (+ tokenizer).
        corpus_dir: prepared corpus folder with ``train/`` and ``valid/`` (datasets on disk).
        output_dir: the phase folder (``results/pretrain/{variant}/{phase}``).
        section: the phase's resolved config (``clmdetour.config.resolve_phase``), as a dict or as
            :class:`clmdetour.settings.PhaseSettings` (a dict is turned into one, which checks its keys).
        variant: variant name (checkpoint path, records).
        checkpoint_root: scratch root for resumable checkpoints.
        offset_tokens: tokens of the stream already consumed (decay: phase 1's tokens).
        optimizer_state: phase 1's saved optimizer state to start from, or None.
        allow_repeat: allow the stream to wrap past the corpus end (else RepetitionError).
        extra_callbacks: more Composer callbacks (e.g. the SLURM time-limit watcher).

    Returns:
        The run record written to ``run.json`` (None on ranks other than 0).

    Raises:
        ConfigError: a freeze spec beyond the model's depth; batch sizes that do not divide.
        CheckpointPathError: a file where the checkpoint folder (or a folder above it) goes.
        CausalityError: the CLM forward pass leaks future tokens.
        RepetitionError: see ``allow_repeat``.
        CheckpointSpaceError: a checkpoint save filled the disk.
    """
    from composer.utils import dist

    t_start = time.time()
    if not isinstance(section, PhaseSettings):
        section = PhaseSettings.from_dict(section, f"{variant} phase section")
    on_gpu, world, rank0 = init_process(section)
    train_rows, valid_rows, data_hash, seq_len = load_corpus(corpus_dir, section)
    batch = batch_arithmetic(section, world)
    in_hash, rhash = identify_run(input_model, section, data_hash, offset_tokens, checkpoint_root, variant)
    model, tokenizer, candidate, frozen = build_model(input_model, section, variant, on_gpu)
    doc_sep = document_separator(section, tokenizer)
    stream, data_spec, collator = build_dataloader(train_rows, tokenizer, section, offset_tokens, allow_repeat, variant)
    ckpt_dir, resume_report = prepare_checkpoint_dir(checkpoint_root, variant, section.phase, rhash,
                                                     max_steps=-(-len(stream) // batch.global_batch),
                                                     shapes=weight_shapes(model.state_dict()))
    valid = held_out(valid_rows, tokenizer, section, doc_sep)
    attn, causal_diff, memory, batch, loss_start, compiled = prepare_model(
        model, section, candidate, stream, collator, on_gpu, doc_sep, batch, variant, valid.loss if rank0 else None)
    trainer, precision, train_log, resumed_from_step = start_trainer(
        model=model, tokenizer=tokenizer, section=section, stream=stream, data_spec=data_spec, ckpt_dir=ckpt_dir,
        rhash=rhash, variant=variant, on_gpu=on_gpu, callbacks=extra_callbacks or [], batch=batch,
        document_sep_id=doc_sep, rank0=rank0, heldout=lambda: valid.loss(model))
    loaded_opt = restore_optimizer_state(trainer, model, optimizer_state)
    fit(trainer, len(stream) * seq_len, f"{variant}/{section.phase}", ckpt_dir)
    ranks, record = rank_records(resumed_from_step), None
    if rank0:
        model.eval()
        loss_end = valid.loss(model)
        floor = phase_quality_floor(loss_end, valid.rows, section, variant)  # a wrecked model stops before any output
        steps = int(trainer.state.timestamp.batch.value)
        outcome = PhaseOutcome(
            variant=variant, section=section, attention=attn, causality_check_max_diff=causal_diff,
            frozen_parameters=frozen, on_gpu=on_gpu, ranks=ranks, precision=precision, seq_len=seq_len, batch=batch,
            tokens=int(trainer.state.timestamp.token.value), steps=steps,
            real_tokens=stream.real_tokens(steps * batch.global_batch), offset_tokens=offset_tokens,
            data_epochs=stream.epochs, resumed_from_step=resumed_from_step,
            optimizer_state_loaded_parameters=loaded_opt, valid_loss_start=loss_start, valid_sequences=len(valid.rows),
            input_model=input_model, input_model_hash=in_hash, data_hash=data_hash, run_hash=rhash,
            checkpoint_dir=ckpt_dir, started_at=t_start, resume=resume_report, memory=memory, compiled=compiled,
            first_step_s=train_log.first_step_s, valid_held_out=valid_is_held_out(corpus_dir))
        record = write_outputs(trainer=trainer, model=model, tokenizer=tokenizer, output_dir=output_dir,
                               ckpt_dir=ckpt_dir, record=dict(phase_record(outcome, trainer), quality_floor=floor),
                               loss_end=loss_end, keep_checkpoints=section.keep_checkpoints)
    dist.barrier()
    return record
