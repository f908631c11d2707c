"""Config and tokenizer patches so a staged folder loads with ``transformers >= 4.48``.

transformers 4.48.0 is the first release with ModernBERT. Recent versions save
ModernBERT folders that it cannot read as written:

- ``config.json`` describes the attention pattern with ``layer_types`` and the
  rotary bases with ``rope_parameters`` (one entry per layer type); 4.48 reads
  ``global_attn_every_n_layers`` (layer ``i`` is global iff ``i % n == 0``),
  ``global_rope_theta`` and ``local_rope_theta`` instead, and silently falls
  back to its defaults (160000 / 10000 / 3) when they are absent;
- ``tokenizer_config.json`` names a tokenizer class 4.48 does not know
  (``TokenizersBackend``); ``PreTrainedTokenizerFast`` loads ``tokenizer.json``
  in every version;
- without ``model_input_names`` 4.48's ``PreTrainedTokenizerFast`` returns
  ``token_type_ids``, which ModernBERT's ``forward`` does not accept.

The staged folder keeps the new keys too, so recent versions read the same
model. The functions here work on parsed JSON dicts and return new dicts.
"""

from __future__ import annotations

import copy
from typing import Any

from . import ReleaseError

# The oldest transformers the release promises to load with (first release with ModernBERT).
MIN_TRANSFORMERS = "4.48.0"
MODEL_INPUT_NAMES = ["input_ids", "attention_mask"]
_FULL, _SLIDING = "full_attention", "sliding_attention"
# tokenizer_config.json keys that describe how the source was loaded or name remote code, not the tokenizer.
_DROP_TOKENIZER_KEYS = ("auto_map", "processor_class", "backend", "is_local", "local_files_only", "name_or_path")


def global_every_n(layer_types: list[str], where: str = "config.json") -> int:
    """The period ``n`` with ``layer_types[i] == "full_attention"`` iff ``i % n == 0``.

    This is how transformers 4.48 places global attention layers
    (``ModernBertAttention``: ``layer_id % global_attn_every_n_layers != 0`` is local).

    Args:
        layer_types: one entry per layer, ``"full_attention"`` or ``"sliding_attention"``.
        where: file named in errors.

    Returns:
        The smallest such ``n`` (``len(layer_types)`` covers a model with one global layer).

    Raises:
        ReleaseError: an unknown layer type, or a pattern no period expresses
            (older transformers could not rebuild this model).
    """
    bad = sorted({t for t in layer_types if t not in (_FULL, _SLIDING)})
    if bad:
        raise ReleaseError(f"{where}: layer_types has unknown entries {bad}; expected {_FULL!r} or {_SLIDING!r}")
    depth = len(layer_types)
    for n in range(1, depth + 1):
        if all((t == _FULL) == (i % n == 0) for i, t in enumerate(layer_types)):
            return n
    raise ReleaseError(f"{where}: layer_types {layer_types} is not 'global every n layers, from layer 0'; "
                       f"transformers {MIN_TRANSFORMERS} cannot express it")


def _rope_thetas(resolved) -> tuple[float, float]:
    """(global, local) rotary bases of a resolved ``ModernBertConfig`` of any transformers version."""
    rope = getattr(resolved, "rope_parameters", None)
    if isinstance(rope, dict) and _FULL in rope and _SLIDING in rope:
        for kind in (_FULL, _SLIDING):
            rtype = rope[kind].get("rope_type", "default")
            if rtype != "default":
                raise ReleaseError(f"config.json: rope_parameters.{kind}.rope_type is {rtype!r}; "
                                   f"transformers {MIN_TRANSFORMERS} supports only 'default' RoPE")
        return float(rope[_FULL]["rope_theta"]), float(rope[_SLIDING]["rope_theta"])
    glob, loc = getattr(resolved, "global_rope_theta", None), getattr(resolved, "local_rope_theta", None)
    if glob is None:
        raise ReleaseError("config.json: found neither rope_parameters nor global_rope_theta")
    return float(glob), float(loc if loc is not None else glob)


def legacy_model_config(config: dict[str, Any]) -> dict[str, Any]:
    """A copy of a ModernBERT ``config.json`` that also carries the keys transformers 4.48 reads.

    The dict is resolved with the installed transformers' ``ModernBertConfig``
    (so defaults the file leaves implicit are made explicit), then
    ``global_rope_theta``, ``local_rope_theta``, ``global_attn_every_n_layers``
    and ``torch_dtype`` are set from the resolved values. Keys already present
    must agree with them.

    Args:
        config: parsed ``config.json`` of a ``ModernBertForMaskedLM``.

    Returns:
        A new dict: every original key plus the legacy ones.

    Raises:
        ReleaseError: not a ModernBERT config, a non-default RoPE type, an
            attention pattern 4.48 cannot express, or contradicting keys.
    """
    from transformers import ModernBertConfig

    if config.get("model_type") != "modernbert":
        raise ReleaseError(f"config.json: model_type is {config.get('model_type')!r}, expected 'modernbert'")
    out = copy.deepcopy(config)
    resolved = ModernBertConfig.from_dict(copy.deepcopy(config))
    glob, loc = _rope_thetas(resolved)
    layer_types = getattr(resolved, "layer_types", None)
    if layer_types:
        n = global_every_n(list(layer_types))
    else:
        n = int(resolved.global_attn_every_n_layers)
    wanted = {"global_rope_theta": glob, "local_rope_theta": loc, "global_attn_every_n_layers": n}
    for key, value in wanted.items():
        have = config.get(key)
        if have is not None and float(have) != float(value):
            raise ReleaseError(f"config.json: {key} is {have} but the model's resolved value is {value}")
        out[key] = value
    if "dtype" in config and "torch_dtype" not in config:
        out["torch_dtype"] = config["dtype"]
    return out


def mask_token_lstrip(tokenizer_json: dict[str, Any], mask_token: str) -> dict[str, Any]:
    """A copy of ``tokenizer.json`` whose mask token strips the space before it.

    With byte-level BPE a masked word was a ``Ġword`` token, so in
    ``"une [MASK] aiguë"`` the space belongs to the mask; without ``lstrip`` it
    becomes an extra ``Ġ`` token the model never saw before a mask (ModernBERT's
    own tokenizer sets ``lstrip`` on its mask token for this reason). Text
    without the mask token tokenizes as before.

    Raises:
        ReleaseError: the mask token is not among ``added_tokens``.
    """
    out = copy.deepcopy(tokenizer_json)
    for entry in out.get("added_tokens", []):
        if entry.get("content") == mask_token:
            entry["lstrip"] = True
            entry["special"] = True
            return out
    raise ReleaseError(f"tokenizer.json: mask token {mask_token!r} is not among added_tokens")


def legacy_tokenizer_config(tokenizer_config: dict[str, Any], tokenizer_json: dict[str, Any],
                            special_tokens: dict[str, str], max_positions: int) -> dict[str, Any]:
    """A ``tokenizer_config.json`` that transformers 4.48 and recent versions both load the same way.

    Sets ``tokenizer_class`` to ``PreTrainedTokenizerFast``, ``model_input_names``
    to ``["input_ids", "attention_mask"]``, the special tokens, an explicit
    ``clean_up_tokenization_spaces`` (False unless set: its default changed
    between versions), ``model_max_length`` capped at the model's
    ``max_position_embeddings``, load-time keys dropped (``backend``,
    ``is_local``, ``local_files_only`` ...), and ``added_tokens_decoder`` copied from
    ``tokenizer.json`` (so both versions see the same flags, e.g. the mask's ``lstrip``).

    Args:
        tokenizer_config: the source folder's parsed ``tokenizer_config.json`` ({} if absent).
        tokenizer_json: the (patched) parsed ``tokenizer.json``.
        special_tokens: ``{"cls_token": "[CLS]", "mask_token": "[MASK]", ...}``.
        max_positions: the model's ``max_position_embeddings`` (tokens).
    """
    out = {k: v for k, v in tokenizer_config.items() if k not in _DROP_TOKENIZER_KEYS}
    out["tokenizer_class"] = "PreTrainedTokenizerFast"
    out["model_input_names"] = list(MODEL_INPUT_NAMES)
    out.setdefault("clean_up_tokenization_spaces", False)
    current = out.get("model_max_length")
    out["model_max_length"] = int(min(current, max_positions)) if isinstance(current, (int, float)) else int(max_positions)
    out.update(special_tokens)
    out["added_tokens_decoder"] = {
        str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special") if k in t}
        for t in tokenizer_json.get("added_tokens", [])
    }
    return out


def check_special_tokens(model_config: dict[str, Any], tokenizer) -> dict[str, int]:
    """Check the tokenizer's special tokens against the model config and the encoding template.

    Args:
        model_config: parsed ``config.json``.
        tokenizer: a loaded fast tokenizer (``AutoTokenizer`` of the staged folder).

    Returns:
        ``{"cls_token": id, "sep_token": id, "pad_token": id, "mask_token": id, "unk_token": id}``.

    Raises:
        ReleaseError: a special token is missing or unknown to the vocabulary, a
            config id (``pad_token_id``, ``cls_token_id``, ``sep_token_id``)
            differs from the tokenizer's, or encoding does not give ``[CLS] ... [SEP]``.
    """
    ids = {}
    for name in ("cls_token", "sep_token", "pad_token", "mask_token", "unk_token"):
        token = getattr(tokenizer, name, None)
        tid = tokenizer.convert_tokens_to_ids(token) if token else None
        if token is None or tid is None or (tid == tokenizer.unk_token_id and name != "unk_token"):
            raise ReleaseError(f"tokenizer: {name} is {token!r}, which is not a token of the vocabulary")
        ids[name] = int(tid)
    for key, name in (("pad_token_id", "pad_token"), ("cls_token_id", "cls_token"), ("sep_token_id", "sep_token")):
        if model_config.get(key) is not None and int(model_config[key]) != ids[name]:
            raise ReleaseError(f"config.json: {key} is {model_config[key]} but the tokenizer's {name} "
                               f"{getattr(tokenizer, name)!r} has id {ids[name]}")
    enc = tokenizer("a")["input_ids"]
    if enc[0] != ids["cls_token"] or enc[-1] != ids["sep_token"]:
        raise ReleaseError(f"tokenizer: encoding 'a' gives {enc}, expected [CLS] ... [SEP] "
                           f"({ids['cls_token']} ... {ids['sep_token']}); check the post-processor of tokenizer.json")
    return ids
