"""Reporting expected errors (bad input, bad config) as one clear line instead of a traceback.

Where the message goes: to ``sys.stderr`` as the script left it. In a
``script:`` rule that is the rule's log file (:func:`clmdetour.smk.redirect_to_log`),
and Snakemake prints a failed job's log on the terminal (``show-failed-logs``
in every profile of this project), so the message reaches the log and the
terminal once each: the traceback after it ends with the error's class, not
its message again. A ``sys.stderr`` that a library closed falls back to the
process's own stderr.
"""

from __future__ import annotations

import sys
import traceback


class ExpectedError(Exception):
    """An error whose message is the whole story for the user: it names the file, key or line.

    The project's error classes derive from it (``ConfigError``, ``SourceError``,
    ``DecontaminationError``, ``RepetitionError``, ``CausalityError``, ``TaskError``,
    ``TaskDataError``, ``FormatError``, ``BratError``, ``FetchError``, ``ReleaseError``),
    each keeping its built-in base (``ValueError`` or ``RuntimeError``) for callers that
    catch those. The hook below prints such an error as one line before its traceback.
    """


class InputError(ExpectedError, ValueError):
    """Bad input (a file, a record, a config value) not covered by a more specific class; the message names it."""


# Built-in exceptions reported the same way (a missing file: the message names the path).
EXPECTED_BUILTINS: tuple[type[BaseException], ...] = (FileNotFoundError,)


#: The line a job stopped by Ctrl-C prints: every writer of this package writes to a temporary name and
#: renames it when complete (clmdetour.io), so what was being written is gone and what was finished stays.
INTERRUPTED = ("stopped by SIGINT (Ctrl-C): what this job was writing was removed, its previous complete output "
               "is kept ({output}.last-good); rerun to finish it")


def _stream():
    """The current stderr (the rule's log in a script: rule), or the process's own when it was closed."""
    stream = sys.stderr
    if stream is None or getattr(stream, "closed", False):
        stream = sys.__stderr__
    return stream


def _hook(exc_type, exc, tb):
    # No sys.exit here: the interpreter exits with status 1 after an uncaught exception anyway, and
    # torch.distributed wraps the hook (init_process_group) with one that captures sys.stderr in a
    # buffer and writes it out only when the hook returns; a SystemExit from inside lost the message
    # of every rank that died after the process group was set up.
    stream = _stream()
    if issubclass(exc_type, (ExpectedError, *EXPECTED_BUILTINS, KeyboardInterrupt)):
        message = INTERRUPTED if issubclass(exc_type, KeyboardInterrupt) else exc
        print(f"error: {message}", file=stream, flush=True)
        # keep the traceback in the log for developers, after the one-line message, without repeating the
        # message: show-failed-logs prints this log on the terminal, where the message then appears once
        frames = "".join(traceback.format_tb(tb))
        print(f"Traceback (most recent call last):\n{frames}{exc_type.__module__}.{exc_type.__qualname__}: "
              "(the error above)", file=stream, flush=True)
        return
    print("".join(traceback.format_exception(exc_type, exc, tb)), file=stream, end="", flush=True)


def install_excepthook() -> None:
    """Print ``error: <message>`` first for expected errors (then the traceback); the process then exits 1.

    Everything goes to the current ``sys.stderr`` (the rule's log file in a
    ``script:`` rule); see the module docstring.
    """
    sys.excepthook = _hook
