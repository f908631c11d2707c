"""The pretraining data stream over a packed corpus.

The prepared corpus (``results/corpus/train``) is an ordered list of packed
sequences. A phase reads ``n_sequences`` rows starting at ``offset`` (the
decay phase starts where phase 1 stopped, so it sees new data). Past the end
the stream wraps around: epoch ``e >= 1`` visits the rows in a permutation
seeded by ``(seed, e)``.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from clmdetour.errors import ExpectedError, InputError

log = logging.getLogger(__name__)


class RepetitionError(ExpectedError, ValueError):
    """The phase needs more tokens than the corpus holds and repetition is forbidden."""


class PackedStream(torch.utils.data.Dataset):
    """Rows ``offset .. offset + n_sequences - 1`` of the (wrapped) corpus stream.

    Args:
        rows: a ``datasets.Dataset`` (or any indexable) of dicts with
            ``input_ids`` (seq_len ints) and ``attention_mask``.
        offset: index of the first row in the stream (sequences).
        n_sequences: number of rows this phase reads.
        seed: seed of the per-epoch permutations.
    """

    def __init__(self, rows, offset: int, n_sequences: int, seed: int = 0):
        if len(rows) == 0:
            raise InputError("the packed corpus is empty")
        self.rows = rows
        self.offset = offset
        self.n_sequences = n_sequences
        self.seed = seed
        self._perms: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self.n_sequences

    @property
    def epochs(self) -> float:
        """How many passes over the corpus the stream end reaches (1.0 = exactly once)."""
        return (self.offset + self.n_sequences) / len(self.rows)

    def _row_index(self, i: int) -> int:
        j = self.offset + i
        epoch, k = divmod(j, len(self.rows))
        if epoch == 0:
            return k
        if epoch not in self._perms:
            self._perms[epoch] = np.random.default_rng([self.seed, epoch]).permutation(len(self.rows))
        return int(self._perms[epoch][k])

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < self.n_sequences:
            raise IndexError(i)
        return self.rows[self._row_index(i)]

    def real_tokens(self, n_rows: int | None = None) -> int:
        """Non-padding tokens in the stream's first ``n_rows`` rows (all rows by default).

        Token budgets, steps and offsets count positions (``rows x seq_len``, padding included);
        this counts what the model actually read, from the packed rows' ``n_tokens`` column
        (:func:`clmdetour.corpus.pack.pack_batch`), or their attention masks where that column is absent.
        """
        n = self.n_sequences if n_rows is None else min(int(n_rows), self.n_sequences)
        if n <= 0:
            return 0
        names = getattr(self.rows, "column_names", None) or []
        if "n_tokens" in names:
            counts = np.asarray(self.rows["n_tokens"], dtype=np.int64)
        else:
            counts = np.asarray([int(np.asarray(self.rows[k]["attention_mask"]).sum()) for k in range(len(self.rows))])
        j = self.offset + np.arange(n, dtype=np.int64)
        epoch, k = np.divmod(j, len(self.rows))
        idx = k.copy()
        for e in np.unique(epoch[epoch > 0]):
            if int(e) not in self._perms:
                self._perms[int(e)] = np.random.default_rng([self.seed, int(e)]).permutation(len(self.rows))
            sel = epoch == e
            idx[sel] = self._perms[int(e)][k[sel]]
        return int(counts[idx].sum())


def phase_stream(rows, tokens: int, seq_len: int, global_batch: int, offset_tokens: int = 0, seed: int = 0,
                 allow_repeat: bool = True, what: str = "phase") -> PackedStream:
    """The stream a phase of ``tokens`` tokens reads, starting after ``offset_tokens``.

    The packed corpus is one pass over the weighted mix at ``corpus.train_tokens``,
    phase 1's budget (docs/fidelity.md): phase 1 (``offset_tokens == 0``) reads it
    once. The sequence count is rounded up to whole global batches, so a phase
    trains on at least ``tokens`` tokens; phase 1 may therefore pass the end by
    less than one global batch. The decay starts where phase 1 ended and continues
    into the next passes, each reshuffled (:class:`PackedStream`): that is the
    recipe, not a repetition to warn about.

    Args:
        rows: the packed corpus rows (``len(rows) * seq_len`` tokens).
        tokens: the phase's token budget (tokens).
        seq_len: tokens per row.
        global_batch: sequences per optimizer step.
        offset_tokens: tokens of the stream consumed by earlier phases.
        seed: seed of the per-pass permutations.
        allow_repeat: ``corpus.allow_repeat``; applies to a phase starting at the
            stream's beginning.
        what: the phase's name in messages (``clm-detour/phase1``).

    Raises:
        RepetitionError: a phase starting at the stream's beginning passes its end
            by more than one global batch and ``allow_repeat`` is false.
    """
    per_step = global_batch * seq_len
    n_steps = math.ceil(tokens / per_step)
    offset = math.ceil(offset_tokens / seq_len)
    stream = PackedStream(rows, offset, n_steps * global_batch, seed)
    if offset > 0:
        if stream.epochs > 1.0:
            log.info("%s: reads passes %d-%d of the corpus (%s sequences from sequence %s), reshuffled per pass",
                     what, offset // len(rows) + 1, math.ceil(stream.epochs), f"{stream.n_sequences:,}", f"{offset:,}")
        return stream
    if stream.n_sequences > len(rows) + global_batch:
        msg = (f"{what}: {tokens:,} tokens need {stream.epochs:.2f} passes over the "
               f"{len(rows) * seq_len:,}-token corpus")
        if not allow_repeat:
            raise RepetitionError(msg + " and corpus.allow_repeat is false; set corpus.train_tokens to phase 1's "
                                  "budget or lower the token budget")
        log.warning(msg + "; the data repeats")
    return stream


class StepBlockSampler(torch.utils.data.distributed.DistributedSampler):
    """Rank ``rank`` of ``world`` reads, at step ``s``, the contiguous rows ``s*G + rank*P .. s*G + (rank+1)*P - 1``.

    ``G`` is the global batch and ``P = G / world`` the per-device batch
    (sequences). So the global batch of step ``s`` is rows ``s*G .. (s+1)*G - 1``
    whatever the world size, every row of the stream is read exactly once, by
    exactly one rank, and the micro-batches of one process with gradient
    accumulation ``world`` are the per-rank batches of ``world`` processes
    (which makes the two runs equal up to float rounding).

    A ``DistributedSampler`` (Composer requires one when the world size is
    above 1) with this block order instead of torch's strided one.

    Args:
        stream: the phase's rows (``len`` a multiple of ``global_batch``).
        global_batch: sequences per optimizer step over all ranks.
        world: number of ranks.
        rank: this rank.

    Raises:
        ValueError: ``global_batch`` not divisible by ``world``, or the row count not by ``global_batch``.
    """

    def __init__(self, stream, global_batch: int, world: int, rank: int):
        from clmdetour.config import plan_batch

        n_rows = len(stream)
        plan_batch(global_batch, None, world)  # the batch division rule, written once (a ConfigError: a ValueError)
        if n_rows % global_batch or not 0 <= rank < world:
            raise ValueError(f"StepBlockSampler: {n_rows} rows, global batch {global_batch}, world {world}, "
                             f"rank {rank}: the rows must divide by the batch and the rank be below the world")
        super().__init__(stream, num_replicas=world, rank=rank, shuffle=False, drop_last=True)
        self.n_rows, self.global_batch, self.world = n_rows, global_batch, world
        self.per_device = global_batch // world

    def __len__(self) -> int:
        return self.n_rows // self.world

    def __iter__(self):
        for start in range(self.rank * self.per_device, self.n_rows, self.global_batch):
            yield from range(start, start + self.per_device)



def phase_loader(stream, global_batch: int, collate_fn, world: int, rank: int) -> torch.utils.data.DataLoader:
    """The DataLoader one rank of a phase reads: per-device batches of :class:`StepBlockSampler`."""
    sampler = StepBlockSampler(stream, global_batch, world, rank)
    return torch.utils.data.DataLoader(stream, batch_size=sampler.per_device, sampler=sampler, collate_fn=collate_fn,
                                       num_workers=0, drop_last=True)
