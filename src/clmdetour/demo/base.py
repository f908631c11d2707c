"""The demo's base model: tokenizer + tiny ModernBERT + brief MLM pretraining.

Continued pretraining must start from a trained encoder, as in the paper, not
from noise: ``build_base`` trains a byte-level BPE tokenizer on held-apart
demo documents, initialises a tiny ModernBERT, packs the same documents and
pretrains it with MLM through the same engine as every phase
(``clmdetour.training.phase.run_phase``). The result is a plain HF folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from clmdetour.io import atomic_output_dir

# The ``base_model.build`` keys the untrained initialisation depends on (tokenizer, architecture, seed):
# the ``base_init`` rule's params, so that changing the pretraining budget or lr rebuilds neither the
# tokenizer nor what is tokenised with it.
INIT_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "global_attn_every_n_layers",
             "local_attention", "max_position_embeddings", "seed")


def init_build(build: dict, num_layers: int) -> dict:
    """The part of ``base_model.build`` (plus ``num_layers``) that :func:`init_model_dir` reads."""
    return dict({k: build[k] for k in INIT_KEYS}, num_layers=num_layers)


def read_texts(base_corpus: str | Path) -> list[str]:
    """The ``text`` field of every line of a JSONL file (the base model's documents)."""
    return [json.loads(line)["text"] for line in Path(base_corpus).read_text(encoding="utf-8").splitlines()
            if line.strip()]


def tiny_modernbert_config(build: dict, tokenizer):
    """A ModernBertConfig from the demo's ``base_model.build`` section and the tokenizer's special ids.

    Sequence classification pools by the mean over non-padding tokens
    (``classifier_pooling="mean"``, the value in answerdotai/ModernBERT-base's
    config). With the [CLS] pooling of transformers' default, the tiny models
    fine-tuned on the 200-example demo classification tasks kept predicting
    one class (measured: MedDialog macro F1 0.03 with [CLS], 0.65 with mean, for
    the untrained model after 3 epochs).
    """
    from transformers import ModernBertConfig

    return ModernBertConfig(
        vocab_size=len(tokenizer), hidden_size=build["hidden_size"], intermediate_size=build["intermediate_size"],
        num_hidden_layers=build["num_layers"], num_attention_heads=build["num_attention_heads"],
        global_attn_every_n_layers=build["global_attn_every_n_layers"], local_attention=build["local_attention"],
        max_position_embeddings=build["max_position_embeddings"], pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id, cls_token_id=tokenizer.cls_token_id,
        sep_token_id=tokenizer.sep_token_id, mask_token_id=tokenizer.mask_token_id, tie_word_embeddings=True,
        classifier_pooling="mean")


def init_model_dir(build: dict, texts: list[str], out_dir: str | Path) -> None:
    """Train the tokenizer, initialise the model with ``build['seed']`` and save both (HF folder)."""
    import torch
    from transformers import ModernBertForMaskedLM

    from clmdetour.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(texts, build["vocab_size"])
    tokenizer.model_max_length = build["max_position_embeddings"]
    torch.manual_seed(build["seed"])
    model = ModernBertForMaskedLM(tiny_modernbert_config(build, tokenizer))
    with atomic_output_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)


def build_base(build: dict, num_layers: int, base_corpus: str, corpus_cfg: dict, section: dict,
               out_dir: str, work_dir: str, checkpoint_root: str, init_dir: str | None = None) -> dict:
    """Build and pretrain the demo base model into ``{out_dir}/model`` (+ run.json, train_log.jsonl).

    Args:
        build: ``base_model.build`` config (architecture, ``pretrain_tokens``, ``lr``, ``warmup_tokens``, ``seed``).
        num_layers: ``base_model.num_layers`` (the model depth).
        base_corpus: JSONL of held-apart demo documents (field ``text``).
        corpus_cfg: the validated ``corpus`` section (sequence length, cleaning, packing settings).
        section: the resolved MLM training section (:func:`clmdetour.config.base_build_section`).
        out_dir, work_dir, checkpoint_root: output, scratch and checkpoint folders.
        init_dir: the untrained initialisation already written by :func:`init_model_dir` from the same
            ``build`` and texts (the ``base_init`` rule); None = write it here first.

    Returns:
        The run record of the MLM pretraining.
    """
    from clmdetour.corpus.prepare import prepare_corpus
    from clmdetour.corpus.scratch import job_scratch
    from clmdetour.training.phase import run_phase

    work = Path(work_dir)
    if init_dir is None:
        init_dir = work / "init"
        init_model_dir(dict(build, num_layers=num_layers), read_texts(base_corpus), init_dir)
    cfg = dict(corpus_cfg, sources=[{"name": "base", "format": "jsonl", "path": str(base_corpus), "text_field": "text",
                                      "weight": 1.0, "licence": "CC0-1.0", "max_epochs": None}],
               train_tokens=None, decontaminate_against=[], held_apart_fraction=0)
    with job_scratch(checkpoint_root, "build_base"):  # datasets' caches in the run's scratch, not under $HOME
        prepare_corpus(cfg, str(init_dir), str(work / "corpus"), root=".")
    record = run_phase(input_model=str(init_dir), corpus_dir=str(work / "corpus"), output_dir=out_dir,
                       section=section, variant="base", checkpoint_root=checkpoint_root, allow_repeat=True)
    shutil.rmtree(work / "corpus", ignore_errors=True)
    return record
