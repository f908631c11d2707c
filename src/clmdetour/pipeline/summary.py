"""What the end of a successful run says again: the warnings its outputs recorded (Snakefile ``onsuccess``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from clmdetour.pipeline import paths


def run_warnings(root: str | Path = ".") -> list[str]:
    """The ``warnings`` lines of the corpus manifest (``results/corpus/manifest.json``) under ``root``, if any."""
    manifest = Path(root) / paths.CORPUS_MANIFEST
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [f"{paths.CORPUS_MANIFEST}: {w}" for w in data.get("warnings") or []]


def print_run_warnings(root: str | Path = ".", stream=None) -> int:
    """Print :func:`run_warnings` (stderr by default); returns how many."""
    lines = run_warnings(root)
    for line in lines:
        print(f"WARNING (recorded during the run): {line}", file=stream or sys.stderr)
    return len(lines)
