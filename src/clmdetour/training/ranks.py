"""What the processes of one phase must agree on: a shared checkpoint folder, and who is who.

``check_shared_folder`` runs once at the start of a phase: rank 0 writes a
marker file with a fresh token into the checkpoint folder, every rank reads
it, and the ranks exchange their verdicts, so that every rank fails together
with one error naming the hosts that could not see it (a
``pretraining.checkpoint_root`` on node-local disk would otherwise be found
only when the retried job cannot resume). ``rank_records`` gathers, for
``run.json``, where each rank ran.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

MARKER = ".shared-folder-check"


class SharedFolderError(RuntimeError):
    """Some ranks cannot see the files rank 0 writes under ``pretraining.checkpoint_root``."""


def _read_marker(path: Path, token: str) -> str | None:
    """None when ``path`` holds ``token``, else why not (one line)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as e:
        return f"cannot read {path}: {e.strerror or e}"
    return None if text == token else f"{path} holds another token ({text[:12]}... instead of {token[:12]}...)"


def check_shared_folder(folder: str | Path) -> None:
    """Check that every rank sees what rank 0 writes into ``folder`` (collective: call on all ranks).

    Rank 0 writes ``{folder}/.shared-folder-check`` with a random token and
    broadcasts the token; each rank reads the file back; the verdicts are
    gathered on every rank. With one process it only checks that the folder
    is writable.

    Raises:
        SharedFolderError: on every rank, naming the ranks and hosts that could
            not read the marker, and the config key to change
            (``pretraining.checkpoint_root``).
    """
    from composer.utils import dist

    folder = Path(folder)
    path = folder / MARKER
    token = [uuid.uuid4().hex if dist.get_global_rank() == 0 else None]
    error = None
    if dist.get_global_rank() == 0:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(token[0], encoding="utf-8")
            os.replace(tmp, path)
        except OSError as e:
            from clmdetour.io import disk_space_error

            full = disk_space_error(path, e)
            error = str(full) if full is not None else f"cannot write {path}: {e.strerror or e}"
    dist.broadcast_object_list(token, src=0)
    dist.barrier()
    if error is None and dist.get_global_rank() != 0:
        error = _read_marker(path, token[0])
    verdicts = dist.all_gather_object({"rank": dist.get_global_rank(), "host": socket.gethostname(), "error": error})
    failed = [v for v in verdicts if v["error"]]
    full = [v for v in failed if "no space left on device" in v["error"]]
    if full:
        from clmdetour.io import DiskSpaceError

        raise DiskSpaceError(f"rank {full[0]['rank']} on {full[0]['host']}: {full[0]['error']}")
    if failed:
        lines = "; ".join(f"rank {v['rank']} on {v['host']}: {v['error']}" for v in failed)
        raise SharedFolderError(
            f"pretraining.checkpoint_root must be a folder that every node sees (shared file system), but "
            f"{folder} is not shared: {lines}. Set pretraining.checkpoint_root to shared scratch space")


def per_node_signal_files() -> None:
    """Give each node its own Composer signal files when the checkpoint folder is shared (idempotent).

    Composer 0.32.1 syncs the ranks of a node around autoresume and checkpoint
    loading with a signal file in the checkpoint folder, named by
    ``composer.utils.dist.get_node_signal_file_name``. That name is broadcast
    from global rank 0, so every node gets node 0's name; on a shared file
    system (which ``pretraining.checkpoint_root`` must be) the local rank 0 of
    each node writes and then removes the same file, and the second removal
    fails with FileNotFoundError at the start of every multi-node phase
    (reproduced by ``tests/test_slurm_cluster.py``'s 2-node job; upstream:
    mosaicml/llm-foundry#1736, mosaicml/composer#2363). This wraps the function
    so the broadcast name gets this node's rank appended: still one name per
    node, as the file wait within a node needs, and a different one per node.
    """
    from composer.utils import dist

    original = dist.get_node_signal_file_name
    if getattr(original, "per_node", False):
        return

    def get_node_signal_file_name(rng=None):
        return f"{original(rng)}_node{dist.get_node_rank()}"

    get_node_signal_file_name.per_node = True
    dist.get_node_signal_file_name = get_node_signal_file_name


def rank_records(resumed_from_step: int) -> list[dict]:
    """One record per rank (collective: call on all ranks): global, local and node rank, host, PID, resumed step."""
    from composer.utils import dist

    mine = {"rank": dist.get_global_rank(), "local_rank": dist.get_local_rank(), "node_rank": dist.get_node_rank(),
            "host": socket.gethostname(), "pid": os.getpid(), "resumed_from_step": int(resumed_from_step)}
    return sorted(dist.all_gather_object(mine), key=lambda r: r["rank"])
