"""GPU benchmark: phase-1 CLM and decay MLM throughput and MFU of the 150M base configuration at 8,192 tokens.

Runs :func:`clmdetour.training.phase.run_phase` (the project's Composer stack,
bf16) on one GPU for the base configuration of ``almanach/moderncamembert-base``
(22 layers, hidden 768, GLU MLP 1,152, 12 heads, vocabulary 32,768, global
attention every 3rd layer, 128-token sliding window), randomly initialised,
on packed random-token documents (throughput does not depend on the text),
with ``sdpa`` and, where the ``flash_attn`` package is installed,
``flash_attention_2`` (else that row says "not measured"). MFU = tokens/s x
FLOPs per token (:func:`clmdetour.training.flops.model_flops_per_token`) /
peak bf16 FLOP/s of the device, also read back from the phase's own
``train_log.jsonl`` (the ``mfu`` field its TrainLog callback writes on GPU).
With ``--reference``, ``transformers.Trainer`` on the same model and batch is
measured too (sdpa), as in benchmark 1.

``--dry`` shrinks everything (2 layers, sequence 256) and runs on whatever
device there is, to check the script without a GPU.
Writes ``benchmarks/results/gpu.json`` (``gpu-dry.json`` with ``--dry``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import shutil
import statistics
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

    from clmdetour.corpus.pack import pack_batch

    rng = np.random.default_rng(seed)
    docs, total = [], 0
    while total < (n_rows + 2) * seq_len:
        n = int(rng.integers(200, 3000))
        docs.append([cls_id] + rng.integers(5, vocab_size, n - 2).tolist() + [sep_id])
        total += n
    rows = pack_batch({"input_ids": docs}, seq_len, pad_id)
    ds = datasets.Dataset.from_dict({"input_ids": rows["input_ids"][: n_rows + 2],
                                     "attention_mask": rows["attention_mask"][: n_rows + 2]})
    ds.select(range(n_rows)).save_to_disk(str(out / "train"))
    ds.select(range(n_rows, n_rows + 2)).save_to_disk(str(out / "valid"))
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure and write the GPU table; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry", action="store_true", help="tiny sizes on any device (script check)")
    p.add_argument("--batch", type=int, default=4, help="sequences per step (micro = global batch)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--skip", type=int, default=2, help="warm-up steps left out of the rate")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--reference", action="store_true", help="also time transformers.Trainer (sdpa)")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)

    import torch

    from benchmarks.common import modernbert_config
    from benchmarks.throughput import leave_distributed, measure_reference, paper_section, run_ours
    from clmdetour.io import atomic_write_json
    from clmdetour.tokenizer import save_tokenizer, train_tokenizer
    from clmdetour.training.flops import model_flops_per_token, peak_flops

    on_gpu = torch.cuda.is_available()
    if not on_gpu and not a.dry:
        print("no CUDA device: GPU figures not measured (use --dry to check the script on CPU)", file=sys.stderr)
        return 2
    sizes = DRY if a.dry else BASE_150M
    seq_len = 256 if a.dry else 8192
    steps, skip, batch, repeats = (3, 1, 2, 1) if a.dry else (a.steps, a.skip, a.batch, a.repeats)
    try:
        import flash_attn  # noqa: F401

        fa2 = on_gpu
    except ImportError:
        fa2 = False
    root = Path(tempfile.mkdtemp(prefix="clmdetour-gpu-"))
    rows = []
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
        corpus = synthetic_corpus(root / "corpus", len(tokenizer), seq_len, steps * batch, tokenizer.cls_token_id,
                                  tokenizer.sep_token_id, tokenizer.pad_token_id)
        peak = peak_flops() if on_gpu else None
        for attn in ("sdpa", "flash_attention_2"):
            for phase, objective in (("phase1", "clm"), ("decay", "mlm")):
                label = f"{phase} {objective.upper()} {attn}"
                if attn == "flash_attention_2" and not fa2:
                    rows.append({"metric": label, "tokens_per_s": None, "mfu": None, "notes": "not measured: flash_attn not installed"})
                    print(f"{label}: not measured (flash_attn not installed)", flush=True)
                    continue
                section = paper_section(
                    phase, seq_len=seq_len, global_batch_sequences=batch, micro_batch_sequences=batch,
                    tokens=steps * batch * seq_len, warmup_tokens=batch * seq_len, log_interval_steps=1,
                    valid_sequences=1, progress_bar=False, checkpoint_interval="100000ba", keep_checkpoints=1,
                    attn_implementation=attn, load_optimizer_state=False)
                rates, logged = [], []
                for _ in range(repeats):
                    rate, lines = run_ours(root / "model", corpus, section, root, skip)
                    rates.append(rate)
                    logged += [l["mfu"] for l in lines[skip + 1:] if "mfu" in l]
                fpt = model_flops_per_token(cfg, seq_len, 1.0 if objective == "clm" else section["masking_rate"])
                tps = statistics.median(rates)
                row = {"metric": label, "tokens_per_s": tps, "tokens_per_s_range": [min(rates), max(rates)],
                       "flops_per_token": fpt, "mfu": tps * fpt / peak if peak else None,
                       "mfu_logged_median": statistics.median(logged) if logged else None, "repeats": repeats}
                if a.reference and attn == "sdpa":
                    ref = measure_reference(root / "model", corpus, section, root, skip)
                    row.update(reference_tokens_per_s=ref, ratio_vs_transformers_trainer=tps / ref)
                rows.append(row)
                mfu_txt = f"{row['mfu']:.1%}" if row["mfu"] is not None else "n/a"
                print(f"{label}: {tps:,.0f} tokens/s, MFU {mfu_txt}", flush=True)
                leave_distributed()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {"date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), "dry": a.dry,
              "device": torch.cuda.get_device_name() if on_gpu else "cpu", "peak_flops": peak_flops() if on_gpu else None,
              "model": sizes, "seq_len": seq_len, "batch_sequences": batch, "steps": steps, "warmup_steps_skipped": skip,
              "precision": "amp_bf16" if on_gpu else "fp32", "torch": torch.__version__, "rows": rows}
    out = a.out or REPO / "benchmarks" / "results" / ("gpu-dry.json" if a.dry else "gpu.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, result)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
