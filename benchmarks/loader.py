"""Benchmark 8: what one data-loader process delivers from the compact packed corpus (issue 40 item 4).

Builds packed rows of 8,192 tokens in the corpus contract (ids as ``uint16``, ``n_tokens``, no stored
attention mask: :mod:`clmdetour.corpus.pack`), saves them with ``datasets``, memory-maps them back as
a phase does (``load_from_disk(...).with_format("numpy")``) and times the phase's own path: the
:class:`clmdetour.training.data.PackedStream` row lookup and the MLM collator (masking included) in
one process, ``torch.utils.data.DataLoader(num_workers=0)``. Goal: at least 10x what one H100 reads at
280,000 tokens/s (34 rows of 8,192 a second, docs/performance.md), i.e. 340 rows a second.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.common import Row, median_range

SEQ_LEN = 8192
H100_TOKENS_PER_S = 280_000  # one H100 at the paper's recipe (docs/performance.md)
GOAL_FACTOR = 10


def build_rows(out: Path, n_rows: int, vocab_size: int = 32_768, seed: int = 0) -> Path:
    """``n_rows`` packed rows of random ids (the last one part-filled) saved at ``out``; returns ``out``."""
    import datasets
    import numpy as np

    from clmdetour.corpus.pack import pack_batch, packed_features, token_dtype

    rng = np.random.default_rng(seed)
    docs = [rng.integers(5, vocab_size, int(n)).tolist() for n in rng.integers(200, 3000, n_rows * SEQ_LEN // 1500)]
    dtype = token_dtype(vocab_size)
    rows = pack_batch({"input_ids": docs}, SEQ_LEN, 0, dtype)
    ds = datasets.Dataset.from_dict({k: rows[k][:n_rows] for k in ("input_ids", "n_tokens")},
                                    features=packed_features(SEQ_LEN, dtype))
    ds.save_to_disk(str(out))
    return out


def rows_per_second(folder: Path, batch: int, n_batches: int) -> float:
    """Rows a second through PackedStream + the MLM collator in one process (``n_batches`` of ``batch``)."""
    import datasets
    import torch
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from clmdetour.training.collators import MLMCollator
    from clmdetour.training.data import PackedStream

    rows = datasets.load_from_disk(str(folder)).with_format("numpy")
    vocab = {f"t{i}": i for i in range(32_768)}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t4")),
                                  pad_token="t0", cls_token="t1", sep_token="t2", mask_token="t3", unk_token="t4")
    stream = PackedStream(rows, 0, batch * n_batches)
    loader = torch.utils.data.DataLoader(stream, batch_size=batch, collate_fn=MLMCollator(tok, 0.15, seed=0), num_workers=0)
    start = time.perf_counter()
    n = 0
    for b in loader:
        n += b["input_ids"].shape[0]
    return n / (time.perf_counter() - start)


def run(workdir: Path, quick: bool = False, log=print) -> list[Row]:
    """Median rows/s over repeats against the goal (10 x one H100's 34 rows/s)."""
    folder = build_rows(Path(workdir) / "loader_rows", 64 if quick else 256)
    repeats = 2 if quick else 3
    rates = [rows_per_second(folder, 8, 4 if quick else 16) for _ in range(repeats)]
    med, rng = median_range(rates)
    need = GOAL_FACTOR * H100_TOKENS_PER_S / SEQ_LEN
    log(f"loader: {med:.0f} rows/s of {SEQ_LEN} tokens (goal {need:.0f})")
    return [Row(benchmark="8 corpus loader", metric=f"rows/s of {SEQ_LEN} tokens, one process (PackedStream + MLM collator)",
                unit="rows/s", ours=med, reference=need, ratio=med / need,
                ratio_meaning=f"ours / {GOAL_FACTOR}x one H100's {H100_TOKENS_PER_S:,} tokens/s",
                goal=f">= {GOAL_FACTOR}x one H100 ({need:.0f} rows/s)", goal_met=med >= need, repeats=repeats,
                ours_range=rng, notes="uint16 ids, attention mask rebuilt from n_tokens; 15 % MLM masking included")]
