"""Fixtures for the release tests: a tiny final model and the records a card cites.

The model is a ModernBertForMaskedLM with non-default RoPE bases and a
global-attention period of 2, so a loader that ignored the staged legacy keys
(transformers 4.48 falls back to 160000 / 10000 / 3) would give other logits.
Its tokenizer is a byte-level BPE trained here with ``tokenizers`` and saved by
``PreTrainedTokenizerFast`` with the installed transformers. The records are
small fake ``run.json`` / manifest / evaluation-table files with distinctive
numbers, so a card test can find each number it reads.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
from helpers import tiny_modernbert_config

SPECIALS = ["[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]"]
# the ids of SPECIALS in a model's config ([CLS] doubling as bos, [SEP] as eos)
SPECIAL_IDS = {"pad_token_id": 2, "cls_token_id": 0, "sep_token_id": 1, "bos_token_id": 0, "eos_token_id": 1}
GLOBAL_THETA, LOCAL_THETA, GLOBAL_EVERY = 40_000.0, 5_000.0, 2
TASKS = {"emea": {"type": "ner", "metric": "seqeval_f1"},
         "fracco-30": {"type": "multilabel", "metric": "macro_f1"}}


def french_texts(n: int = 300, seed: int = 0) -> list[str]:
    """Generated French clinical case reports (``clmdetour.demo.generator``)."""
    from clmdetour.demo.generator import generate_case

    rng = random.Random(seed)
    return [generate_case(rng).text for _ in range(n)]


def build_model(out_dir: Path, seed: int = 0) -> Path:
    """Save a tiny ModernBertForMaskedLM + byte-level BPE tokenizer into ``out_dir``; returns it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import ModernBertForMaskedLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(french_texts(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 0), ("[SEP]", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                                   mask_token="[MASK]", unk_token="[UNK]", model_max_length=8192)
    config = tiny_modernbert_config(len(fast), hidden_size=64, num_hidden_layers=3, global_attn_every_n_layers=GLOBAL_EVERY,
                                    global_rope_theta=GLOBAL_THETA, local_rope_theta=LOCAL_THETA, initializer_range=0.3,
                                    **SPECIAL_IDS)
    torch.manual_seed(seed)
    model = ModernBertForMaskedLM(config).eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    fast.save_pretrained(out_dir)
    return out_dir


def run_record(phase: str, objective: str, tokens: int, wall_time_s: float, frozen: list[str],
               trainable: int) -> dict:
    """A fake ``run.json`` with the keys of the phase-record contract."""
    section = {"optimizer": {"betas": [0.9, 0.98], "eps": 1e-6, "weight_decay": 1e-5},
               "lr": 7.5e-4, "warmup_tokens": 12_345 if phase == "phase1" else 0, "final_lr_fraction": 0.1,
               "masking_rate": 0.3 if phase == "decay" else 0.15, "precision": "fp32", "tokens": tokens}
    return {"variant": "clm-detour", "phase": phase, "objective": objective,
            "attention": {"implementation": "sdpa", "causal": objective == "clm"},
            "tokens": tokens, "real_tokens": tokens * 9 // 10, "frozen_parameters": frozen, "trainable_parameters": trainable,
            "world_size": 3, "device": {"type": "gpu", "count": 3, "name": "NVIDIA H100 80GB HBM3"},
            "global_batch_sequences": 48, "micro_batch_sequences": 4, "grad_accum": 4, "seq_len": 1024,
            "precision": "amp_bf16", "wall_time_s": wall_time_s,
            "versions": {"torch": "2.14.1", "transformers": "5.24.0", "composer": "0.32.1"},
            "git_sha": "abc123def4567890", "section": section}


def write_records(root: Path, eval_rows: dict[str, dict] | None = None, licences: dict[str, str] | None = None) -> dict:
    """Write phase records, a corpus manifest and an evaluation table under ``root``; returns their paths."""
    root.mkdir(parents=True, exist_ok=True)
    p1 = run_record("phase1", "clm", 1_234_567, 7_380.0,
                    ["model.layers.0.attn.Wqkv.weight", "model.layers.1.mlp.Wi.weight"], 98_765)
    dec = run_record("decay", "mlm", 456_789, 1_800.0, [], 111_222)
    (root / "phase1.json").write_text(json.dumps(p1))
    (root / "decay.json").write_text(json.dumps(dec))
    licences = licences or {"clinical_cases": "CC-BY-4.0", "scientific_articles": "CC0-1.0", "drug_leaflets": "MIT"}
    sources = {name: {"documents_train": 1000 + 17 * i, "documents_valid": 50, "tokens_train": 300_001 + 50_000 * i,
                      "tokens_valid": 9_999, "epochs": 1.25 + i, "licence": lic}
               for i, (name, lic) in enumerate(licences.items())}
    (root / "manifest.json").write_text(json.dumps({"sources": sources, "packing_efficiency": 0.97}))
    rows = eval_rows if eval_rows is not None else default_eval_rows()
    table = pd.DataFrame([{"model": m, **cells} for m, cells in rows.items()])
    table.to_csv(root / "eval_table.tsv", sep="\t", index=False)
    return {"phase1": root / "phase1.json", "decay": root / "decay.json", "manifest": root / "manifest.json",
            "eval_table": root / "eval_table.tsv"}


def default_eval_rows() -> dict[str, dict]:
    """Evaluation rows for ``clm-detour``, ``mlm-baseline``, a reference model and the ``trivial`` row
    (as clmdetour.evaluation.table writes them: every cell of the model rows filled, the trivial row only its means)."""
    def row(e_mean, f_mean, e_delta, f_delta, wins, sign_p):
        return {"emea_mean": e_mean, "emea_std": 0.0123, "emea_n": 3, "emea_delta": e_delta, "emea_p_welch": 0.0412,
                "emea_p_paired": 0.0213, "emea_trivial": 0.0, "emea_mdd": 0.0371,
                "fracco-30_mean": f_mean, "fracco-30_std": 0.0051, "fracco-30_n": 3, "fracco-30_delta": f_delta,
                "fracco-30_p_welch": 0.2718, "fracco-30_p_paired": float("nan"), "fracco-30_trivial": 0.389,
                "fracco-30_mdd": float("nan"), "macro_avg": (e_mean + f_mean) / 2, "sign_wins": wins, "sign_ties": 0,
                "sign_p": sign_p, "sign_groups_wins": wins, "sign_groups_ties": 0, "sign_groups_p": sign_p}
    return {"clm-detour": row(0.8437, 0.6123, 0.0211, 0.0087, 2, 0.25),
            "mlm-baseline": row(0.8226, 0.6036, 0.0, 0.0, 0, 1.0),
            "camembert-bio": row(0.7911, 0.5522, -0.0315, -0.0514, 0, 1.0),
            "trivial": {"emea_mean": 0.0, "fracco-30_mean": 0.389}}


# the evaluation keys staging reads, as the schema fills them (workflow/schemas/tasks.schema.yaml)
EVALUATION = {"allow_missing": False, "baseline": "mlm-baseline"}


def stage_kwargs(records: dict, model_dir: Path, out_dir: Path, **over) -> dict:
    """Keyword arguments of ``stage_release`` for the fixtures (override any with ``over``)."""
    kwargs = {
        "model_dir": model_dir,
        "phase_runs": [("phase1", records["phase1"], "clm-detour"), ("decay", records["decay"], "clm-detour")],
        "manifest": records["manifest"], "eval_table": records["eval_table"], "out_dir": out_dir,
        "release": {"licence": "mit", "licence_reason": None, "language": ["fr"], "private": True,
                 "tags": ["modernbert", "biomedical", "french"], "datasets": [], "citation": None,
                 "repo_ids": {}, "repo_template": None},
        "tasks": dict(TASKS), "evaluation": dict(EVALUATION), "base_model": {"key": "demo-base", "hub_id": None},
        "description": "CLM detour then MLM decay",
        "reference_models": {"camembert-bio": {"hub_id": "almanach/camembert-bio-base"}}}
    if over.get("evaluation") is not None:
        over = dict(over, evaluation={**EVALUATION, **over["evaluation"]})
    kwargs.update(over)
    return kwargs
