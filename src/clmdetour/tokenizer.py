"""Byte-level BPE tokenizer training for models built here (the demo base model).

Byte-level BPE with no continuing-subword prefix (as ModernBERT's; WordPiece
training was seen to differ between processes), special tokens
``[UNK] [CLS] [SEP] [PAD] [MASK]`` (ids 0-4), and the ``[CLS] text [SEP]``
template ModernBERT uses. Training is deterministic for a fixed input order:
two runs give byte-identical ``tokenizer.json``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SPECIAL_TOKENS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]


def train_tokenizer(texts: Iterable[str], vocab_size: int, min_frequency: int = 2):
    """Train a byte-level BPE tokenizer and wrap it as a transformers fast tokenizer.

    Args:
        texts: training texts, in a fixed order.
        vocab_size: target vocabulary size (tokens, special tokens included).
        min_frequency: minimum pair frequency for a merge.

    Returns:
        ``PreTrainedTokenizerFast`` with ``model_input_names = ["input_ids", "attention_mask"]``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
        mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"], model_max_length=8192)


def save_tokenizer(tokenizer, out_dir: str | Path) -> None:
    """Save with ``save_pretrained`` (tokenizer.json, tokenizer_config.json, special tokens)."""
    tokenizer.save_pretrained(str(out_dir))
