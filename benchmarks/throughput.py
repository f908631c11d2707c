"""Benchmark 1: pretraining step throughput, this project's Composer stack vs a plain transformers Trainer.

Ours is :func:`clmdetour.training.phase.run_phase` itself (Composer Trainer,
DecoupledAdamW, token schedule, chunked loss through the MLM head, the
TrainLog callback writing tokens/s every step), run on a packed corpus built
from the real French texts. The reference is ``transformers.Trainer`` on the
identical model folder, packed rows, collator, batch and sequence length:
for MLM the model's own forward with ``sparse_prediction=True`` (the head on
masked positions only, unchunked); for CLM, the same causal encoder forward
(:func:`clmdetour.modeling.causal.forward_encoder`) followed by the plain
full-sequence cross-entropy (:func:`clmdetour.modeling.loss.unchunked_lm_loss`),
which is what one writes without this project.

Throughput = tokens of the measured steps / their wall time, measured between
step ends after ``skip`` warm-up steps, the same way on both sides (ours from
``train_log.jsonl``'s ``tokens`` and ``elapsed_s``, the reference from a
``TrainerCallback``). Repeats alternate ours / reference.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.common import (
    REPO,
    Row,
    bench_tokenizer,
    median_range,
    modernbert_config,
    paired_ratio,
    pretrain_texts,
    save_model,
)

GOAL = 0.95


def paper_section(phase: str, **overrides) -> dict:
    """The resolved paper-config section of ``clm-detour``'s ``phase`` with ``overrides`` applied."""
    from clmdetour.config import load_yaml, resolve_phase, validate_config

    config = validate_config(load_yaml(REPO / "config" / "config.yaml"))
    section = resolve_phase(config, "clm-detour", phase)
    section.update(overrides)
    return section


def build_corpus(tokenizer, out: Path, seq_len: int, n_train: int, n_valid: int = 2) -> Path:
    """Pack real documents into ``out/train`` and ``out/valid`` (the corpus contract), enough for ``n_train`` rows.

    Raises:
        ValueError: the real corpus is too small for ``n_train`` rows.
    """
    import datasets

    from clmdetour.corpus.pack import pack_batch, packed_features, token_dtype

    texts = pretrain_texts(per_file=None)
    need = (n_train + n_valid) * seq_len
    ids, total = [], 0
    for start in range(0, len(texts), 64):
        for doc in tokenizer(texts[start:start + 64])["input_ids"]:
            ids.append(doc)
            total += len(doc)
        if total > need:
            break
    if total < need:
        raise ValueError(f"the real corpus holds {total} tokens, fewer than the {need} this benchmark needs")
    dtype = token_dtype(len(tokenizer))
    rows = pack_batch({"input_ids": ids}, seq_len, tokenizer.pad_token_id, dtype)
    full = [i for i, n in enumerate(rows["n_tokens"]) if n == seq_len]
    ds = datasets.Dataset.from_dict({k: rows[k][full] for k in ("input_ids", "n_tokens")},
                                    features=packed_features(seq_len, dtype))
    ds.select(range(n_train)).save_to_disk(str(out / "train"))
    ds.select(range(n_train, n_train + n_valid)).save_to_disk(str(out / "valid"))
    return out


def steady_rate(tokens: list[int], times: list[float], skip: int) -> float:
    """Tokens per second between the end of step ``skip + 1`` and the last step end.

    Args:
        tokens: cumulative tokens at each step end.
        times: wall clock (s) at each step end.
        skip: warm-up steps left out (the first step also pays one-off costs).

    Raises:
        ValueError: fewer than ``skip + 2`` steps.
    """
    if len(tokens) != len(times) or len(tokens) < skip + 2:
        raise ValueError(f"need at least {skip + 2} logged steps, got {len(tokens)}")
    return (tokens[-1] - tokens[skip]) / (times[-1] - times[skip])


def run_ours(model_dir: Path, corpus_dir: Path, section: dict, scratch: Path, skip: int) -> tuple[float, list[dict]]:
    """Steady-state tokens/s of ``run_phase`` (from its own ``train_log.jsonl``) and the log lines.

    Each call uses fresh output and checkpoint folders (an old checkpoint of
    the same run hash would otherwise be resumed).
    """
    from clmdetour.training.phase import run_phase

    run_dir = Path(tempfile.mkdtemp(dir=scratch))
    try:
        run_phase(input_model=str(model_dir), corpus_dir=str(corpus_dir), output_dir=str(run_dir / "out"),
                  section=section, variant="bench", checkpoint_root=str(run_dir / "ckpt"))
        lines = [json.loads(l) for l in (run_dir / "out" / "train_log.jsonl").read_text().splitlines() if l.strip()]
        return steady_rate([l["tokens"] for l in lines], [l["elapsed_s"] for l in lines], skip), lines
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def measure_ours(model_dir: Path, corpus_dir: Path, section: dict, scratch: Path, skip: int) -> float:
    """Steady-state tokens/s of ``run_phase`` (see :func:`run_ours`)."""
    return run_ours(model_dir, corpus_dir, section, scratch, skip)[0]


_DIST_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")


def leave_distributed() -> None:
    """Undo Composer's single-process ``initialize_dist`` so that ``transformers.Trainer`` does not wrap in DDP.

    Composer creates a 1-process group and sets ``RANK``/``WORLD_SIZE``/...;
    ``transformers.Trainer`` would then wrap the reference model in
    ``DistributedDataParallel`` (an all-reduce per step that ours does not do).
    Composer re-creates the group on its next ``initialize_dist``.
    """
    import os

    import torch.distributed as tdist

    if tdist.is_available() and tdist.is_initialized():
        tdist.destroy_process_group()
    for key in _DIST_ENV:
        os.environ.pop(key, None)


def measure_reference(model_dir: Path, corpus_dir: Path, section: dict, scratch: Path, skip: int) -> float:
    """Steady-state tokens/s of ``transformers.Trainer`` on the same model, rows, collator and batch."""
    import datasets
    import torch
    from transformers import AutoTokenizer, ModernBertForMaskedLM, Trainer, TrainerCallback, TrainingArguments

    from clmdetour.modeling.attention import select_attn_implementation
    from clmdetour.modeling.causal import forward_encoder
    from clmdetour.modeling.loss import unchunked_lm_loss
    from clmdetour.objectives import get_objective
    from clmdetour.training.collators import make_collator

    on_gpu = torch.cuda.is_available()
    leave_distributed()
    seq_len, batch = section["seq_len"], section["global_batch_sequences"]
    steps = -(-section["tokens"] // (seq_len * batch))
    rows = datasets.load_from_disk(str(corpus_dir / "train")).with_format("numpy")
    rows = rows.select(range(steps * batch))
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    attn = select_attn_implementation(section["attn_implementation"], on_gpu)
    model = ModernBertForMaskedLM.from_pretrained(str(model_dir), attn_implementation=attn, dtype=torch.float32)
    model.config.sparse_prediction = True
    model.sparse_prediction = True
    objective = section["objective"]

    class Clock(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            if on_gpu:
                torch.cuda.synchronize()
            self.times.append(time.perf_counter())

    class CLMTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            hidden = forward_encoder(model, inputs["input_ids"], inputs["attention_mask"], causal=True).last_hidden_state
            return unchunked_lm_loss(hidden, inputs["labels"], lambda h: model.decoder(model.head(h)))

    opt = section["optimizer"]
    args = TrainingArguments(
        output_dir=str(Path(tempfile.mkdtemp(dir=scratch))), max_steps=steps, per_device_train_batch_size=batch,
        gradient_accumulation_steps=1, learning_rate=section["lr"], adam_beta1=opt["betas"][0],
        adam_beta2=opt["betas"][1], adam_epsilon=opt["eps"], weight_decay=opt["weight_decay"],
        lr_scheduler_type="constant", logging_strategy="no", save_strategy="no", report_to=[],
        use_cpu=not on_gpu, bf16=on_gpu and section["precision"] == "amp_bf16", dataloader_num_workers=0,
        disable_tqdm=True, remove_unused_columns=False, seed=section["seed"])
    clock = Clock()
    cls = CLMTrainer if get_objective(objective).causal else Trainer
    collator = make_collator(objective, get_objective(objective).settings_of(section), tokenizer)
    trainer = cls(model=model, args=args, train_dataset=rows, data_collator=collator, callbacks=[clock])
    try:
        trainer.train()
    finally:
        shutil.rmtree(args.output_dir, ignore_errors=True)
    toks = [(i + 1) * batch * seq_len for i in range(len(clock.times))]
    return steady_rate(toks, clock.times, skip)


def sizes(quick: bool, gpu: bool) -> dict:
    """Model and batch sizes of the benchmark (CPU: small model, real data; GPU: see ``gpu.py``)."""
    if quick:
        return {"seq_len": 256, "batch": 2, "steps": 3, "skip": 1, "repeats": 2,
                    "model": {"hidden_size": 128, "num_hidden_layers": 3, "num_attention_heads": 2, "intermediate_size": 192,
                               "local_attention": 64, "max_position_embeddings": 256}}
    return {"seq_len": 512, "batch": 4, "steps": 6, "skip": 1, "repeats": 5,
                "model": {"hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 4, "intermediate_size": 384,
                           "local_attention": 64, "max_position_embeddings": 512}}


def run(workdir: Path, quick: bool = False, log=print) -> list[Row]:
    """Interleaved repeats of ours vs the reference for phase-1 CLM and decay MLM; one Row each."""
    s = sizes(quick, gpu=False)
    tokenizer = bench_tokenizer(workdir)
    root = Path(tempfile.mkdtemp(dir=workdir, prefix="throughput-"))
    try:
        cfg = modernbert_config(tokenizer, **s["model"])
        model_dir = save_model(cfg, tokenizer, root / "model")
        corpus_dir = build_corpus(tokenizer, root / "corpus", s["seq_len"], s["steps"] * s["batch"])
        rows = []
        for phase, objective, label in (("phase1", "clm", "phase-1 CLM step"), ("decay", "mlm", "decay MLM step")):
            section = paper_section(
                phase, seq_len=s["seq_len"], global_batch_sequences=s["batch"], micro_batch_sequences=s["batch"],
                tokens=s["steps"] * s["batch"] * s["seq_len"], warmup_tokens=s["batch"] * s["seq_len"],
                log_interval_steps=1, valid_sequences=1, progress_bar=False, checkpoint_interval="100000ba",
                keep_checkpoints=1, attn_implementation="sdpa", load_optimizer_state=False)
            ours, ref = [], []
            for r in range(s["repeats"]):
                ours.append(measure_ours(model_dir, corpus_dir, section, root, s["skip"]))
                ref.append(measure_reference(model_dir, corpus_dir, section, root, s["skip"]))
                log(f"  {label} repeat {r + 1}/{s['repeats']}: ours {ours[-1]:.0f} tok/s, transformers.Trainer {ref[-1]:.0f} tok/s")
            ratio, rr = paired_ratio(ours, ref)
            o, orange = median_range(ours)
            f, frange = median_range(ref)
            rows.append(Row(
                benchmark="1 pretraining throughput", metric=label, unit="tokens/s", ours=o, reference=f, ratio=ratio,
                ratio_meaning="ours / transformers.Trainer (higher is better)", goal=f">= {GOAL}",
                goal_met=ratio >= GOAL, repeats=s["repeats"], ratio_range=rr, ours_range=orange, reference_range=frange,
                details={"seq_len": s["seq_len"], "batch_sequences": s["batch"], "steps": s["steps"],
                         "warmup_steps_skipped": s["skip"], "model": s["model"], "vocab_size": cfg.vocab_size,
                         "loss_chunk_tokens": section["loss_chunk_tokens"], "device": "cpu", "precision": "fp32"}))
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)
