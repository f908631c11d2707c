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

from clmdetour.tasktypes import TaskType

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


def load_classifier(model_dir: str | Path, task_type: TaskType, labels: list[str], attn_implementation: str | None = None):
    """Load the task type's transformers model from an HF folder.

    Args:
        model_dir: folder with ``config.json`` and weights (any encoder; an MLM
            checkpoint gets a new, randomly initialised head).
        task_type: the task's :class:`clmdetour.tasktypes.TaskType` (its ``load_model`` builds the head).
        labels: the names the model predicts, in id order (the type's ``model_labels``).
        attn_implementation: ``sdpa``, ``eager``, ``flash_attention_2`` or None (the library default).

    Returns:
        A ``transformers.PreTrainedModel`` in fp32 whose outputs the type reads (``example_outputs``).

    Raises:
        OSError: ``model_dir`` is not a loadable model folder (transformers' message).
    """
    kw = {"num_labels": len(labels), "id2label": dict(enumerate(labels)), "label2id": {l: i for i, l in enumerate(labels)}}
    if attn_implementation:
        kw["attn_implementation"] = attn_implementation
    return task_type.load_model(str(model_dir), kw)


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


