"""Reporting expected errors (bad input, bad config) as one clear line instead of a traceback."""

from __future__ import annotations

import sys
import traceback

# Exception classes whose message is the whole story for the user (they name the file, key or line).
EXPECTED = ("ConfigError", "SourceError", "DecontaminationError", "RepetitionError", "CausalityError",
            "TaskError", "TaskDataError", "ReleaseError", "FileNotFoundError")


def _hook(exc_type, exc, tb):
    # the process's own stderr: libraries may have swapped sys.stderr for a stream closed by now
    sys.stderr = sys.__stderr__ or sys.stderr
    names = {c.__name__ for c in exc_type.__mro__}
    if names & set(EXPECTED) or (exc_type is ValueError and str(exc)):
        print(f"error: {exc}", file=sys.stderr, flush=True)
        # keep the traceback in the log for developers, after the one-line message
        print("".join(traceback.format_exception(exc_type, exc, tb)), file=sys.stderr, flush=True)
        sys.exit(1)
    sys.__excepthook__(exc_type, exc, tb)


def install_excepthook() -> None:
    """Print ``error: <message>`` first for expected errors (then the traceback), and exit 1."""
    sys.excepthook = _hook
