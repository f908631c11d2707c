"""Prediction heads the task types build on top of an encoder.

:func:`standardize_pooled_features`: the mean-pooled features of a ModernBERT
sequence classifier go through a per-dimension standardisation (``BatchNorm1d``
without affine parameters) into a fresh prediction head. docs/tasks.md
("Fine-tuning recipe") has the measurements behind it.
"""

from __future__ import annotations

STANDARDIZE_MOMENTUM = 0.1  # torch.nn.BatchNorm1d's default running-statistics momentum


def _standardizer_class():
    import torch
    import torch.nn.functional as F

    class _PooledStandardizer(torch.nn.BatchNorm1d):
        """Per-dimension standardisation of pooled features ``[B, H]`` (batch statistics in training,
        running statistics in evaluation; a training batch of one example uses the running statistics)."""

        def forward(self, x):
            if self.training and x.shape[0] < 2:
                return F.batch_norm(x, self.running_mean, self.running_var, None, None, False, 0.0, self.eps)
            return super().forward(x)

    return _PooledStandardizer


def standardize_pooled_features(model) -> None:
    """Put a per-dimension standardisation of the pooled features in front of a fresh prediction head.

    ``ModernBertForSequenceClassification`` computes ``classifier(drop(head(pool(h))))``
    with ``pool(h)``: ``[B, H]``. After continued pretraining on a small
    corpus, the pooled features of different documents are nearly parallel
    (mean cosine 0.98 for the demo's mlm-baseline vs 0.61 untrained): the
    document-specific part is a fifth of the shared one, so in a few dozen
    optimizer steps the classifier learns the label prior and little else,
    while a linear probe on standardised features separates the classes.
    Two changes, both measured in docs/tasks.md ("Fine-tuning recipe"):

    - ``head`` becomes ``Sequential(standardizer, head)``: ``BatchNorm1d(H,
      affine=False)`` removes the shared component and equalises dimension
      scales, as standardising features before a linear probe does;
    - the prediction head (``dense`` + ``norm``) is re-initialised
      (``dense`` ~ N(0, ``initializer_range``), norm weight 1, biases 0)
      instead of reusing the MLM checkpoint's token-prediction head, whose
      output kept the 0.97 cosine.

    Applied to every ModernBERT model alike (pretrained and ``random-init``);
    other architectures keep transformers' head. Draws from the global torch
    RNG, so the caller seeds first.

    Args:
        model: a ``ModernBertForSequenceClassification`` (modified in place).

    Raises:
        TypeError: ``model`` has no ModernBERT prediction head (``head.dense``, ``head.norm``).
    """
    import torch

    head = getattr(model, "head", None)
    if not (hasattr(head, "dense") and hasattr(head, "norm")):
        raise TypeError(f"expected a ModernBERT sequence classifier with head.dense and head.norm, got {type(model).__name__}")
    std = float(getattr(model.config, "initializer_range", 0.02))
    with torch.no_grad():
        torch.nn.init.normal_(head.dense.weight, std=std)
        if head.dense.bias is not None:
            head.dense.bias.zero_()
        if getattr(head.norm, "weight", None) is not None:
            head.norm.weight.fill_(1.0)
        if getattr(head.norm, "bias", None) is not None:
            head.norm.bias.zero_()
    hidden = int(model.config.hidden_size)
    model.head = torch.nn.Sequential(_standardizer_class()(hidden, affine=False, momentum=STANDARDIZE_MOMENTUM), head)


def sequence_classifier(model_dir: str, kw: dict):
    """``AutoModelForSequenceClassification`` from ``model_dir`` with ``kw`` (``from_pretrained`` keywords:
    ``num_labels``, ``problem_type``, ...); a ModernBERT encoder gets its pooled features standardised
    (:func:`standardize_pooled_features`). Draws the fresh head from the global torch RNG.

    Raises:
        OSError: ``model_dir`` is not a loadable model folder (transformers' message).
    """
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir), **kw)
    if getattr(model.config, "model_type", "") == "modernbert":
        standardize_pooled_features(model)
    return model
