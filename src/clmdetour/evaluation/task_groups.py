"""Tasks that share documents, read from the task manifests (``results/tasks/{task}/manifest.json``).

Several tasks can be built from the same documents: FrACCO-30, FrACCO-100 and
CANTEMIST label the same FRACCO cases with the same hash split. Their results
are not independent, so the sign test also counts each such group once
(:mod:`clmdetour.evaluation.table`).

Rule: each manifest lists every file its task read with its sha256 (``files``,
written by :func:`clmdetour.tasks.prepare.build_task`). Two tasks share
documents when the non-empty files they have in common (same sha256, i.e. the
same bytes wherever they lie) make up at least ``min_shared`` (default half)
of the smaller task's non-empty files. Groups are the connected components of
that relation. The fraction keeps small shared side files apart: QUAERO's
EMEA and MEDLINE folders hold identical BRAT ``annotation.conf``,
``visual.conf`` and ``tools.conf`` files but no common document.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from clmdetour.errors import InputError
from clmdetour.io import read_json


def file_hashes(manifest: dict, where: str = "manifest") -> set[str]:
    """The sha256 of every non-empty file a task manifest lists.

    Raises:
        ValueError: ``files`` is missing or an entry lacks ``sha256`` (the message names ``where``).
    """
    files = manifest.get("files")
    if not isinstance(files, list):
        raise InputError(f"{where}: key 'files' (list of {{path, sha256, bytes}}) is missing")
    out = set()
    for i, f in enumerate(files):
        if not isinstance(f, dict) or not f.get("sha256"):
            raise InputError(f"{where}: files[{i}] has no sha256")
        if f.get("bytes", 1) > 0:
            out.add(str(f["sha256"]))
    return out


def read_manifests(task_dirs: Mapping[str, str | Path]) -> dict[str, dict | None]:
    """Each task's ``manifest.json`` (None when the task folder or its manifest is absent).

    Raises:
        ValueError: a manifest that exists but is not a JSON object (names the file).
    """
    out: dict[str, dict | None] = {}
    for task, folder in task_dirs.items():
        path = Path(folder) / "manifest.json"
        if not path.exists():
            out[task] = None
            continue
        m = read_json(path)
        if not isinstance(m, dict):
            raise InputError(f"{path}: not a JSON object")
        out[task] = m
    return out


def document_groups(tasks: Sequence[str], manifests: Mapping[str, dict | None], min_shared: float = 0.5) -> list[list[str]]:
    """Partition ``tasks`` into groups of tasks that share documents (rule in the module doc).

    Args:
        tasks: task names, in table order.
        manifests: ``{task: manifest}``; a task without one (None or absent) is its own group.
        min_shared: fraction of the smaller task's non-empty files that must be common, in (0, 1].

    Returns:
        Groups in table order (by their first task), each listing its tasks in
        table order; every task is in exactly one group (singletons included).

    Raises:
        ValueError: ``min_shared`` outside (0, 1], or a manifest without file hashes.
    """
    if not 0 < min_shared <= 1:
        raise ValueError(f"min_shared must lie in (0, 1], got {min_shared!r}")
    hashes = {t: file_hashes(m, f"manifest of task {t!r}") for t in tasks if (m := manifests.get(t)) is not None}
    parent = {t: t for t in tasks}

    def root(t: str) -> str:
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    for i, a in enumerate(tasks):
        for b in tasks[i + 1:]:
            if a not in hashes or b not in hashes or not hashes[a] or not hashes[b]:
                continue
            common = len(hashes[a] & hashes[b])
            if common and common >= min_shared * min(len(hashes[a]), len(hashes[b])):
                parent[root(b)] = root(a)
    groups: dict[str, list[str]] = {}
    for t in tasks:
        groups.setdefault(root(t), []).append(t)
    return sorted(groups.values(), key=lambda g: list(tasks).index(g[0]))
