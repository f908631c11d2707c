"""Stage a variant's release: ``results/release/{variant}/``.

The staged folder holds the final model as safetensors, a ``config.json`` and
tokenizer files that ``transformers >= 4.48`` loads (``compat``), and the
generated model card ``README.md`` (``card``). Staging refuses, before any
export, when the variant's evaluation row has missing cells (unless
``evaluation.allow_missing``), when a restricted corpus licence has no
``release.licence_reason``, or when ``release.licence`` is unset. The folder
is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ..io import atomic_write_json, atomic_write_text, read_json, versioned_output_dir
from ..language import get_language
from . import ReleaseError
from .card import CardInputs, card_data, render_card
from .compat import check_special_tokens, legacy_model_config, legacy_tokenizer_config, mask_token_lstrip
from .licence import check_licence_policy
from .records import missing_cells, read_eval_table, read_manifest_sources, read_phase_record

log = logging.getLogger(__name__)
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def check_texts(language: str | None = None) -> tuple[str, str]:
    """Sentences (without the mask token) whose ids the staged tokenizer must reproduce exactly: the card's
    fill-mask sentence filled with a word, and its embedding example, in ``language`` (None: the active one)."""
    lang = get_language(language)
    return lang.fill_mask_sentence.format(mask=lang.fill_mask_word), lang.embed_text


def repo_id_for(release: dict[str, Any], variant: str) -> str | None:
    """The Hub repo id of a variant: ``release.repo_ids[variant]``, else ``release.repo_template``, else None.

    Raises:
        ReleaseError: the id is not ``namespace/name`` or fails ``huggingface_hub``'s repo-id rules.
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    ids = release.get("repo_ids") or {}
    if variant in ids:
        rid, key = ids[variant], f"release.repo_ids.{variant}"
    elif release.get("repo_template"):
        rid, key = release["repo_template"].format(variant=variant), "release.repo_template"
    else:
        return None
    try:
        validate_repo_id(rid)
    except HFValidationError as e:
        raise ReleaseError(f"config key {key}: {rid!r} is not a valid Hub repo id ({e})") from None
    if rid.count("/") != 1:
        raise ReleaseError(f"config key {key}: {rid!r} must be 'namespace/name' (a user or organisation, then the model)")
    return rid


def _tokenizer_kind(tokenizer_json: dict[str, Any]) -> str:
    kind = (tokenizer_json.get("model") or {}).get("type", "unknown")
    byte_level = "ByteLevel" in json.dumps(tokenizer_json.get("pre_tokenizer"))
    return f"{'byte-level ' if byte_level else ''}{kind} tokenizer"


def export_model(model_dir: str | Path, dest: str | Path, language: str | None = None) -> dict[str, Any]:
    """Write the model and tokenizer of ``model_dir`` into ``dest`` in the release format.

    Weights: ``ModernBertForMaskedLM.save_pretrained`` (safetensors, dtype kept).
    ``config.json``: ``compat.legacy_model_config``. Tokenizer: ``tokenizer.json``
    with the mask token's ``lstrip`` set, ``tokenizer_config.json`` naming
    ``PreTrainedTokenizerFast`` without ``token_type_ids``, ``special_tokens_map.json``.
    Then checks: the staged model's logits on the card's sentences (:func:`check_texts`) equal the
    source model's exactly; the staged tokenizer gives the source's ids on
    text without a mask token; special tokens agree with the config.

    Args:
        model_dir: the final HF folder (``results/pretrain/{variant}/decay/model``).
        dest: an existing empty folder.
        language: language code of the check sentences (None: the active language).

    Returns:
        ``{"config": staged config dict, "n_parameters": int, "tokenizer": {...}, "special_token_ids": {...}}``.

    Raises:
        ReleaseError: not a ``ModernBertForMaskedLM`` folder, no ``tokenizer.json``,
            or a failed check (the message names it).
    """
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    src, dest = Path(model_dir), Path(dest)
    try:
        src_config = read_json(src / "config.json")
    except (FileNotFoundError, ValueError) as e:
        raise ReleaseError(f"{src}: not a model folder ({e})") from None
    if "ModernBertForMaskedLM" not in (src_config.get("architectures") or []):
        raise ReleaseError(f"{src / 'config.json'}: architectures is {src_config.get('architectures')}, "
                           "expected ModernBertForMaskedLM")
    if not (src / "tokenizer.json").exists():
        raise ReleaseError(f"{src}: no tokenizer.json (a fast tokenizer is required)")

    src_tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForMaskedLM.from_pretrained(src).eval()
    texts = check_texts(language)
    probe = src_tok(list(texts), padding=True, return_tensors="pt")
    with torch.no_grad():
        ref_logits = model(input_ids=probe["input_ids"], attention_mask=probe["attention_mask"]).logits
    n_parameters = sum(p.numel() for p in model.parameters())
    model.save_pretrained(dest)
    del model

    config = legacy_model_config(read_json(dest / "config.json"))
    atomic_write_json(dest / "config.json", config)

    special = {n: str(getattr(src_tok, n)) for n in SPECIAL_TOKEN_NAMES if getattr(src_tok, n, None) is not None}
    if "mask_token" not in special:
        raise ReleaseError(f"{src}: the tokenizer has no mask token")
    tok_json = mask_token_lstrip(read_json(src / "tokenizer.json"), special["mask_token"])
    tok_cfg_path = src / "tokenizer_config.json"
    tok_cfg = read_json(tok_cfg_path) if tok_cfg_path.exists() else {}
    atomic_write_text(dest / "tokenizer.json", json.dumps(tok_json, ensure_ascii=False, indent=2) + "\n")
    atomic_write_json(dest / "tokenizer_config.json",
                      legacy_tokenizer_config(tok_cfg, tok_json, special, int(config["max_position_embeddings"])))
    atomic_write_json(dest / "special_tokens_map.json", special)

    staged_tok = AutoTokenizer.from_pretrained(dest)
    ids = check_special_tokens(config, staged_tok)
    for text in texts:
        a, b = src_tok(text)["input_ids"], staged_tok(text)["input_ids"]
        if a != b:
            raise ReleaseError(f"{dest}: the staged tokenizer gives other ids than {src} for {text[:40]!r}...")
    if "token_type_ids" in staged_tok("a"):
        raise ReleaseError(f"{dest}: the staged tokenizer still returns token_type_ids")
    staged = AutoModelForMaskedLM.from_pretrained(dest).eval()
    with torch.no_grad():
        logits = staged(input_ids=probe["input_ids"], attention_mask=probe["attention_mask"]).logits
    if not torch.equal(logits, ref_logits):
        diff = (logits - ref_logits).abs().max().item()
        raise ReleaseError(f"{dest}: the staged model's logits differ from {src}'s (max |diff| {diff:.3g})")
    tokenizer = {"mask_token": special["mask_token"], "vocab_size": len(staged_tok),
                 "model_max_length": staged_tok.model_max_length, "class": _tokenizer_kind(tok_json)}
    return {"config": config, "n_parameters": n_parameters, "tokenizer": tokenizer, "special_token_ids": ids}


def stage_release(variant: str, *, model_dir: str | Path, phase_runs: list[tuple[str, str | Path, str]],
                  manifest: str | Path, eval_table: str | Path, out_dir: str | Path, release: dict[str, Any],
                  tasks: dict[str, dict[str, Any]], evaluation: dict[str, Any] | None, base_model: dict[str, Any],
                  description: str | None = None, reference_models: dict[str, dict[str, Any]] | None = None,
                  model_ref: str | None = None, language: str | None = None,
                  claims: str | Path | None = None) -> dict[str, Any]:
    """Stage ``out_dir`` (model, tokenizer, ``README.md``) for one variant.

    Args:
        variant: the variant name.
        model_dir: its final model (``results/pretrain/{variant}/decay/model``).
        phase_runs: ``[(phase, run.json path, variant that trained it)]`` in training order
            (phase 1 of a ``phase1_from`` variant is its owner's).
        manifest: ``results/corpus/manifest.json``.
        eval_table: ``results/eval_table.tsv``.
        out_dir: ``results/release/{variant}`` (replaced atomically).
        release: the ``release`` config section (defaults filled).
        tasks: ``config["tasks"]`` (each with ``type`` and ``metric``).
        evaluation: ``config["evaluation"]`` or None (``allow_missing`` defaults to False;
            ``baseline``, filled by the schema, names the model deltas are measured against,
            none when absent; ``left_out``, ``{task: why}`` of the tasks left out of the grid,
            is stated in the card).
        base_model: ``config["base_model"]``.
        description: the variant's description.
        reference_models: ``config["reference_models"]``.
        model_ref: what the card's snippets load when no repo id is configured
            (default: ``out_dir`` as given).
        language: the config's ``language`` code (card wording and check sentences;
            None: the active language, :mod:`clmdetour.language`).
        claims: ``results/claims.tsv`` (the card's claims paragraph), or None for none.

    Returns:
        A summary: ``variant``, ``repo_id``, ``files`` (names), ``n_parameters``,
        ``restricted_sources``, ``missing_cells``.

    Raises:
        ReleaseError: missing evaluation cells (without ``allow_missing``), a
            restricted source without ``release.licence_reason``, an unset
            ``release.licence``, unreadable inputs, or a failed export check.
    """
    evaluation = evaluation or {}
    allow_missing = bool(evaluation.get("allow_missing", False))
    baseline = evaluation.get("baseline")  # the validated evaluation.baseline (default in the schema)
    table = read_eval_table(eval_table)
    missing = missing_cells(table, variant, list(tasks), baseline)
    if missing and not allow_missing:
        raise ReleaseError(f"{eval_table}: the row of {variant!r} has missing cells {missing}; finish the evaluation "
                           "or set evaluation.allow_missing: true to release anyway")
    sources, _totals = read_manifest_sources(manifest)
    restricted = check_licence_policy({n: r.get("licence") for n, r in sources.items()},
                                      release.get("licence_reason"), str(manifest))
    phases = [(phase, read_phase_record(path), owner) for phase, path, owner in phase_runs]
    repo_id = repo_id_for(release, variant)
    title = repo_id.split("/")[-1] if repo_id else variant
    ref = repo_id or model_ref or str(out_dir)
    inputs = CardInputs(variant=variant, description=description, title=title, repo_id=repo_id, model_ref=ref,
                        release=release, base_model=base_model, model_config={}, n_parameters=0, tokenizer={},
                        phases=phases, sources=sources, restricted=restricted, table=table, tasks=tasks,
                        baseline=baseline, reference_models=reference_models or {}, missing=missing,
                        left_out=dict(evaluation.get("left_out") or {}), language=language,
                        claims=read_claims(claims) if claims else None)
    card_data(inputs)  # config errors (licence, task types) before the export

    with versioned_output_dir(out_dir) as tmp:  # a failed restage keeps the previous release
        exported = export_model(model_dir, tmp, language)
        inputs.model_config, inputs.n_parameters, inputs.tokenizer = (
            exported["config"], exported["n_parameters"], exported["tokenizer"])
        text = render_card(inputs)
        check_card(text, tasks=[t for t in tasks if f"{t}_mean" not in missing])
        atomic_write_text(tmp / "README.md", text)
        files = sorted(p.name for p in tmp.iterdir() if p.is_file() and not p.name.startswith("."))
    log.info("staged %s in %s: %s", variant, out_dir, files)
    return {"variant": variant, "repo_id": repo_id, "files": files, "n_parameters": exported["n_parameters"],
            "restricted_sources": restricted, "missing_cells": missing}


def read_claims(path: str | Path) -> list[dict]:
    """The rows of ``results/claims.tsv`` as dicts (empty cells as empty strings).

    Raises:
        ReleaseError: the file is missing or lacks the claims table's columns.
    """
    import pandas as pd

    from clmdetour.evaluation.claims import COLUMNS

    try:
        df = pd.read_csv(path, sep="\t", keep_default_na=False, dtype=str)
    except (OSError, ValueError) as e:
        raise ReleaseError(f"{path}: cannot read the claims table ({e})") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ReleaseError(f"{path}: columns {missing} missing; expected {COLUMNS}")
    return df.to_dict("records")


def check_card(text: str, tasks: list[str]) -> None:
    """Parse a card with ``huggingface_hub.ModelCard`` and check its front matter.

    Checks (offline; ``ModelCard.validate`` needs the Hub): the YAML parses into
    ``ModelCardData``, ``pipeline_tag`` is ``fill-mask``, a licence is set, and
    the ``model-index`` has exactly one result per task in ``tasks``.

    Raises:
        ReleaseError: the first failed check.
    """
    from huggingface_hub import ModelCard

    try:
        card = ModelCard(text, ignore_metadata_errors=False)
    except Exception as e:  # noqa: BLE001 (huggingface_hub raises ValueError / yaml errors)
        raise ReleaseError(f"README.md: the card's front matter does not parse ({e})") from None
    data = card.data
    if data.pipeline_tag != "fill-mask" or not data.license:
        raise ReleaseError(f"README.md: pipeline_tag is {data.pipeline_tag!r} and license {data.license!r}; "
                           "expected fill-mask and a licence")
    names = [r.dataset_name for r in (data.eval_results or [])]
    if len(names) != len(tasks):
        raise ReleaseError(f"README.md: model-index has {len(names)} results, expected one per task {tasks}")
