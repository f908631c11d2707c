"""Benchmarks 2 and 5: packing efficiency and corpus-preparation throughput on the real corpus.

5. :func:`clmdetour.corpus.prepare.prepare_corpus` (batched, multi-process
   ``datasets.map`` for cleaning, tokenising and packing) on the real French
   files in ``../shared/data/pretrain`` at the paper's sequence length (8,192),
   with ``num_proc=2`` vs ``num_proc=1``. Each run is a fresh Python process
   with its own empty ``HF_DATASETS_CACHE`` (so neither the JSON-to-Arrow
   conversion nor any ``map`` is served from a cache); the figure is MB of
   document text (UTF-8 bytes of the ``text`` fields) per second of
   ``prepare_corpus`` wall time (process start-up not counted). Repeats
   alternate 2 / 1.
2. The packing efficiency of the same run (non-padding fraction of all
   packed training rows, from its manifest) vs per-document padding (each
   document alone in ``ceil(length / 8,192)`` rows, the rest padding), over
   the real documents after the pipeline's cleaning and length filter,
   tokenised with the same tokenizer.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, Row, bench_tokenizer, median_range, paired_ratio, pretrain_files

SPEEDUP_GOAL = 1.7
PACKING_GOAL = 0.99


def corpus_section(files: list[Path], seq_len: int, num_proc: int) -> dict:
    """The validated paper ``corpus`` section with the real files as ``jsonl`` sources (each once, no decontamination)."""
    from clmdetour.config import load_yaml, validate_config

    config = load_yaml(REPO / "config" / "config.yaml")
    config["corpus"]["sources"] = [
        {"name": p.stem, "format": "jsonl", "path": str(p), "text_field": "text", "weight": 1.0, "licence": "unknown"}
        for p in files]
    config["corpus"].update(train_tokens=None, seq_len=seq_len, num_proc=num_proc, decontaminate_against=[])
    return validate_config(config)["corpus"]


def text_megabytes(files: list[Path]) -> float:
    """UTF-8 size of the ``text`` fields of ``files`` (MB = 1e6 bytes)."""
    total = 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    total += len(json.loads(line)["text"].encode("utf-8"))
    return total / 1e6


def run_prepare_subprocess(files: list[Path], tokenizer_dir: Path, num_proc: int, seq_len: int, scratch: Path,
                           timeout_s: float = 900) -> dict:
    """``prepare_corpus`` in a fresh process with an empty datasets cache; returns ``{"seconds", "manifest"}``.

    Raises:
        RuntimeError: the subprocess failed (stderr tail in the message).
    """
    work = Path(tempfile.mkdtemp(dir=scratch, prefix=f"prep{num_proc}-"))
    env = dict(os.environ, HF_DATASETS_CACHE=str(work / "cache"), PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "benchmarks.corpus", "--tokenizer", str(tokenizer_dir), "--num-proc", str(num_proc),
           "--seq-len", str(seq_len), "--out", str(work / "corpus"), *map(str, files)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=REPO, env=env, check=False)
    subprocess.run(["rm", "-rf", str(work)], check=False)
    if r.returncode != 0:
        raise RuntimeError(f"prepare_corpus (num_proc={num_proc}) failed (exit {r.returncode}): {r.stderr.strip()[-800:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def per_document_padding(files: list[Path], tokenizer, cfg: dict) -> dict:
    """Efficiency of padding each document to multiples of ``cfg['seq_len']``.

    Documents go through the pipeline's cleaning, length filter and exact
    deduplication (first occurrence kept, files in order), as in ``prepare_corpus``.

    Returns:
        ``{"documents", "tokens", "rows", "efficiency"}``.
    """
    from clmdetour.corpus.steps import clean_text

    texts, seen = [], set()
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    t = clean_text(json.loads(line)["text"], cfg["unicode_normalization"])
                    if len(t) >= cfg["min_chars"] and len(t.split()) >= cfg["min_words"] and t not in seen:
                        seen.add(t)
                        texts.append(t)
    seq_len = cfg["seq_len"]
    lengths = [len(ids) for i in range(0, len(texts), 256) for ids in tokenizer(texts[i:i + 256])["input_ids"]]
    rows = sum(math.ceil(n / seq_len) for n in lengths)
    return {"documents": len(lengths), "tokens": sum(lengths), "rows": rows, "efficiency": sum(lengths) / (rows * seq_len)}


def run(workdir: Path, quick: bool = False, log=print) -> list[Row]:
    """Rows for benchmark 2 (packing) and 5 (num_proc=2 vs 1)."""
    files = pretrain_files()
    if quick:
        files = [p for p in files if "clinical" in p.name] or files[:1]
    seq_len, repeats = 8192, (1 if quick else 2)
    tokenizer = bench_tokenizer(workdir)
    tok_dir = Path(workdir) / "tokenizer-8192"
    mb = text_megabytes(files)
    two, one, manifests = [], [], []
    for r in range(repeats):
        a = run_prepare_subprocess(files, tok_dir, 2, seq_len, workdir)
        b = run_prepare_subprocess(files, tok_dir, 1, seq_len, workdir)
        two.append(mb / a["seconds"])
        one.append(mb / b["seconds"])
        manifests += [a["manifest"], b["manifest"]]
        log(f"  prepare_corpus repeat {r + 1}/{repeats}: num_proc=2 {two[-1]:.2f} MB/s, num_proc=1 {one[-1]:.2f} MB/s")
    ratio, rr = paired_ratio(two, one)
    o, orange = median_range(two)
    f, frange = median_range(one)
    hashes = {m["hashes"]["train_token_ids"] for m in manifests}
    by_proc = {"num_proc=2": sorted({m["hashes"]["train_token_ids"][:12] for m in manifests[0::2]}),
               "num_proc=1": sorted({m["hashes"]["train_token_ids"][:12] for m in manifests[1::2]})}
    details = {"files": [p.name for p in files], "text_mb": mb, "seq_len": seq_len, "cpu_count": os.cpu_count(),
               "identical_output_across_runs": len(hashes) == 1, "train_token_ids_sha256_prefix": by_proc,
               "packed_rows": {"num_proc=2": manifests[0]["train"]["sequences"],
                               "num_proc=1": manifests[1]["train"]["sequences"]}}
    rows = [Row(benchmark="5 corpus preparation", metric="prepare_corpus throughput, num_proc=2 vs 1", unit="MB/s",
                ours=o, reference=f, ratio=ratio, ratio_meaning="num_proc=2 / num_proc=1 (higher is better)",
                goal=f">= {SPEEDUP_GOAL}", goal_met=ratio >= SPEEDUP_GOAL, repeats=repeats, ratio_range=rr,
                ours_range=orange, reference_range=frange, details=details,
                notes="" if len(hashes) == 1 else "WARNING: the packed token ids differ between runs (see details: "
                "train_token_ids_sha256_prefix per num_proc)")]
    cfg = corpus_section(files, seq_len, 1)
    pad = per_document_padding(files, tokenizer, cfg)
    effs = [m["train"]["packing_efficiency"] for m in manifests]
    eff, eff_range = median_range(effs)
    train = manifests[0]["train"]
    rows.append(Row(
        benchmark="2 packing efficiency", metric=f"non-padding fraction of packed rows (seq {seq_len})", unit="fraction",
        ours=eff, reference=pad["efficiency"], ratio=eff / pad["efficiency"],
        ratio_meaning="packed / per-document padding (higher is better); goal is on the packed fraction",
        goal=f">= {PACKING_GOAL}", goal_met=eff >= PACKING_GOAL, repeats=len(effs), ratio_range=None,
        ours_range=eff_range, reference_range=[pad["efficiency"], pad["efficiency"]],
        details={"packed_rows": train["sequences"], "packed_tokens": train["tokens"], "packed_documents": train["documents"],
                 "padding_rows": pad["rows"], "padding_documents": pad["documents"], "padding_tokens": pad["tokens"]}))
    return rows


def main(argv: list[str] | None = None) -> None:
    """Subprocess entry: time ``prepare_corpus`` and print ``{"seconds", "manifest"}`` as one JSON line."""
    p = argparse.ArgumentParser(description="time prepare_corpus on local JSONL files")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--num-proc", type=int, required=True)
    p.add_argument("--seq-len", type=int, default=8192)
    p.add_argument("--out", required=True)
    p.add_argument("files", nargs="+")
    a = p.parse_args(argv)
    import datasets

    from clmdetour.corpus.prepare import prepare_corpus

    datasets.disable_progress_bars()
    cfg = corpus_section([Path(f) for f in a.files], a.seq_len, a.num_proc)
    t0 = time.perf_counter()
    manifest = prepare_corpus(cfg, a.tokenizer, a.out, eval_texts=None, root="/", num_proc=a.num_proc)
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "manifest": manifest}))


if __name__ == "__main__":
    main()
