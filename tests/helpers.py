"""Test helpers shared by the test files (``from helpers import ...``; conftest.py keeps fixtures and hooks only).

- :data:`REPO`, :data:`SHARED_DATA`: the checkout and the real data folder beside it.
- :func:`clean_env`: the environment a user's shell gives ``.venv/bin/snakemake`` (no virtualenv on ``PATH``).
- :func:`tiny_phase1_section`: a packed corpus and the demo's resolved phase-1 section for the tiny model.
- :func:`train_tokenizer`: the project's byte-level BPE tokenizer (no continuing-subword prefix) with
  BERT-style ``[CLS] x [SEP]`` special tokens, trained on given texts.
- :func:`tiny_modernbert_config`: the one builder of tiny ``ModernBertConfig`` objects in the tests.
- :func:`tiny_modernbert`: an untrained ``ModernBertForMaskedLM`` of a few thousand parameters saved
  as an HF folder with its tokenizer.

Only the standard library is imported at module level: a test's fresh interpreter may import this
module and still check which packages a code path loads.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# tiny_modernbert_config's defaults (intermediate_size: twice hidden_size unless given); the special-token ids
# are those of a vocabulary opening with [PAD] [CLS] [SEP] ([CLS] doubling as bos, [SEP] as eos). No
# global_attn_every_n_layers: ModernBertConfig's own pattern (a global layer every 3) unless a caller sets it, as
# transformers keeps a given global_attn_every_n_layers in the config's dict (config.json) beside layer_types
TINY_MODERNBERT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "local_attention": 16,
                   "max_position_embeddings": 256,
                   "pad_token_id": 0, "cls_token_id": 1, "sep_token_id": 2, "bos_token_id": 1, "eos_token_id": 2}


def clean_env() -> dict:
    """This environment with the virtualenv taken off ``PATH`` (and ``VIRTUAL_ENV`` unset).

    A user types ``.venv/bin/snakemake ...`` in a shell where no virtualenv is
    activated: every rule must then run with Snakemake's own interpreter, never a
    ``python`` or ``composer`` found on ``PATH``. Workflow tests run that way so
    that a rule calling either from ``PATH`` fails here too.
    """
    env = dict(os.environ)
    venv_bins = {str(Path(sys.executable).parent), str(Path(sys.prefix) / "bin")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p not in venv_bins)
    env.pop("VIRTUAL_ENV", None)
    return env


def tiny_phase1_section(tmp: Path, tiny_model_dir: Path, texts: list[str], seq_len: int = 64) -> dict:
    """Pack ``texts`` into ``tmp/corpus`` with the tiny model's tokenizer; return the demo's resolved
    ``clm-detour`` phase-1 section at ``seq_len`` tokens (the caller sets steps, batch and checkpoints)."""
    import json

    from clmdetour.config import deep_merge, load_yaml, resolve_phase, validate_config
    from clmdetour.corpus.prepare import prepare_corpus

    src = tmp / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    cfg = validate_config(deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml")))
    corpus = dict(cfg["corpus"], sources=[{"name": "d", "format": "jsonl", "path": str(src), "weight": 1.0,
                                           "licence": "x", "text_field": "text"}],
                  seq_len=seq_len, train_tokens=None, num_proc=1)
    prepare_corpus(corpus, str(tiny_model_dir), str(tmp / "corpus"))
    cfg["corpus"]["seq_len"] = seq_len
    return resolve_phase(cfg, "clm-detour", "phase1")


def train_tokenizer(texts: list[str], vocab_size: int = 600):
    """The project's byte-level BPE tokenizer (:func:`clmdetour.tokenizer.train_tokenizer`) on ``texts``, 256-token limit."""
    from clmdetour.tokenizer import train_tokenizer as train

    tok = train(texts, vocab_size)
    tok.model_max_length = 256
    return tok


def token_ids(tokenizer) -> dict:
    """A ModernBERT config's special-token ids from ``tokenizer`` ([CLS] doubles as bos, [SEP] as eos)."""
    return {"pad_token_id": tokenizer.pad_token_id, "cls_token_id": tokenizer.cls_token_id,
            "sep_token_id": tokenizer.sep_token_id, "bos_token_id": tokenizer.cls_token_id,
            "eos_token_id": tokenizer.sep_token_id}


def tiny_modernbert_config(vocab_size: int, **overrides):
    """A ``ModernBertConfig`` of ``vocab_size`` tokens: :data:`TINY_MODERNBERT` with ``overrides`` applied,
    ``intermediate_size`` twice ``hidden_size`` unless given, ``global_attn_every_n_layers`` ModernBertConfig's
    unless given. Any other ``ModernBertConfig`` argument (``initializer_range``, RoPE bases,
    ``attn_implementation``) passes through."""
    from transformers import ModernBertConfig

    kwargs = dict(TINY_MODERNBERT, **overrides)
    kwargs.setdefault("intermediate_size", 2 * kwargs["hidden_size"])
    return ModernBertConfig(vocab_size=vocab_size, **kwargs)


def tiny_modernbert(tokenizer, out_dir: str | Path, seed: int = 0, hidden_size: int = 32, num_layers: int = 2,
                    max_position_embeddings: int = 256) -> Path:
    """Save an untrained tiny ``ModernBertForMaskedLM`` + ``tokenizer`` to ``out_dir``; returns the folder."""
    import torch
    from transformers import ModernBertForMaskedLM

    torch.manual_seed(seed)
    cfg = tiny_modernbert_config(len(tokenizer), hidden_size=hidden_size, num_hidden_layers=num_layers,
                                 global_attn_every_n_layers=2, max_position_embeddings=max_position_embeddings,
                                 **token_ids(tokenizer))
    out_dir = Path(out_dir)
    ModernBertForMaskedLM(cfg).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def write_json_arrays(folder, parts: dict) -> None:
    """Write each split's rows as one JSON array, ``folder/{split}.json`` (an exam file's form)."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in parts.items():
        (folder / f"{split}.json").write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")


def mc_spec(path, **over) -> dict:
    """A multiple-choice task spec over :func:`write_json_arrays`' files (``over``: keys replaced or added)."""
    return {"type": "multiple_choice", "source": "jsonl", "path": str(path), "text_field": "question",
            "options_field": "options", "label_field": "correct_answers", "id_field": "id",
            "splits": {"train": "train.json", "dev": "dev.json", "test": "test.json"}, **over}


def jobs(out: str) -> dict[str, int]:
    """Job counts from the 'Job stats' table of a dry-run."""
    counts, inside = {}, False
    for line in out.splitlines():
        if line.startswith("job ") and "count" in line:
            inside = True
            continue
        if inside:
            parts = line.split()
            if not parts or parts[0] == "total":
                break
            if len(parts) == 2 and parts[1].isdigit():
                counts[parts[0]] = int(parts[1])
    return counts
