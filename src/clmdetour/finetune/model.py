"""Fine-tuning models: the task type's transformers model inside Composer's ``HuggingFaceModel``.

The task type builds the model and its head (:meth:`clmdetour.tasktypes.TaskType.load_model`);
the loss is the head's own; Composer's ``HuggingFaceModel`` only forwards the
batch keys the model's ``forward`` accepts. The head is freshly initialised
from the global torch RNG, so the caller seeds first.
:func:`model_token_limit` gives the longest input a model accepts (8,192 for
ModernBERT, 512 for RoBERTa/CamemBERT-style models whose position ids start
after the padding index).
"""

from __future__ import annotations

from pathlib import Path

from clmdetour.tasktypes import get_task_type

# Models whose learned position ids start at padding_idx + 1 (fairseq/RoBERTa convention).
_OFFSET_POSITION_MODELS = {"roberta", "camembert", "xlm-roberta", "xlm_roberta"}
_TOKENIZER_UNSET = 10 ** 6  # transformers uses VERY_LARGE_INTEGER when a tokenizer declares no limit


def model_token_limit(config, tokenizer=None) -> int:
    """Longest input (tokens, special tokens included) the model accepts.

    ``max_position_embeddings``, minus ``padding_idx + 1`` for RoBERTa-style
    models (CamemBERT: 514 - 2 = 512), and no more than the tokenizer's
    ``model_max_length`` when the tokenizer declares one.
    """
    limit = int(getattr(config, "max_position_embeddings", 0) or _TOKENIZER_UNSET)
    if getattr(config, "model_type", "") in _OFFSET_POSITION_MODELS:
        limit -= int(getattr(config, "pad_token_id", 1) or 0) + 1
    tok_limit = getattr(tokenizer, "model_max_length", None) if tokenizer is not None else None
    if tok_limit and tok_limit < _TOKENIZER_UNSET:
        limit = min(limit, int(tok_limit))
    return limit


def load_classifier(model_dir: str | Path, task_type: str, labels: list[str], attn_implementation: str | None = None):
    """Load the task type's transformers model from an HF folder.

    Args:
        model_dir: folder with ``config.json`` and weights (any encoder; an MLM
            checkpoint gets a new, randomly initialised head).
        task_type: a name of :data:`clmdetour.tasktypes.TASK_TYPES` (its ``load_model`` builds the head).
        labels: the names the model predicts, in id order (the type's ``model_labels``).
        attn_implementation: ``sdpa``, ``eager``, ``flash_attention_2`` or None (the library default).

    Returns:
        A ``transformers.PreTrainedModel`` in fp32 whose outputs the type reads (``example_outputs``).

    Raises:
        ValueError: unknown ``task_type``.
        OSError: ``model_dir`` is not a loadable model folder (transformers' message).
    """
    ttype = get_task_type(task_type, "task type")  # InputError (a ValueError) when unknown
    kw = {"num_labels": len(labels), "id2label": dict(enumerate(labels)), "label2id": {l: i for i, l in enumerate(labels)}}
    if attn_implementation:
        kw["attn_implementation"] = attn_implementation
    return ttype.load_model(str(model_dir), kw)


def composer_model(hf_model, tokenizer=None):
    """Wrap a transformers classification model for Composer's ``Trainer`` (loss = the head's loss).

    The tokenizer is only recorded (no embedding resizing: a tokenizer larger
    than the model's vocabulary raises Composer's ``ValueError``).

    Composer's constructor asks whether the model is a registered causal LM
    by materialising every causal-LM class of transformers (10-20 s of imports
    on CPU, per process). The models built here are task heads
    (:func:`load_classifier`), never causal LMs, so that check is answered
    ``False`` for the duration of this constructor only.

    Raises:
        TypeError: ``hf_model`` is not a transformers model, or is a causal LM.
    """
    from unittest import mock

    from composer.models import HuggingFaceModel
    from transformers import PreTrainedModel

    name = type(hf_model).__name__
    if not isinstance(hf_model, PreTrainedModel) or name.endswith("ForCausalLM"):
        raise TypeError(f"expected a task model built by a task type (a transformers PreTrainedModel), got {name}")
    with mock.patch("composer.models.huggingface._is_registered_causal_lm", return_value=False):
        return HuggingFaceModel(hf_model, tokenizer=tokenizer, use_logits=True, shift_labels=False)



def add_marker_tokens(tokenizer, markers: list[str]) -> tuple[list[int], list[int]]:
    """Add relation-argument markers to a job's tokenizer as special tokens (``marker_tokens: true``).

    Only this in-memory tokenizer changes: the model folder's tokenizer files (a pretrained
    variant, a released model, a reference model) are never written. A marker the
    vocabulary already holds as one token keeps its id and its trained embedding.

    Args:
        tokenizer: a transformers tokenizer (modified in place).
        markers: the marker strings (``labels.json`` ``marker_tokens``), e.g. ``["<<", ">>", "[[", "]]"]``.

    Returns:
        ``(ids, new_ids)``: each marker's id in ``markers`` order (it encodes to exactly this one
        id), and the ids that are new to the vocabulary (their embeddings need initialising).

    Raises:
        ValueError: a marker that still does not encode to one token (names it).
    """
    if not markers:
        return [], []
    known = {m for m in markers if len(tokenizer(m, add_special_tokens=False)["input_ids"]) == 1
             and m in tokenizer.get_vocab()}
    tokenizer.add_tokens([m for m in markers if m not in known], special_tokens=True)  # never split or normalised
    ids = []
    for m in markers:
        enc = tokenizer(m, add_special_tokens=False)["input_ids"]
        if len(enc) != 1:
            raise ValueError(f"marker {m!r} encodes to {len(enc)} tokens after being added to the tokenizer")
        ids.append(enc[0])
    return ids, [i for m, i in zip(markers, ids) if m not in known]


def init_marker_embeddings(model, tokenizer, new_ids: list[int]) -> int:
    """Give the fine-tuned model an input-embedding row per new marker id, set to the mean token embedding.

    The embedding matrix grows (``resize_token_embeddings``) when a new id lies beyond it
    (ModernBERT pads its matrix to a multiple of 64 rows, so ids below that need no growth);
    each new row is then set to the mean of the rows of the tokenizer's other tokens, the
    initialisation of new tokens of Hewitt (2021), "Initializing New Word Embeddings for
    Pretrained Language Models". Only this task model changes.

    Args:
        model: a transformers ``PreTrainedModel`` (modified in place).
        tokenizer: the job's tokenizer, markers added (:func:`add_marker_tokens`).
        new_ids: the new marker ids (:func:`add_marker_tokens`).

    Returns:
        The number of input-embedding rows after the change.
    """
    import torch

    emb = model.get_input_embeddings()
    if not new_ids:
        return emb.weight.shape[0]
    if max(new_ids) >= emb.weight.shape[0]:
        model.resize_token_embeddings(max(new_ids) + 1, mean_resizing=False)
        emb = model.get_input_embeddings()
    new = set(new_ids)
    ref = sorted(i for i in tokenizer.get_vocab().values() if i not in new and i < emb.weight.shape[0])
    with torch.no_grad():
        mean = emb.weight[ref].mean(dim=0)
        for i in new_ids:
            emb.weight[i] = mean
    return emb.weight.shape[0]
