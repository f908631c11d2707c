"""Helper of tests/test_distributed_cpu.py, run by each rank through the launcher (``-m dist_data_order OUT``).

Builds a phase stream over numbered rows (a decay-like offset included) and
the DataLoader a phase builds (``phase_loader``), reads it to the end and
writes the row numbers this rank saw, step by step, to ``OUT/rank{rank}.json``.
"""

import json
import sys
from pathlib import Path

import numpy as np

from clmdetour.training.data import phase_loader, phase_stream


def main(out: str) -> None:
    from composer.utils import dist

    dist.initialize_dist("cpu", timeout=60)
    rows = [{"input_ids": np.full(8, i, dtype=np.int64)} for i in range(50)]
    # 3 steps of 8 sequences from offset 44 rows: reaches into the second (permuted) epoch.
    stream = phase_stream(rows, tokens=3 * 8 * 8, seq_len=8, global_batch=8, offset_tokens=44 * 8, seed=5)

    def collate(batch):
        return [int(b["input_ids"][0]) for b in batch]

    seen = [batch for batch in phase_loader(stream, 8, collate, dist.get_world_size(), dist.get_global_rank())]
    expected = [[stream._row_index(i) for i in range(s * 8, (s + 1) * 8)] for s in range(3)]
    Path(out, f"rank{dist.get_global_rank()}.json").write_text(json.dumps({"seen": seen, "expected": expected}))
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1])
