"""GPU benchmark: phase-1 CLM and decay MLM throughput, MFU and peak memory of the 150M base configuration at 8,192 tokens.

Runs :func:`clmdetour.training.phase.run_phase` (the project's Composer stack,
bf16) on one GPU for the base configuration of ``almanach/moderncamembert-base``
(22 layers, hidden 768, GLU MLP 1,152, 12 heads, vocabulary 32,768, global
attention every 3rd layer, 128-token sliding window), randomly initialised,
on packed random-token documents (throughput does not depend on the text).

Default rows (one run, at most 8 minutes on one H100/H200):

1. phase-1 CLM, sdpa, micro-batch 4, not compiled (today's path before FlexAttention);
2. phase-1 CLM, FlexAttention + ``torch.compile``, the planner's micro-batch
   (``micro_batch_sequences: auto`` under ``--memory-limit-gib``, enforced on a larger card);
3. decay MLM, FlexAttention + compile, the planner's micro-batch;
4. ``transformers.Trainer`` MLM, sdpa, micro-batch 4 (the reference of every ratio).

Each row: steady-state tokens/s (after ``--skip`` steps; the first step, which
compiles, is reported apart as ``first_step_s``), MFU = tokens/s x FLOPs per
token (:func:`clmdetour.training.flops.model_flops_per_token`) / peak bf16
FLOP/s of the device, peak reserved GiB (``torch.cuda.max_memory_reserved``)
and the ratio to the Trainer row. ``--profile`` also writes the top kernels of
one steady-state compiled CLM step (``torch.profiler``) to
``benchmarks/results/gpu-profile.txt`` (docs/performance.md says how to read it).

``--dry`` shrinks everything (2 layers, sequence 256) and runs on the CPU to
check the script: FlexAttention has no CPU backward, so its rows train with
sdpa there, and every GPU figure prints "not measured (CPU)".
Writes ``benchmarks/results/gpu.json`` (``gpu-dry.json`` with ``--dry``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

BASE_150M = {"vocab_size": 32768, "hidden_size": 768, "num_hidden_layers": 22, "num_attention_heads": 12,
                 "intermediate_size": 1152, "global_attn_every_n_layers": 3, "local_attention": 128,
                 "max_position_embeddings": 8192}
DRY = {"vocab_size": 32768, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 96,
           "global_attn_every_n_layers": 3, "local_attention": 32, "max_position_embeddings": 256}


def synthetic_corpus(out: Path, vocab_size: int, seq_len: int, n_rows: int, cls_id: int, sep_id: int, pad_id: int,
                     seed: int = 0) -> Path:
    """Packed rows of random-token documents (200-3,000 tokens, ``[CLS] ... [SEP]``) in the corpus contract."""
    import datasets
    import numpy as np

    from clmdetour.corpus.pack import pack_batch, packed_features, token_dtype

    rng = np.random.default_rng(seed)
    docs, total = [], 0
    while total < (n_rows + 2) * seq_len:
        n = int(rng.integers(200, 3000))
        docs.append([cls_id] + rng.integers(5, vocab_size, n - 2).tolist() + [sep_id])
        total += n
    rows = pack_batch({"input_ids": docs}, seq_len, pad_id, token_dtype(vocab_size))
    ds = datasets.Dataset.from_dict({"input_ids": rows["input_ids"][: n_rows + 2],
                                     "n_tokens": rows["n_tokens"][: n_rows + 2]},
                                    features=packed_features(seq_len, token_dtype(vocab_size)))
    ds.select(range(n_rows)).save_to_disk(str(out / "train"))
    ds.select(range(n_rows, n_rows + 2)).save_to_disk(str(out / "valid"))
    return out


NOT_MEASURED = "not measured (CPU)"


def run_row(model_dir: Path, corpus: Path, section: dict, scratch: Path, skip: int) -> dict:
    """One ``run_phase`` run: steady tokens/s, the first step's time, the planned micro-batch and peak memory."""
    import json

    from benchmarks.throughput import leave_distributed, steady_rate
    from clmdetour.training.phase import run_phase

    run_dir = Path(tempfile.mkdtemp(dir=scratch))
    try:
        run_phase(input_model=str(model_dir), corpus_dir=str(corpus), output_dir=str(run_dir / "out"),
                  section=section, variant="bench", checkpoint_root=str(run_dir / "ckpt"))
        lines = [json.loads(x) for x in (run_dir / "out" / "train_log.jsonl").read_text().splitlines() if x.strip()]
        run = json.loads((run_dir / "out" / "run.json").read_text())
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
        leave_distributed()
    return {"tokens_per_s": steady_rate([x["tokens"] for x in lines], [x["elapsed_s"] for x in lines], skip),
            "first_step_s": lines[0].get("first_step_s"), "micro_batch_sequences": run["micro_batch_sequences"],
            "memory_plan": run.get("memory"), "peak_memory_gib": run.get("peak_memory_gib"),
            "attention": run["attention"]["implementation"], "attention_reason": run["attention"].get("reason"),
            "compiled": run.get("compile", {}).get("enabled")}


def profile_step(model_dir: Path, seq_len: int, micro_batch: int, on_gpu: bool, out: Path, rows: int = 30) -> Path:
    """Write the top kernels of one steady-state compiled CLM step (forward + backward) to ``out``.

    Three warm-up steps first (compilation, autotuning), then one step under ``torch.profiler``;
    the table is sorted by device time on CUDA (host time on CPU).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import ModernBertForMaskedLM

    from clmdetour.modeling.causal import encoder_of, forward_encoder, set_attention
    from clmdetour.modeling.loss import chunked_lm_loss

    device = "cuda" if on_gpu else "cpu"
    model = ModernBertForMaskedLM.from_pretrained(str(model_dir), dtype=torch.float32).to(device)
    set_attention(model, "flex_attention" if on_gpu else "sdpa")
    encoder_of(model).compile()
    ids = torch.randint(5, model.config.vocab_size, (micro_batch, seq_len), device=device)
    ctx = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if on_gpu else (lambda: torch.autocast("cpu", enabled=False))

    def step():
        with ctx():
            hidden = forward_encoder(model, ids, causal=True).last_hidden_state
            loss = chunked_lm_loss(hidden, ids, lambda h: model.decoder(model.head(h)), 2048)
        loss.backward()
        model.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        step()
        if on_gpu:
            torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total" if on_gpu else "cpu_time_total", row_limit=rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# one compiled CLM step, micro-batch {micro_batch} x {seq_len} tokens, "
                   f"{'FlexAttention, bf16' if on_gpu else 'sdpa, fp32 (CPU dry run)'}\n{table}\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure and write the GPU table; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry", action="store_true", help="tiny sizes on the CPU (script check)")
    p.add_argument("--batch", type=int, default=4, help="micro-batch of the sdpa and Trainer rows")
    p.add_argument("--planned-batch", type=int, default=24,
                   help="per-device batch of the FlexAttention rows; the planner picks their micro-batch")
    p.add_argument("--memory-limit-gib", type=float, default=72.0, help="pretraining.memory_limit_gib of the planned rows")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--skip", type=int, default=2, help="steps left out of the rate (the first one compiles)")
    p.add_argument("--profile", action="store_true", help="also write one compiled step's top kernels")
    p.add_argument("--no-reference", action="store_true", help="skip the transformers.Trainer row")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)

    import torch

    from benchmarks.common import modernbert_config
    from benchmarks.throughput import leave_distributed, measure_reference, paper_section
    from clmdetour.io import atomic_write_json
    from clmdetour.tokenizer import save_tokenizer, train_tokenizer
    from clmdetour.training.flops import model_flops_per_token, peak_flops

    on_gpu = torch.cuda.is_available() and not a.dry
    if not torch.cuda.is_available() and not a.dry:
        print("no CUDA device: GPU figures not measured (use --dry to check the script on CPU)", file=sys.stderr)
        return 2
    sizes = DRY if a.dry else BASE_150M
    seq_len = 256 if a.dry else 8192
    steps, skip, batch, planned = (4, 2, 2, 4) if a.dry else (a.steps, a.skip, a.batch, a.planned_batch)
    flex = "flex_attention" if on_gpu else "sdpa"  # no CPU backward for FlexAttention
    root = Path(tempfile.mkdtemp(prefix="clmdetour-gpu-"))
    rows = []
    peak = peak_flops() if on_gpu else None
    try:
        # the tokenizer only supplies special ids to the collators: a tiny one suffices
        texts = [f"Patient de {i} ans, traitement {i % 7} mg, suivi clinique." for i in range(200)]
        tokenizer = train_tokenizer(texts, vocab_size=300, min_frequency=1)
        save_tokenizer(tokenizer, root / "tok")
        cfg = modernbert_config(tokenizer, **sizes)
        from transformers import ModernBertForMaskedLM

        torch.manual_seed(0)
        ModernBertForMaskedLM(cfg).save_pretrained(str(root / "model"), safe_serialization=True)
        tokenizer.save_pretrained(str(root / "model"))
        corpus = synthetic_corpus(root / "corpus", len(tokenizer), seq_len, steps * max(batch, planned),
                                  tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id)
        plan = [  # label, phase, attention, compile, per-device batch, micro-batch
            (f"phase1 CLM sdpa, micro-batch {batch}", "phase1", "sdpa", False, batch, batch),
            (f"phase1 CLM {flex} + compile, planned micro-batch", "phase1", flex, True, planned, "auto"),
            (f"decay MLM {flex} + compile, planned micro-batch", "decay", flex, True, planned, "auto"),
        ]
        for label, phase, attn, compiled, gb, micro in plan:
            section = paper_section(
                phase, seq_len=seq_len, global_batch_sequences=gb, micro_batch_sequences=micro,
                tokens=steps * gb * seq_len, warmup_tokens=gb * seq_len, log_interval_steps=1,
                valid_sequences=1, progress_bar=False, checkpoint_interval="100000ba", keep_checkpoints=1,
                attn_implementation=attn, load_optimizer_state=False, compile=compiled,
                memory_limit_gib=a.memory_limit_gib)
            row = dict(run_row(root / "model", corpus, section, root, skip), metric=label)
            fpt = model_flops_per_token(cfg, seq_len, 1.0 if phase == "phase1" else section["masking_rate"])
            row.update(flops_per_token=fpt, mfu=row["tokens_per_s"] * fpt / peak if peak else None)
            rows.append(row)
            print(f"{label}: {row['tokens_per_s']:,.0f} tokens/s, micro-batch {row['micro_batch_sequences']}, "
                  f"first step {row['first_step_s']} s, MFU {_pct(row['mfu'])}, peak {_gib(row['peak_memory_gib'])}, "
                  f"attention {row['attention']}", flush=True)
        if not a.no_reference:
            section = paper_section("decay", seq_len=seq_len, global_batch_sequences=batch,
                                    micro_batch_sequences=batch, tokens=steps * batch * seq_len,
                                    warmup_tokens=batch * seq_len, log_interval_steps=1, valid_sequences=1,
                                    progress_bar=False, checkpoint_interval="100000ba", keep_checkpoints=1,
                                    attn_implementation="sdpa", load_optimizer_state=False, compile=False)
            leave_distributed()
            if on_gpu:
                torch.cuda.reset_peak_memory_stats()
            ref = measure_reference(root / "model", corpus, section, root, skip)
            fpt = model_flops_per_token(cfg, seq_len, section["masking_rate"])
            rows.append({"metric": f"transformers.Trainer MLM sdpa, micro-batch {batch}", "tokens_per_s": ref,
                         "micro_batch_sequences": batch, "flops_per_token": fpt,
                         "mfu": ref * fpt / peak if peak else None,
                         "peak_memory_gib": round(torch.cuda.max_memory_reserved() / 2 ** 30, 3) if on_gpu else None})
            print(f"{rows[-1]['metric']}: {ref:,.0f} tokens/s, MFU {_pct(rows[-1]['mfu'])}, "
                  f"peak {_gib(rows[-1]['peak_memory_gib'])}", flush=True)
            for row in rows:
                row["ratio_vs_transformers_trainer"] = row["tokens_per_s"] / ref
        if a.profile:
            micro = next((r["micro_batch_sequences"] for r in rows if "planned" in r["metric"]), batch)
            path = profile_step(root / "model", seq_len, micro, on_gpu, REPO / "benchmarks" / "results" /
                                ("gpu-profile-dry.txt" if a.dry else "gpu-profile.txt"))
            print(f"profile: {path}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(rows)
    result = {"date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), "dry": a.dry,
              "device": torch.cuda.get_device_name() if on_gpu else "cpu", "peak_flops": peak,
              "model": sizes, "seq_len": seq_len, "steps": steps, "warmup_steps_skipped": skip,
              "memory_limit_gib": a.memory_limit_gib, "precision": "amp_bf16" if on_gpu else "fp32",
              "torch": torch.__version__, "rows": rows}
    out = a.out or REPO / "benchmarks" / "results" / ("gpu-dry.json" if a.dry else "gpu.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, result)
    print(f"written: {out}")
    return 0


def _pct(x: float | None) -> str:
    return NOT_MEASURED if x is None else f"{x:.1%}"


def _gib(x: float | None) -> str:
    return NOT_MEASURED if x is None else f"{x:.1f} GiB"


def print_table(rows: list[dict]) -> None:
    """The rows as a Markdown table (tokens/s, MFU, peak GiB, ratio to the Trainer row)."""
    print("\n| row | micro-batch | tokens/s | MFU | peak memory | x Trainer |\n|---|---|---|---|---|---|")
    for r in rows:
        ratio = r.get("ratio_vs_transformers_trainer")
        print(f"| {r['metric']} | {r.get('micro_batch_sequences')} | {r['tokens_per_s']:,.0f} | {_pct(r.get('mfu'))} | "
              f"{_gib(r.get('peak_memory_gib'))} | {'' if ratio is None else f'{ratio:.2f}'} |")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
