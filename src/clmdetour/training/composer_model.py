"""Composer wrapper of ModernBertForMaskedLM for CLM and MLM pretraining."""

from __future__ import annotations

import torch
from composer.models import HuggingFaceModel

from clmdetour.modeling.causal import forward_encoder
from clmdetour.modeling.loss import CHUNK_TOKENS, chunked_lm_loss
from clmdetour.objectives import get_objective


class PretrainingModel(HuggingFaceModel):
    """``HuggingFaceModel`` whose forward runs the encoder causally (CLM) or not (MLM).

    The loss goes through the model's own MLM head (``decoder(head(h))``) for
    the labelled positions only, in chunks (``clmdetour.modeling.loss``).

    Args:
        model: a transformers ModernBertForMaskedLM.
        tokenizer: its tokenizer (saved with Composer checkpoints).
        objective: a name of :data:`clmdetour.objectives.OBJECTIVES` (``clm``: causal
            mask, next-token labels; ``mlm``).
        chunk_tokens: labelled positions per loss chunk.
        document_sep_id: the separator id when attention stays inside each document of a packed
            row (``pretraining.document_mask``), else None.
        compile_loss: each loss chunk's cross-entropy under ``torch.compile`` (the compiled GPU path).
    """

    def __init__(self, model, tokenizer, objective: str, chunk_tokens: int = CHUNK_TOKENS, document_sep_id: int | None = None,
                 compile_loss: bool = False):
        from clmdetour.runtime.composer_setup import causal_lm_check_by_name

        self.causal = get_objective(objective).causal  # InputError (a ValueError) when unknown
        with causal_lm_check_by_name():  # not Composer's 6 s scan of every causal-LM class
            super().__init__(model, tokenizer=tokenizer, use_logits=False, shift_labels=False)
        self.objective = objective
        self.chunk_tokens = chunk_tokens
        self.document_sep_id = document_sep_id
        self.compile_loss = compile_loss

    def forward(self, batch: dict) -> torch.Tensor:
        """(batch, seq) ids -> (batch, seq, hidden) final hidden states."""
        out = forward_encoder(self.model, batch["input_ids"], batch.get("attention_mask"),
                              causal=self.causal, document_sep_id=self.document_sep_id)
        return out.last_hidden_state

    def loss(self, outputs: torch.Tensor, batch: dict) -> torch.Tensor:
        """Mean cross-entropy (nats per labelled token)."""
        return chunked_lm_loss(outputs, batch["labels"], self.project, self.chunk_tokens, compiled=self.compile_loss)

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """(n, hidden) -> (n, vocab) logits through the MLM head and the tied decoder."""
        return self.model.decoder(self.model.head(hidden))

    def eval_forward(self, batch, outputs=None):
        return outputs if outputs is not None else self.forward(batch)

    def get_metrics(self, is_train: bool = False):
        return {}
