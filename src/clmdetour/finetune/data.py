"""Batching for fine-tuning: length-grouped batches and dynamic padding.

Examples are dicts ``{"input_ids": list[int], <the task type's target key>: ...}``. Batches are
padded to their own longest example (not to ``max_length``), and examples of
similar length are put in the same batch (the "megabatch" grouping of
transformers' ``LengthGroupedSampler``), so a 128-token task with short
sentences costs what its sentences cost. Shuffling is driven by a seed and the
epoch number only, so a seed's batches are the same whatever ran before it in
the process. ``token_type_ids`` are never produced: no model here uses them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from clmdetour.tasktypes import TaskType


class LengthGroupedBatchSampler(torch.utils.data.Sampler):
    """Batches of example indices, grouped by length.

    Training (``shuffle=True``): indices are shuffled with ``numpy``'s PCG64
    seeded by ``(seed, epoch)``, cut into megabatches of
    ``batch_size * megabatch_factor`` examples, each sorted by decreasing
    length and cut into batches; the batch order is then shuffled. Evaluation
    (``shuffle=False``): all indices sorted by decreasing length.

    Args:
        lengths: tokens per example.
        batch_size: examples per batch (the last batch may be smaller).
        shuffle: shuffle (training) or not (evaluation).
        seed: shuffling seed.
        megabatch_factor: batches per megabatch (transformers uses 50).

    Raises:
        ValueError: ``batch_size`` < 1.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, shuffle: bool, seed: int = 0, megabatch_factor: int = 50):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.megabatch = batch_size * megabatch_factor
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch used for shuffling (otherwise each pass increments it)."""
        self.epoch = epoch

    def _batches(self, epoch: int) -> list[list[int]]:
        n = len(self.lengths)
        if not self.shuffle:
            order = np.argsort(-self.lengths, kind="stable")
            return [order[i:i + self.batch_size].tolist() for i in range(0, n, self.batch_size)]
        rng = np.random.Generator(np.random.PCG64([self.seed, epoch]))
        perm = rng.permutation(n)
        batches = []
        for i in range(0, n, self.megabatch):
            mega = perm[i:i + self.megabatch]
            mega = mega[np.argsort(-self.lengths[mega], kind="stable")]
            batches += [mega[j:j + self.batch_size].tolist() for j in range(0, len(mega), self.batch_size)]
        return [batches[k] for k in rng.permutation(len(batches))]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._batches(self.epoch)
        self.epoch += 1
        return iter(batches)

    def __len__(self) -> int:
        return (len(self.lengths) + self.batch_size - 1) // self.batch_size


class PaddingCollator:
    """Pad a list of examples into a batch of tensors.

    Output keys: ``input_ids`` and ``attention_mask`` (``LongTensor[B, L]``,
    L = longest example, rounded up to ``pad_to_multiple_of``), and the task
    type's target tensors when the examples carry targets
    (:meth:`clmdetour.tasktypes.TaskType.collate_targets`).

    Args:
        pad_token_id: the tokenizer's padding id.
        task_type: the task's :class:`clmdetour.tasktypes.TaskType` (its ``collate_targets``), kept as ``task``.
        pad_to_multiple_of: round L up (8 suits tensor cores; 1 = no rounding).
    """

    def __init__(self, pad_token_id: int, task_type: TaskType, pad_to_multiple_of: int = 8):
        self.task = task_type
        self.pad_token_id = pad_token_id
        self.multiple = max(1, pad_to_multiple_of)

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        longest = max(len(e["input_ids"]) for e in examples)
        length = -(-longest // self.multiple) * self.multiple
        ids = torch.full((len(examples), length), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(examples), length), dtype=torch.long)
        for i, e in enumerate(examples):
            ids[i, :len(e["input_ids"])] = torch.tensor(e["input_ids"], dtype=torch.long)
            mask[i, :len(e["input_ids"])] = 1
        batch = {"input_ids": ids, "attention_mask": mask}
        batch.update(self.task.collate_targets(examples, length))
        return batch


def make_dataloader(examples: list[dict], batch_size: int, shuffle: bool, seed: int, collator: PaddingCollator) -> torch.utils.data.DataLoader:
    """A single-process ``DataLoader`` over ``examples`` with length-grouped batches."""
    sampler = LengthGroupedBatchSampler([len(e["input_ids"]) for e in examples], batch_size, shuffle, seed)
    return torch.utils.data.DataLoader(examples, batch_sampler=sampler, collate_fn=collator, num_workers=0)
