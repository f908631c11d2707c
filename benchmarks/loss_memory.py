"""Benchmark 3: peak memory of the CLM loss at sequence 8,192, batch 1, vocabulary 32,768.

Three cases, each in a fresh Python process (``python -m benchmarks.loss_memory --case ...``):

* ``clm_chunked``: this project's CLM step, what
  :class:`clmdetour.training.composer_model.PretrainingModel` runs (causal
  encoder, next-token labels on every position,
  :func:`clmdetour.modeling.loss.chunked_lm_loss` through the MLM head in
  chunks of ``loss_chunk_tokens`` under activation checkpointing), called
  without importing Composer so that each fresh process starts faster;
* ``clm_unchunked``: the same step with full-sequence logits
  (:func:`clmdetour.modeling.loss.unchunked_lm_loss`), printed for scale;
* ``mlm_sparse`` (the reference): transformers' ``ModernBertForMaskedLM``
  forward with ``sparse_prediction=True`` and 15 % of positions masked (only
  those go through the head).

Memory of a step = forward + backward (parameter gradients included) =
peak resident set size during the step (``VmHWM``, reset through
``/proc/self/clear_refs`` just before) minus the resident size just before
it. One warm-up step on a short sequence runs first so that one-off
allocations (thread pools, kernel workspaces) are not counted. The process
runs with ``MALLOC_MMAP_THRESHOLD_=65536`` so that glibc maps every large
buffer and returns it when freed, which makes RSS follow the live tensors.
The model is small in depth and width (the logits, which this benchmark is
about, depend only on positions x vocabulary); its one layer is a global
attention layer.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import REPO, Row, median_range

GOAL = 1.2
CASES = ("mlm_sparse", "clm_chunked", "clm_unchunked")


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field} line (Linux only)")


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter (``VmHWM``) of this process; False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def trim_heap() -> None:
    """Give freed heap pages back to the OS (glibc ``malloc_trim(0)``), so the baseline RSS is the live set."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def measure_case(case: str, seq_len: int, vocab_size: int, hidden: int, chunk_tokens: int, seed: int = 0) -> dict:
    """Run one step of ``case`` in this process and return its memory (bytes) and time (s).

    Returns:
        ``{"case", "step_peak_bytes", "baseline_bytes", "loss", "step_s", "peak_reset"}``.

    Raises:
        ValueError: unknown ``case``.
    """
    import torch
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    from clmdetour.modeling.causal import forward_encoder
    from clmdetour.modeling.loss import chunked_lm_loss, unchunked_lm_loss
    from clmdetour.training.collators import clm_labels

    if case not in CASES:
        raise ValueError(f"case must be one of {CASES}, got {case!r}")
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    torch.manual_seed(seed)
    cfg = ModernBertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=1,
                           num_attention_heads=max(1, hidden // 64), intermediate_size=hidden * 3 // 2,
                           global_attn_every_n_layers=1, max_position_embeddings=seq_len,
                           pad_token_id=3, cls_token_id=1, sep_token_id=2, bos_token_id=1, eos_token_id=2,
                           sparse_prediction=case == "mlm_sparse", attn_implementation="sdpa")
    model = ModernBertForMaskedLM(cfg)
    model.train()

    def project(h):
        return model.decoder(model.head(h))  # = PretrainingModel.project

    def batch(n: int):
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(5, vocab_size, (1, n), generator=g)
        mask = torch.ones_like(ids)
        if case == "mlm_sparse":
            chosen = torch.rand((1, n), generator=g) < 0.15
            labels = torch.where(chosen, ids, torch.full_like(ids, -100))
            ids = torch.where(chosen, torch.full_like(ids, 4), ids)
        else:
            labels = clm_labels(ids, mask, cfg.sep_token_id)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    def step(b) -> float:
        if case == "mlm_sparse":
            loss = model(**b).loss
        else:
            hidden_states = forward_encoder(model, b["input_ids"], b["attention_mask"], causal=True).last_hidden_state
            if case == "clm_chunked":
                loss = chunked_lm_loss(hidden_states, b["labels"], project, chunk_tokens)
            else:
                loss = unchunked_lm_loss(hidden_states, b["labels"], project)
        loss.backward()
        value = float(loss.detach())
        del loss
        return value

    step(batch(128))  # warm-up: one-off allocations are not the step's
    model.zero_grad(set_to_none=True)
    b = batch(seq_len)
    trim_heap()
    reset = reset_peak_rss()
    base = _status_kib("VmRSS")
    t0 = time.perf_counter()
    loss = step(b)
    dt = time.perf_counter() - t0
    peak = _status_kib("VmHWM")
    return {"case": case, "step_peak_bytes": (peak - base) * 1024, "baseline_bytes": base * 1024, "loss": loss,
            "step_s": dt, "peak_reset": reset}


def run_cases_subprocess(cases: list[str], seq_len: int, vocab_size: int, hidden: int, chunk_tokens: int,
                         threads: int = 1, timeout_s: float = 600) -> dict[str, dict]:
    """:func:`measure_case` of each case in its own fresh interpreter, the processes running side by side.

    Peak RSS is per process, so concurrent cases do not disturb each other's
    memory figure (only their time).

    Raises:
        RuntimeError: a subprocess failed (its stderr tail is in the message).
    """
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", BENCH_THREADS=str(threads), PYTHONPATH=str(REPO))
    procs = {}
    for case in cases:
        cmd = [sys.executable, "-m", "benchmarks.loss_memory", "--case", case, "--seq-len", str(seq_len),
               "--vocab-size", str(vocab_size), "--hidden", str(hidden), "--chunk-tokens", str(chunk_tokens)]
        procs[case] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    out = {}
    for case, p in procs.items():
        stdout, stderr = p.communicate(timeout=timeout_s)
        if p.returncode != 0:
            raise RuntimeError(f"loss-memory case {case} failed (exit {p.returncode}): {stderr.strip()[-800:]}")
        out[case] = json.loads(stdout.strip().splitlines()[-1])
    return out


def run(workdir: Path, quick: bool = False, log=print) -> list[Row]:
    """Chunked CLM vs sparse MLM in ``repeats`` pairs of fresh processes, and unchunked CLM once."""
    from benchmarks.throughput import paper_section

    chunk = paper_section("phase1")["loss_chunk_tokens"]
    seq_len, vocab, hidden, repeats = (2048, 32768, 128, 1) if quick else (8192, 32768, 128, 2)
    res: dict[str, list[dict]] = {c: [] for c in CASES}
    for r in range(repeats):
        cases = ["mlm_sparse", "clm_chunked"] + (["clm_unchunked"] if r == 0 else [])
        for case, out in run_cases_subprocess(cases, seq_len, vocab, hidden, chunk).items():
            res[case].append(out)
            log(f"  {case} repeat {r + 1}/{repeats}: {out['step_peak_bytes'] / 2**20:.0f} MiB over the baseline "
                f"({out['step_s']:.1f} s)")
    mib = {c: [o["step_peak_bytes"] / 2**20 for o in v] for c, v in res.items()}
    chunked, chunked_range = median_range(mib["clm_chunked"])
    mlm, mlm_range = median_range(mib["mlm_sparse"])
    unchunked, unchunked_range = median_range(mib["clm_unchunked"])
    ratios = [c / m for c, m in zip(mib["clm_chunked"], mib["mlm_sparse"])]
    ratio, rr = median_range(ratios)
    logits_mib = seq_len * vocab * 4 / 2**20
    details = {"seq_len": seq_len, "batch": 1, "vocab_size": vocab, "hidden_size": hidden, "layers": 1,
               "loss_chunk_tokens": chunk, "fp32_full_logits_mib": logits_mib,
               "clm_unchunked_mib": unchunked, "clm_unchunked_range_mib": unchunked_range,
               "clm_unchunked_vs_mlm": unchunked / mlm,
               "step_s_concurrent": {c: median_range([o["step_s"] for o in v])[0] for c, v in res.items()},
               "losses": {c: v[0]["loss"] for c, v in res.items()}, "clm_unchunked_repeats": len(res["clm_unchunked"]),
               "peak_counter_reset": all(o["peak_reset"] for v in res.values() for o in v)}
    note = (f"unchunked CLM: {unchunked:.0f} MiB ({unchunked / mlm:.2f}x MLM); full fp32 logits alone are "
            f"{logits_mib:.0f} MiB")
    return [Row(benchmark="3 CLM loss memory", metric=f"CLM step peak memory (seq {seq_len}, vocab {vocab})",
                unit="MiB", ours=chunked, reference=mlm, ratio=ratio,
                ratio_meaning="chunked CLM / sparse-prediction MLM (lower is better)", goal=f"<= {GOAL}",
                goal_met=ratio <= GOAL, repeats=repeats, ratio_range=rr, ours_range=chunked_range,
                reference_range=mlm_range, notes=note, details=details)]


def main(argv: list[str] | None = None) -> None:
    """Subprocess entry: print one JSON line with the case's memory and time."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=CASES, required=True)
    p.add_argument("--seq-len", type=int, default=8192)
    p.add_argument("--vocab-size", type=int, default=32768)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--chunk-tokens", type=int, default=2048)
    a = p.parse_args(argv)
    print(json.dumps(measure_case(a.case, a.seq_len, a.vocab_size, a.hidden, a.chunk_tokens)))


if __name__ == "__main__":
    main()
