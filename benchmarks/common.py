"""Shared pieces of the benchmarks: result rows, repeat statistics, real data, small local models.

Every figure is a median over repeats; a ratio is the median of the per-repeat
ratios of paired (interleaved) measurements, so slow drifts of this shared,
noisy machine hit both sides of a pair alike. Spread is reported as the
min and max of the per-repeat values.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO.parent / "shared" / "data"
PRETRAIN_DIR = DATA_DIR / "pretrain"


class BenchmarkSkipped(RuntimeError):
    """A benchmark cannot run here (missing data or tool); the message says why."""


@dataclass
class Row:
    """One line of the results table.

    ``ours`` and ``reference`` are medians in ``unit``; ``ratio`` is
    ours / reference (or reference / ours for costs, as ``ratio_meaning``
    says); ``ratio_range`` is [min, max] over repeats; ``goal_met`` is None
    where there is no goal or nothing was measured.
    """

    benchmark: str
    metric: str
    unit: str
    ours: float | None
    reference: float | None
    ratio: float | None
    ratio_meaning: str
    goal: str
    goal_met: bool | None
    repeats: int
    ratio_range: list[float] | None = None
    ours_range: list[float] | None = None
    reference_range: list[float] | None = None
    notes: str = ""
    details: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """JSON-ready dict (floats rounded to 4 significant digits)."""
        return _round(asdict(self))


def _round(obj):
    if isinstance(obj, float):
        return float(f"{obj:.4g}")
    if isinstance(obj, dict):
        return {k: _round(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round(v) for v in obj]
    return obj


def median_range(values: list[float]) -> tuple[float, list[float]]:
    """(median, [min, max]) of repeat values.

    Raises:
        ValueError: no values.
    """
    if not values:
        raise ValueError("no repeat values to summarise")
    return statistics.median(values), [min(values), max(values)]


def paired_ratio(ours: list[float], reference: list[float]) -> tuple[float, list[float]]:
    """Median and [min, max] of ``ours[i] / reference[i]`` over interleaved repeats.

    Raises:
        ValueError: lists of different lengths, empty, or a zero reference.
    """
    if len(ours) != len(reference) or not ours:
        raise ValueError(f"paired repeats need equal, non-empty lists (got {len(ours)} and {len(reference)})")
    if any(r == 0 for r in reference):
        raise ValueError("a reference measurement is zero; the ratio is undefined")
    return median_range([o / r for o, r in zip(ours, reference)])


def require(path: Path, what: str) -> Path:
    """``path`` if it exists.

    Raises:
        BenchmarkSkipped: naming ``what`` and the path.
    """
    if not path.exists():
        raise BenchmarkSkipped(f"{what} not found at {path}")
    return path


def pretrain_files() -> list[Path]:
    """The real pretraining JSONL files (``../shared/data/pretrain/*.jsonl``), sorted by name.

    Raises:
        BenchmarkSkipped: the folder or its files are absent.
    """
    files = sorted(require(PRETRAIN_DIR, "real pretraining corpus").glob("*.jsonl"))
    if not files:
        raise BenchmarkSkipped(f"no *.jsonl file in {PRETRAIN_DIR}")
    return files


def pretrain_texts(per_file: int | None = None) -> list[str]:
    """``text`` of the real pretraining documents, file by file in name order.

    Args:
        per_file: keep only the first ``per_file`` documents of each file (None = all).
    """
    texts: list[str] = []
    for path in pretrain_files():
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if per_file is not None and i >= per_file:
                    break
                if line.strip():
                    texts.append(json.loads(line)["text"])
    return texts


def bench_tokenizer(workdir: Path, vocab_size: int = 8192):
    """A byte-level BPE tokenizer trained on the first 300 documents of each real corpus file, saved with a
    ModernBERT config.json (a model folder, as prepare_corpus expects).

    Cached under ``workdir/tokenizer-{vocab_size}`` (training takes a few seconds).
    Uses the project's trainer (:func:`clmdetour.tokenizer.train_tokenizer`).
    """
    from transformers import AutoTokenizer

    from clmdetour.tokenizer import save_tokenizer, train_tokenizer

    out = Path(workdir) / f"tokenizer-{vocab_size}"
    if not (out / "tokenizer.json").exists():
        tok = train_tokenizer(pretrain_texts(per_file=300), vocab_size)
        save_tokenizer(tok, out)
    if not (out / "config.json").exists():  # prepare_corpus reads a model folder (clmdetour.modeling.folders)
        modernbert_config(AutoTokenizer.from_pretrained(str(out))).save_pretrained(out)
    return AutoTokenizer.from_pretrained(str(out))


def modernbert_config(tokenizer=None, vocab_size: int | None = None, **overrides):
    """A ``ModernBertConfig`` whose special token ids match ``tokenizer`` (sizes from ``overrides``)."""
    from transformers import ModernBertConfig

    kw = {"vocab_size": vocab_size or len(tokenizer), "hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 4,
              "intermediate_size": 384, "global_attn_every_n_layers": 3, "local_attention": 64, "max_position_embeddings": 512}
    if tokenizer is not None:
        kw.update(pad_token_id=tokenizer.pad_token_id, cls_token_id=tokenizer.cls_token_id,
                  sep_token_id=tokenizer.sep_token_id, bos_token_id=tokenizer.cls_token_id,
                  eos_token_id=tokenizer.sep_token_id)
    kw.update(overrides)
    return ModernBertConfig(**kw)


def save_model(config, tokenizer, out: Path, seed: int = 0) -> Path:
    """Save a randomly initialised ``ModernBertForMaskedLM`` (+ tokenizer) as an HF folder."""
    import torch
    from transformers import ModernBertForMaskedLM

    torch.manual_seed(seed)
    out = Path(out)
    ModernBertForMaskedLM(config).save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    return out
