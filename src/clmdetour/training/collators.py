"""Batch collation for the two pretraining objectives, each collator built from its objective's own
settings (:class:`clmdetour.objectives.ObjectiveSettings`: ``from_settings(settings, tokenizer, seed)``).

MLM uses transformers' ``DataCollatorForLanguageModeling`` (15 % of
non-special tokens selected; of those 80 % -> [MASK], 10 % -> random token,
10 % unchanged; Devlin et al. 2019). CLM labels each position with the next
token of the same document: packed sequences concatenate
``[CLS] doc [SEP]`` blocks, so the label of a position holding [SEP] (the
last token of a document), of the last position, and of padding is ``-100``.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from clmdetour.corpus.pack import attention_mask_of
from clmdetour.modeling.loss import IGNORE_INDEX
from clmdetour.objectives import MLMSettings, ObjectiveSettings, get_objective


def _stack(examples: list[dict]) -> dict[str, torch.Tensor]:
    """Packed rows -> ``input_ids`` and ``attention_mask`` (``LongTensor[B, L]``); the mask is the rows'
    stored one, else rebuilt from their ``n_tokens`` (:func:`clmdetour.corpus.pack.attention_mask_of`), else all ones."""
    ids = torch.as_tensor(np.stack([np.asarray(e["input_ids"], dtype=np.int64) for e in examples]))
    if "attention_mask" in examples[0]:
        mask = torch.as_tensor(np.stack([np.asarray(e["attention_mask"], dtype=np.int64) for e in examples]))
    elif "n_tokens" in examples[0]:
        mask = torch.as_tensor(attention_mask_of([int(e["n_tokens"]) for e in examples], ids.shape[1]))
    else:
        mask = torch.ones_like(ids)
    return {"input_ids": ids, "attention_mask": mask}


def clm_labels(input_ids: torch.Tensor, attention_mask: torch.Tensor, sep_token_id: int) -> torch.Tensor:
    """Next-token labels that never cross a document boundary.

    Args:
        input_ids: (batch, seq) packed token ids.
        attention_mask: (batch, seq) 1 for tokens, 0 for padding.
        sep_token_id: id of the end-of-document separator.

    Returns:
        (batch, seq) labels: ``input_ids[:, t+1]`` or ``-100`` where position t
        is a separator, the last position, or where t+1 is padding.
    """
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels[:, :-1] = input_ids[:, 1:]
    cut = (input_ids == sep_token_id) | (attention_mask == 0)
    cut[:, :-1] |= attention_mask[:, 1:] == 0
    labels[cut] = IGNORE_INDEX
    labels[:, -1] = IGNORE_INDEX
    return labels


class CLMCollator:
    """Collate packed rows into ``input_ids``, ``attention_mask``, next-token ``labels``."""

    def __init__(self, sep_token_id: int):
        self.sep_token_id = sep_token_id

    @classmethod
    def from_settings(cls, settings: ObjectiveSettings, tokenizer, seed: int | None = None) -> CLMCollator:
        """The collator of a CLM phase (labels stop at the tokenizer's ``[SEP]``; nothing is masked or drawn,
        so CLM owns no settings and ``seed`` is unused)."""
        return cls(tokenizer.sep_token_id)

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        batch = _stack(examples)
        batch["labels"] = clm_labels(batch["input_ids"], batch["attention_mask"], self.sep_token_id)
        return batch


class MLMCollator:
    """Collate packed rows and mask them with ``DataCollatorForLanguageModeling``.

    Args:
        tokenizer: the model's tokenizer (its special tokens are never masked).
        masking_rate: fraction of non-special tokens selected (paper: 0.15).
        seed: if given, masking is drawn from the collator's own generator
            (reproducible validation batches; :meth:`reseed` rewinds it so that
            two passes over the same rows draw identical masks); otherwise from
            torch's global RNG (seeded by Composer).
    """

    @classmethod
    def from_settings(cls, settings: MLMSettings, tokenizer, seed: int | None = None) -> MLMCollator:
        """The collator of an MLM phase: its masking rate from MLM's own settings."""
        return cls(tokenizer, settings.masking_rate, seed)

    def __init__(self, tokenizer: PreTrainedTokenizerBase, masking_rate: float, seed: int | None = None):
        if not 0.0 < masking_rate < 1.0:
            raise ValueError(f"masking_rate must be in (0, 1), got {masking_rate}")
        self.masking_rate = masking_rate
        self.inner = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=masking_rate,
                                                     return_tensors="pt", seed=seed)
        # The library creates its generator lazily in __call__; we call torch_mask_tokens directly.
        self.seed = seed
        self.reseed()
        self.special_ids = torch.as_tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)

    def reseed(self) -> None:
        """Rewind the collator's own generator to ``seed`` (no-op without a seed)."""
        self.inner.generator = torch.Generator().manual_seed(self.seed) if self.seed is not None else None

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        batch = _stack(examples)
        special = torch.isin(batch["input_ids"], self.special_ids) | (batch["attention_mask"] == 0)
        inputs, labels = self.inner.torch_mask_tokens(batch["input_ids"].clone(), special_tokens_mask=special)
        batch["input_ids"], batch["labels"] = inputs, labels
        return batch


COLLATORS = {c.__name__: c for c in (CLMCollator, MLMCollator)}  # the names clmdetour.objectives gives


def make_collator(objective: str, settings: ObjectiveSettings, tokenizer, seed: int | None = None):
    """The batch collator of an objective (its class named by :data:`clmdetour.objectives.OBJECTIVES`), built
    from the objective's own settings.

    Args:
        objective: a registered objective name (``clm``, ``mlm``).
        settings: the objective's settings (:meth:`clmdetour.objectives.Objective.settings_of`, or
            :attr:`clmdetour.settings.PhaseSettings.objective_settings`; MLM: the masking rate, 80/10/10 as BERT).
        tokenizer: the model's tokenizer (special token ids; MLM's mask and vocabulary).
        seed: the seed of the collator's own generator (MLM's masks; None: the global torch RNG).

    Raises:
        clmdetour.errors.InputError: unknown objective (a ``ValueError``).
    """
    return COLLATORS[get_objective(objective).collator].from_settings(settings, tokenizer, seed)
