"""One pretraining phase (phase 1 CLM/MLM, or the MLM decay) with Composer.

``run_phase`` loads the input model (a plain HF folder), applies the phase's
objective and freeze spec, trains for the phase's token budget with
Composer's Trainer (DecoupledAdamW, token-based schedule, autoresume from
``{checkpoint_root}/{variant}/{phase}/{run_hash}``), then writes the phase
folder: ``model/`` (safetensors + config + tokenizer), ``train_log.jsonl``
and ``run.json``. Outputs are written under temporary names and renamed.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

import torch

from clmdetour.config import training_loop_section
from clmdetour.errors import ExpectedError
from clmdetour.io import (
    atomic_write_json,
    atomic_write_text,
    sha256_file,
    sha256_json,
    versioned_output_dir,
    versions,
)
from clmdetour.modeling.attention import select_attn_implementation
from clmdetour.settings import PhaseSettings
from clmdetour.training.checkpoints import (
    RunBinding,
    check_checkpoint_dir,
    drop_unfinished_checkpoints,
    load_optimizer_by_name,
    prune_checkpoints,
    repair_resume_point,
    safe_loading,
    save_optimizer_by_name,
    set_aside_bad_link,
)
from clmdetour.training.memory import peak_memory_gib
from clmdetour.training.objectives import get_objective

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
def heldout_loss(model, rows, collator, objective: str, batch_size: int = 8, chunk_tokens: int = 2048,
                 document_sep_id: int | None = None) -> float:
    """Mean loss (nats per labelled token) of ``model`` on held-out packed rows.

    MLM batches are masked by a seeded collator, rewound here (``reseed``),
    so start and end of a phase are scored on identical masks. The attention
    masks are the training ones: causal or not by objective, and the document
    mask when ``document_sep_id`` is given (``pretraining.document_mask``).
    """
    from clmdetour.modeling.causal import forward_encoder
    from clmdetour.modeling.loss import chunked_lm_loss

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


def batch_arithmetic(section: PhaseSettings, world: int) -> dict:
    """Step: the per-device batch and gradient accumulation of a phase (sequences).

    Returns:
        ``{"global", "micro", "per_device", "grad_accum"}``; ``micro`` and ``grad_accum`` are None
        while ``micro_batch_sequences`` is ``auto`` (:func:`plan_memory` fills them).

    Raises:
        ConfigError: ``global_batch_sequences`` not divisible by the world size, or the per-device
            batch not a multiple of ``micro_batch_sequences``.
    """
    from clmdetour.config import ConfigError

    gb, mb = section.global_batch_sequences, section.micro_batch_sequences
    if gb % world:
        raise ConfigError(f"global_batch_sequences={gb} is not divisible by the world size {world}")
    per_device = gb // world
    if mb == "auto":
        return {"global": gb, "micro": None, "per_device": per_device, "grad_accum": None}
    if per_device % mb:
        raise ConfigError(f"per-device batch {per_device} (= {gb} / {world} devices) is not a multiple of "
                          f"micro_batch_sequences={mb}")
    return {"global": gb, "micro": mb, "per_device": per_device, "grad_accum": per_device // mb}


def load_corpus(corpus_dir: str | Path, section: PhaseSettings):
    """Step: the packed train and valid rows of a prepared corpus, its train-token hash and sequence length.

    Returns:
        ``(train rows, valid rows, data hash, seq_len)`` (rows as numpy-formatted ``datasets.Dataset``).

    Raises:
        ConfigError: the corpus's sequences are not ``section.seq_len`` tokens long.
    """
    import datasets

    from clmdetour.config import ConfigError

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


def build_model(input_model: str, section: PhaseSettings, variant: str, on_gpu: bool):
    """Step: the starting ``ModernBertForMaskedLM`` (fp32 weights) with the phase's freeze applied.

    Returns:
        ``(model, tokenizer, candidate attention implementation, frozen parameter names)``; the
        candidate is checked on the first batch by :func:`settle_attention`.

    Raises:
        ConfigError: a freeze spec beyond the model's depth, ``seq_len`` above the model's
            ``max_position_embeddings`` (tokens; checked before any step), or a tokenizer without a
            mask token (the decay is MLM).
        ModelFolderError: the input folder is not a ModernBERT model folder with its tokenizer.
    """
    from transformers import AutoTokenizer, ModernBertForMaskedLM

    from clmdetour.config import ConfigError, check_context_length
    from clmdetour.modeling.folders import check_model_folder
    from clmdetour.modeling.freeze import apply_freeze

    check_model_folder(input_model, model_type="modernbert")
    attn = select_attn_implementation(section.attn_implementation, on_gpu)
    tokenizer = AutoTokenizer.from_pretrained(input_model)
    if tokenizer.mask_token_id is None:  # every variant's decay is MLM: refuse before phase 1 trains
        raise ConfigError(f"{input_model}: the tokenizer has no mask token; the MLM decay (and the MLM baseline) "
                          "need one: add it to the tokenizer or start from another model")
    model = ModernBertForMaskedLM.from_pretrained(input_model, attn_implementation=attn, dtype=torch.float32)
    check_context_length(section.seq_len, model.config.max_position_embeddings, f"the input model {input_model}")
    frozen = apply_freeze(model, section.freeze, f"pretraining.variants.{variant}.{section.phase}.freeze")
    return model, tokenizer, attn, frozen


def document_separator(section: PhaseSettings, tokenizer) -> int | None:
    """The separator id that bounds documents when ``pretraining.document_mask`` is on, else None.

    Raises:
        ConfigError: the mask is on and the tokenizer has no ``sep_token_id``.
    """
    from clmdetour.config import ConfigError

    if not section.document_mask:
        return None
    if tokenizer.sep_token_id is None:
        raise ConfigError("pretraining.document_mask: the tokenizer has no sep_token_id to find document boundaries")
    return int(tokenizer.sep_token_id)


def _autocast(on_gpu: bool, precision: str):
    import contextlib

    if on_gpu and precision in ("amp_bf16", "amp_fp16"):
        return torch.autocast("cuda", dtype=torch.bfloat16 if precision == "amp_bf16" else torch.float16)
    return contextlib.nullcontext()


def settle_attention(model, section: PhaseSettings, candidate: str, stream, collator, on_gpu: bool,
                     document_sep_id: int | None):
    """Step: check the candidate back-end on two rows of the first batch and keep it, or fall back to sdpa.

    The check (:func:`clmdetour.modeling.causal.attention_self_check`): loss parity with sdpa within
    :data:`clmdetour.modeling.attention.PARITY_TOLERANCE_NATS` under the phase's precision and, in a
    causal phase, :func:`clmdetour.modeling.causal.check_causality` under the candidate. sdpa itself
    is not checked against itself.

    Returns:
        The :class:`clmdetour.modeling.attention.AttentionChoice` (the model is set to its implementation).
    """
    from clmdetour.modeling.attention import choose_attn_implementation, flash_attn_importable, needs_self_check
    from clmdetour.modeling.causal import attention_self_check, check_causality, forward_encoder, set_attention
    from clmdetour.modeling.loss import chunked_lm_loss

    failure = None
    causal = get_objective(section.objective).causal
    if needs_self_check(candidate):
        probe = collator([stream[i] for i in range(min(2, len(stream)))])
        probe = {k: v.to(model.device) for k, v in probe.items()}

        def loss_of(m):
            with _autocast(on_gpu, section.precision):
                hidden = forward_encoder(m, probe["input_ids"], probe["attention_mask"], causal=causal,
                                         document_sep_id=document_sep_id).last_hidden_state
                return chunked_lm_loss(hidden, probe["labels"], lambda h: m.decoder(m.head(h)),
                                       section.clm_loss_chunk_tokens)

        def causal_probe(m):
            with _autocast(on_gpu, section.precision):
                return check_causality(m, probe["input_ids"], probe["attention_mask"], atol=1e-2 if on_gpu else 1e-4,
                                       document_sep_id=document_sep_id)

        failure = attention_self_check(model, candidate, loss_of, causal_probe if causal else None)
    choice = choose_attn_implementation(section.attn_implementation, on_gpu,
                                        flash_attn_importable() if on_gpu else False, failure)
    set_attention(model, choice.implementation)
    (log.warning if failure else log.info)("attention: %s (%s)", choice.implementation, choice.reason)
    return choice


def resolve_compile(section: PhaseSettings, on_gpu: bool) -> bool:
    """``pretraining.compile``: ``auto`` is on for CUDA and off on CPU; ``true``/``false`` as given."""
    return on_gpu if section.compile == "auto" else bool(section.compile)


def compile_encoder(model) -> None:
    """Step: compile the encoder in place (``nn.Module.compile``), so its parameter names and the exported
    folder stay plain (no ``_orig_mod.`` prefix); the MLM head and the loss stay eager."""
    from clmdetour.modeling.causal import encoder_of

    encoder_of(model).compile()


def probe_step_bytes(model, section: PhaseSettings, micro_batch: int, on_gpu: bool,
                     document_sep_id: int | None) -> float:
    """Reserved CUDA memory of one forward + backward at ``micro_batch`` (bytes), plus the AdamW state
    the probe does not allocate (:data:`clmdetour.training.memory.OPTIMIZER_BYTES_PER_PARAMETER`).

    Every position is labelled (the CLM worst case) and the ids are random: memory does not depend on them.
    """
    from clmdetour.modeling.causal import forward_encoder
    from clmdetour.modeling.loss import chunked_lm_loss
    from clmdetour.training.memory import OPTIMIZER_BYTES_PER_PARAMETER

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    ids = torch.randint(5, model.config.vocab_size, (micro_batch, section.seq_len), device=model.device)
    try:
        with _autocast(on_gpu, section.precision):
            hidden = forward_encoder(model, ids, torch.ones_like(ids), causal=get_objective(section.objective).causal,
                                     document_sep_id=document_sep_id).last_hidden_state
            loss = chunked_lm_loss(hidden, ids, lambda h: model.decoder(model.head(h)), section.clm_loss_chunk_tokens)
        loss.backward()
        measured = float(torch.cuda.max_memory_reserved())
    except torch.cuda.OutOfMemoryError:
        measured = float("inf")
    finally:
        model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return measured + trainable * OPTIMIZER_BYTES_PER_PARAMETER


def plan_memory(model, section: PhaseSettings, batch: dict, on_gpu: bool, document_sep_id: int | None,
                micro_key: str = "pretraining.micro_batch_sequences"):
    """Step: the micro-batch (``auto``: the largest fitting divisor of the per-device batch) and the enforced limit.

    On CUDA the limit is enforced (:func:`clmdetour.training.memory.enforce_limit`) and ``auto``'s choice
    is checked by a probe step; on CPU the estimate alone decides ``auto`` and a configured micro-batch is
    not checked (host memory is not the GPU limit).

    Returns:
        ``(MemoryPlan, batch)`` with the batch's ``micro`` and ``grad_accum`` filled.

    Raises:
        ConfigError: a configured micro-batch estimated over the limit (CUDA), or nothing fits.
    """
    from clmdetour.training.memory import (
        GIB,
        MemoryPlan,
        check_configured_micro_batch,
        enforce_limit,
        estimate_step_bytes,
        plan_micro_batch,
    )

    cfg = model.config
    limit = section.memory_limit_gib * GIB

    def bytes_of(mb: int) -> int:
        return estimate_step_bytes(parameters=sum(p.numel() for p in model.parameters()), hidden_size=cfg.hidden_size,
                                   intermediate_size=cfg.intermediate_size, num_layers=cfg.num_hidden_layers,
                                   vocab_size=cfg.vocab_size, seq_len=section.seq_len, micro_batch=mb,
                                   chunk_tokens=section.clm_loss_chunk_tokens,
                                   activation_bytes=2 if on_gpu and section.precision != "fp32" else 4)

    if on_gpu:
        enforce_limit(section.memory_limit_gib, torch.cuda.current_device())
    requested = section.micro_batch_sequences
    if requested == "auto":
        check = (lambda mb: probe_step_bytes(model, section, mb, on_gpu, document_sep_id)) if on_gpu else None
        mb, estimate, probed = plan_micro_batch(batch["per_device"], limit, bytes_of, check)
        how = ("the largest divisor of the per-device batch under the limit, "
               + ("estimated, then checked by a probe step" if on_gpu else "estimated (CPU: no probe)"))
    else:
        mb, estimate, probed = requested, bytes_of(requested), None
        if on_gpu:
            check_configured_micro_batch(mb, micro_key, limit, estimate)
        how = "configured"
    plan = MemoryPlan(mb, requested, section.memory_limit_gib, estimate / GIB,
                      None if probed is None else probed / GIB, how)
    return plan, dict(batch, micro=mb, grad_accum=batch["per_device"] // mb)


def prepare_checkpoint_dir(checkpoint_root: str, variant: str, phase: str, rhash: str,
                           max_steps: int | None = None) -> tuple[Path, dict]:
    """Step: ``{checkpoint_root}/{variant}/{phase}/{run hash}``, without the files of an unfinished save
    and with ``latest-rank0.pt`` on the newest checkpoint that loads safely and belongs to this run
    (:func:`clmdetour.training.checkpoints.repair_resume_point`: run name ``rhash``, a step within
    ``max_steps``; ``None`` checks the run name only).

    Returns:
        ``(folder, resume report)``; the report (rank 0's; ``{}`` on other ranks) goes to ``run.json``.
    """
    from composer.utils import dist

    from clmdetour.training.ranks import check_shared_folder, per_node_signal_files

    ckpt_dir = Path(checkpoint_root) / variant / phase / rhash
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {}
    if dist.get_global_rank() == 0:  # DDP: rank 0 writes every checkpoint file; check_shared_folder then syncs
        bad_link = set_aside_bad_link(ckpt_dir)  # a latest-rank0.pt Composer did not write: aside, relinked
        dropped = drop_unfinished_checkpoints(ckpt_dir)
        if dropped:
            log.warning("%s: removed checkpoint files of a save that did not finish (the job was killed while "
                        "writing them): %s", ckpt_dir, ", ".join(dropped))
        report = repair_resume_point(ckpt_dir, RunBinding(rhash, 10**18 if max_steps is None else max_steps))
        if bad_link:
            report = dict(report or {"resume_from": None, "restart": False}, skipped=[bad_link, *report.get("skipped", [])])
    check_shared_folder(ckpt_dir)
    per_node_signal_files()  # before the Trainer: its autoresume uses them
    return ckpt_dir, report


def trim_live_log(live_log: Path, resumed_from_step: int) -> int:
    """Drop the live log's lines past the step a run resumes from (they are trained again); return how many.

    A run killed at step 23 after its last checkpoint at step 20 logged steps 21-23, which the resumed
    run logs again: without this, ``train_log.jsonl`` would hold those steps twice.
    """
    if not live_log.exists():
        return 0
    lines = live_log.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= resumed_from_step]
    if len(kept) != len(lines):
        atomic_write_text(live_log, "".join(kept))
    return len(lines) - len(kept)


def build_dataloader(train_rows, tokenizer, section: PhaseSettings, offset_tokens: int, allow_repeat: bool, variant: str):
    """Step: the phase's slice of the packed stream and this rank's loader of it.

    Returns:
        ``(stream, Composer DataSpec, collator)``; the DataSpec counts ``input_ids.numel()`` tokens per batch.

    Raises:
        RepetitionError: the phase passes the corpus end and ``allow_repeat`` is false.
    """
    from composer.core import DataSpec
    from composer.utils import dist

    from clmdetour.training.data import phase_loader, phase_stream
    from clmdetour.training.objectives import make_collator

    gb = section.global_batch_sequences
    collator = make_collator(section.objective, tokenizer, section.masking_rate)
    stream = phase_stream(train_rows, section.tokens, section.seq_len, gb, offset_tokens, section.seed,
                          allow_repeat, what=f"{variant}/{section.phase}")
    loader = phase_loader(stream, gb, collator, dist.get_world_size(), dist.get_global_rank())
    return stream, DataSpec(loader, get_num_tokens_in_batch=lambda b: int(b["input_ids"].numel())), collator


def build_optimizer(model, section: PhaseSettings):
    """Step: Composer's ``DecoupledAdamW`` over :func:`clmdetour.modeling.freeze.optimizer_param_groups`, its
    update done by torch's fused AdamW kernel (:class:`clmdetour.training.optim.FusedDecoupledAdamW`: the same
    semantics, state and checkpoints)."""
    from clmdetour.modeling.freeze import optimizer_param_groups
    from clmdetour.training.optim import FusedDecoupledAdamW

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


def build_trainer(*, model, tokenizer, section: PhaseSettings, stream, data_spec, ckpt_dir: Path, rhash: str, variant: str,
                  on_gpu: bool, callbacks: list, micro_batch: int, document_sep_id: int | None = None):
    """Step: the Composer ``Trainer`` of a phase (schedule, checkpoints with autoresume, loggers).

    Returns:
        ``(trainer, precision)``; the precision is fp32 on CPU.
    """
    from composer import Trainer

    from clmdetour.training.composer_model import PretrainingModel
    from clmdetour.training.composer_setup import cheap_cpu_model
    from clmdetour.training.schedulers import make_scheduler

    seq_len = section.seq_len
    precision = section.precision if on_gpu else "fp32"
    composer_model = PretrainingModel(model, tokenizer, section.objective, section.clm_loss_chunk_tokens,
                                      document_sep_id=document_sep_id)
    with cheap_cpu_model():  # Composer's constructor would start a Python process to name the CPU
        trainer = Trainer(
            model=composer_model, train_dataloader=data_spec, max_duration=f"{len(stream) * seq_len}tok",
            optimizers=build_optimizer(model, section), schedulers=[make_scheduler(section)],
            step_schedulers_every_batch=True, device="gpu" if on_gpu else "cpu", precision=precision,
            device_train_microbatch_size=micro_batch,
            save_folder=str(ckpt_dir), save_filename="ep{epoch}-ba{batch}-rank{rank}.pt",
            save_interval=section.checkpoint_interval, save_num_checkpoints_to_keep=section.keep_checkpoints,
            save_overwrite=False, autoresume=True, run_name=rhash, seed=section.seed,
            loggers=build_loggers(section, ckpt_dir, variant), callbacks=callbacks,
            progress_bar=section.progress_bar, log_to_console=not section.progress_bar,
            console_log_interval=f"{section.log_interval_steps}ba", python_log_level=None,
        )
    return trainer, precision


def restore_optimizer_state(trainer, model, optimizer_state: str | None) -> int:
    """Step: load phase 1's optimizer state by parameter name into a fresh (not resumed) trainer.

    Returns:
        The number of parameters whose state was loaded (0 when none was asked for or the run resumed).

    Raises:
        FileNotFoundError: the state file is gone.
    """
    if not optimizer_state or int(trainer.state.timestamp.batch.value):
        return 0
    if not Path(optimizer_state).exists():
        raise FileNotFoundError(f"{optimizer_state}: phase 1's optimizer state is gone (checkpoint_root pruned?); "
                                "rerun phase 1 or set load_optimizer_state: false")
    return load_optimizer_by_name(trainer.state.optimizers[0], model, Path(optimizer_state))


def write_outputs(*, trainer, model, tokenizer, output_dir: str, ckpt_dir: Path, live_log: Path,
                  record: dict, loss_end: float, keep_checkpoints: int) -> dict:
    """Step (rank 0): the final model folder, ``train_log.jsonl``, the final optimizer state and ``run.json``.

    ``record`` holds what the earlier steps measured; this step adds the end-of-phase fields
    and writes every file atomically.

    Returns:
        The complete run record.
    """
    from clmdetour.modeling.freeze import trainable_parameter_count

    opt_path = ckpt_dir / "final_optimizer.pt"
    save_optimizer_by_name(trainer.state.optimizers[0], model, opt_path)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with versioned_output_dir(out / "model") as tmp:  # a rerun that fails keeps the previous model
        model.to(torch.float32).save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    shutil.copyfile(live_log, out / ".train_log.jsonl.tmp") if live_log.exists() else (out / ".train_log.jsonl.tmp").write_text("")
    os.replace(out / ".train_log.jsonl.tmp", out / "train_log.jsonl")
    record = dict(record, trainable_parameters=trainable_parameter_count(model),
                  total_parameters=sum(p.numel() for p in model.parameters()), valid_loss_end=loss_end,
                  optimizer_state_path=str(opt_path))
    atomic_write_json(out / "run.json", record)
    prune_checkpoints(ckpt_dir, keep_checkpoints)
    return record


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


def check_causal_on_first_batch(model, stream, collator, document_sep_id: int | None = None) -> float:
    """Step (CLM): :func:`clmdetour.modeling.causal.check_causality` on the stream's first two rows.

    Returns:
        The largest change of an earlier position's output when later tokens change (0 when causal).

    Raises:
        CausalityError: the forward pass leaks future tokens.
    """
    from clmdetour.modeling.causal import check_causality

    probe = collator([stream[i] for i in range(min(2, len(stream)))])
    return check_causality(model, probe["input_ids"].to(model.device), probe["attention_mask"].to(model.device),
                           document_sep_id=document_sep_id)


def build_train_log(model, section: PhaseSettings, live_log: Path, on_gpu: bool):
    """Step: the :class:`clmdetour.training.callbacks.TrainLog` callback (MFU on GPU: every token is
    predicted under CLM, ``masking_rate`` of them under MLM)."""
    from clmdetour.training.callbacks import TrainLog
    from clmdetour.training.flops import model_flops_per_token, peak_flops

    predicted = get_objective(section.objective).predicted_fraction(section.masking_rate)
    return TrainLog(str(live_log), section.log_interval_steps,
                    flops_per_token=model_flops_per_token(model.config, section.seq_len, predicted) if on_gpu else None,
                    peak_flops=peak_flops() if on_gpu else None, total_tokens=section.tokens)


def fit(trainer, budget_tokens: int, what: str, ckpt_dir: Path) -> None:
    """Step: train to ``budget_tokens``, resuming from the last checkpoint; a finished run asked again
    (e.g. ``--forcerun``) only has its outputs rewritten."""
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
        cut = drop_unfinished_checkpoints(ckpt_dir)  # the save the full disk cut short, under its final name
        raise CheckpointSpaceError(disk_full_message(ckpt_dir, what, cut)) from e


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` (or an exception it was raised from or during) is a full disk (ENOSPC).

    torch 2.14's ``torch.save`` reports ENOSPC as ``RuntimeError: [enforce fail at inline_container.cc:...]
    unexpected pos ...``, raised while handling the ``OSError`` (errno 28) of the failed write, so the
    chain of ``__cause__`` / ``__context__`` is walked, not only the error's own class.
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return True
        error = error.__cause__ or error.__context__
    return False


class CheckpointSpaceError(ExpectedError, OSError):
    """The disk holding a phase's checkpoints filled up during a save; the message names the folder."""


def disk_full_message(ckpt_dir: Path, what: str, removed: list[str] | None = None) -> str:
    """One line for a full disk during a checkpoint save: the folder, its free bytes, the bytes
    one more checkpoint needs (the size of the newest finished one), or that it is unknown, and the
    cut-short files removed (``removed``)."""
    free = shutil.disk_usage(ckpt_dir).free
    done = [p for p in ckpt_dir.glob("ep*-ba*-rank*.pt") if p.stat().st_size > 0]
    need = max((p.stat().st_size for p in done), default=None)
    need_text = (f"one checkpoint takes {need:,} bytes (the newest finished one)" if need
                 else "no finished checkpoint tells the size one takes")
    cut = f"; removed the cut-short {', '.join(removed)}" if removed else ""
    return (f"{ckpt_dir}: no space left on device while {what} saved a checkpoint ({free:,} bytes free; "
            f"{need_text}{cut}); free space there (or set pretraining.checkpoint_root to a larger disk: a new "
            f"folder restarts the phase) and rerun: the phase resumes from its last finished checkpoint")


def phase_record(*, variant: str, section: PhaseSettings, attn, causal_diff, frozen: list, on_gpu: bool, ranks,
                 precision: str, seq_len: int, batch: dict, trainer, stream, offset_tokens: int, data_epochs: float,
                 resumed_from_step: int, loaded_opt: int, loss_start, valid_sequences: int, input_model: str,
                 in_hash: str, data_hash: str, rhash: str, ckpt_dir: Path, t_start: float) -> dict:
    """The run record of a phase before its outputs are written (:func:`write_outputs` completes it)."""
    from composer.utils import dist

    world = dist.get_world_size()
    return {
        "variant": variant, "phase": section.phase, "objective": section.objective,
        "attention": dict(attn.as_dict(), causal=get_objective(section.objective).causal,
                          causality_check_max_diff=causal_diff, document_mask=section.document_mask),
        "frozen_parameters": frozen, "trainable_parameters": None, "total_parameters": None,
        "device": {"type": "gpu" if on_gpu else "cpu", "count": world,
                   "name": torch.cuda.get_device_name() if on_gpu else platform.processor() or "cpu"},
        "world_size": world, "nodes": world // dist.get_local_world_size(), "ranks": ranks,
        "precision": precision, "seq_len": seq_len, "global_batch_sequences": batch["global"],
        "micro_batch_sequences": batch["micro"], "per_device_batch_sequences": batch["per_device"],
        "grad_accum": batch["grad_accum"], "tokens_budget": section.tokens,
        "tokens": int(trainer.state.timestamp.token.value), "steps": int(trainer.state.timestamp.batch.value),
        # positions above; the non-padding tokens of the rows trained on (reporting only: budgets stay in positions)
        "real_tokens": stream.real_tokens(int(trainer.state.timestamp.batch.value) * batch["global"]),
        "offset_tokens": offset_tokens, "data_epochs": round(data_epochs, 4),
        "resumed_from_step": resumed_from_step, "optimizer_state_loaded_parameters": loaded_opt,
        "valid_loss_start": loss_start, "valid_loss_end": None, "valid_sequences": valid_sequences,
        "input_model": str(input_model), "input_model_hash": in_hash, "data_hash": data_hash,
        "run_hash": rhash, "checkpoint_dir": str(ckpt_dir), "optimizer_state_path": None,
        "wall_time_s": round(time.time() - t_start, 2), "peak_memory_gib": peak_memory_gib(),
        "versions": versions(), "git_sha": git_sha(),
        "section": section.as_dict(),
    }


def run_phase(*, input_model: str, corpus_dir: str, output_dir: str, section: PhaseSettings | dict, variant: str,
              checkpoint_root: str, offset_tokens: int = 0, optimizer_state: str | None = None,
              allow_repeat: bool = True, extra_callbacks: list | None = None) -> dict:
    """Train one phase and write ``{output_dir}/model``, ``train_log.jsonl`` and ``run.json``.

    Named steps: :func:`load_corpus`, :func:`batch_arithmetic`, :func:`build_model`,
    :func:`prepare_checkpoint_dir`, the data stream and loader
    (:func:`clmdetour.training.data.phase_stream`), the causality check (CLM), :func:`build_trainer`,
    :func:`restore_optimizer_state`, ``fit`` and :func:`write_outputs`.

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
    """
    from composer.utils import dist

    from clmdetour.modeling.folders import check_model_folder
    from clmdetour.training.objectives import make_collator
    from clmdetour.training.ranks import rank_records

    t_start = time.time()
    if not isinstance(section, PhaseSettings):
        section = PhaseSettings.from_dict(section, f"{variant} phase section")
    phase, objective = section.phase, section.objective
    on_gpu, world, rank0 = init_process(section)
    train_rows, valid_rows, data_hash, seq_len = load_corpus(corpus_dir, section)
    batch = batch_arithmetic(section, world)
    check_model_folder(input_model, model_type="modernbert")
    in_hash = model_hash(input_model)
    rhash = run_hash(section, in_hash, data_hash, offset_tokens)
    check_checkpoint_dir(Path(checkpoint_root) / variant / phase / rhash)  # before the model loads
    model, tokenizer, candidate, frozen = build_model(input_model, section, variant, on_gpu)
    doc_sep = document_separator(section, tokenizer)
    stream, data_spec, collator = build_dataloader(train_rows, tokenizer, section, offset_tokens, allow_repeat, variant)
    ckpt_dir, resume_report = prepare_checkpoint_dir(checkpoint_root, variant, phase, rhash,
                                                     max_steps=-(-len(stream) // batch["global"]))
    valid_collator = make_collator(objective, tokenizer, section.masking_rate, seed=section.seed)
    valid_sample = valid_rows.select(range(min(section.valid_sequences, len(valid_rows))))
    model.to(torch.device("cuda", dist.get_local_rank()) if on_gpu else torch.device("cpu"))
    attn = settle_attention(model, section, candidate, stream, collator, on_gpu, doc_sep)
    causal_diff = (check_causal_on_first_batch(model, stream, collator, doc_sep)
                   if get_objective(objective).causality_check else None)
    memory, batch = plan_memory(model, section, batch, on_gpu, doc_sep)
    chunk = section.clm_loss_chunk_tokens
    loss_start = (heldout_loss(model, valid_sample, valid_collator, objective, chunk_tokens=chunk,
                               document_sep_id=doc_sep) if rank0 else None)
    compiled = resolve_compile(section, on_gpu)
    if compiled:
        compile_encoder(model)
    live_log = ckpt_dir / "train_log.jsonl"
    train_log = build_train_log(model, section, live_log, on_gpu)
    with safe_loading():  # Composer's autoresume loads the checkpoint here: weights_only, whatever it asks
        trainer, precision = build_trainer(model=model, tokenizer=tokenizer, section=section, stream=stream,
                                           data_spec=data_spec, ckpt_dir=ckpt_dir, rhash=rhash, variant=variant,
                                           on_gpu=on_gpu, callbacks=[train_log, *(extra_callbacks or [])],
                                           micro_batch=batch["micro"], document_sep_id=doc_sep)
    resumed_from_step = int(trainer.state.timestamp.batch.value)
    if rank0:
        dropped = trim_live_log(live_log, resumed_from_step)
        if dropped:
            log.warning("%s: dropped %d line(s) past step %d, which this run trains again", live_log, dropped,
                        resumed_from_step)
    loaded_opt = restore_optimizer_state(trainer, model, optimizer_state)
    fit(trainer, len(stream) * seq_len, f"{variant}/{phase}", ckpt_dir)
    ranks = rank_records(resumed_from_step)
    record = None
    if rank0:
        model.eval()
        loss_end = heldout_loss(model, valid_sample, valid_collator, objective, chunk_tokens=chunk,
                                document_sep_id=doc_sep)
        record = phase_record(
            variant=variant, section=section, attn=attn, causal_diff=causal_diff, frozen=frozen, on_gpu=on_gpu,
            ranks=ranks, precision=precision, seq_len=seq_len, batch=batch, trainer=trainer, stream=stream,
            offset_tokens=offset_tokens,
            data_epochs=stream.epochs, resumed_from_step=resumed_from_step, loaded_opt=loaded_opt, loss_start=loss_start,
            valid_sequences=len(valid_sample), input_model=input_model, in_hash=in_hash, data_hash=data_hash, rhash=rhash,
            ckpt_dir=ckpt_dir, t_start=t_start)
        record["resume"] = resume_report
        record["memory"] = memory.as_dict()
        # first_step_s includes compilation when compiled; tokens_per_s in train_log.jsonl excludes the first step
        record["compile"] = {"enabled": compiled, "requested": section.compile, "first_step_s": train_log.first_step_s}
        record["valid_held_out"] = valid_is_held_out(corpus_dir)  # False: the "held-out" loss is on training text
        record = write_outputs(trainer=trainer, model=model, tokenizer=tokenizer, output_dir=output_dir,
                               ckpt_dir=ckpt_dir, live_log=live_log, record=record, loss_end=loss_end,
                               keep_checkpoints=section.keep_checkpoints)
    dist.barrier()
    return record
