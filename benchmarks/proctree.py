"""Stopping a benchmark row and everything it started, however it started it (Linux ``/proc``).

A row runs in its own session (``start_new_session=True``) with an environment marker
(:data:`MARKER_KEY` = a token unique to the row). Its children inherit the marker even when they start their own
session or process group (the pipeline row's Snakemake and Composer's launcher do), so
:func:`stop_marked` finds them all in ``/proc/*/environ`` and ends each one's process group: SIGTERM, then,
after ``grace_s`` seconds, SIGKILL to whatever is left. A process that clears its environment escapes the
marker; the descendants of the row's pid (``/proc/*/stat``) are ended too, as a second net.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

MARKER_KEY = "CLMDETOUR_BENCH_ROW"


def new_marker() -> str:
    """A fresh marker value (hex, 32 characters)."""
    return uuid.uuid4().hex


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or not ours to read
        return False


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in ``/proc``."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name (field 2) may hold spaces and parentheses: split after its closing one
        fields = stat[stat.rfind(")") + 2:].split()
        out[int(entry.name)] = int(fields[1])
    return out


def descendants(root: int) -> set[int]:
    """Pids of every living descendant of ``root`` (not ``root`` itself)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def marked(marker: str) -> set[int]:
    """Pids of the living processes whose environment holds ``MARKER_KEY=marker`` (this process excluded)."""
    needle = f"{MARKER_KEY}={marker}".encode()
    me = os.getpid()
    return {int(e.name) for e in Path("/proc").iterdir()
            if e.name.isdigit() and int(e.name) != me and _environ_has(int(e.name), needle)}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"  # a zombie is dead, only unreaped
    except OSError:
        return False


def _signal_all(pids: set[int], sig: int) -> None:
    groups = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            continue
    own = os.getpgrp()
    for pgid in groups - {own}:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_marked(marker: str, root: int | None = None, grace_s: float = 5.0) -> list[int]:
    """End every process carrying ``marker`` and every descendant of ``root``: SIGTERM to each one's
    process group, SIGKILL after ``grace_s`` seconds to what is left.

    Returns:
        The pids still alive after the SIGKILL (empty when the whole tree is gone; zombies count as gone).
    """
    def tree() -> set[int]:
        pids = marked(marker)
        if root is not None:
            pids |= descendants(root) | ({root} if _alive(root) else set())
        return {p for p in pids if _alive(p)}

    _signal_all(tree(), signal.SIGTERM)
    end = time.monotonic() + grace_s
    while time.monotonic() < end and tree():
        time.sleep(0.1)
    for _ in range(3):  # a process may fork while it is being killed: sweep again
        left = tree()
        if not left:
            return []
        _signal_all(left, signal.SIGKILL)
        time.sleep(0.3)
    return sorted(tree())
