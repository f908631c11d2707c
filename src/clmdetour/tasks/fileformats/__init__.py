"""The registry of task file formats: one :class:`TaskFormat` entry per ``tasks.{task}.format`` value.

Every module that needs to know what a format implies asks this registry (:func:`get_format`), never compares
the name itself: how its splits are laid out (folders, files or Hub split names), how one file or folder is
read, which config keys apply to it, what the manifest reports about it, and how its files are described in a
message. Each format's entry lives in the module of its kind, beside what it needs from the config:

- :mod:`.folders`: ``brat`` (a folder of ``.txt`` + ``.ann`` pairs) and ``fracco`` (BRAT + ICD-O notes);
- :mod:`.words`: ``conll`` and ``iob_tsv`` (one word a line);
- :mod:`.tables`: ``jsonl``, ``tsv`` and ``csv`` (one record a line or row, with named fields);
- :mod:`.hub`: ``hub`` (a Hub snapshot loaded with ``datasets``), ``bigbio_kb`` and ``bigbio_text`` (a BigBIO
  parquet export).

The readers themselves stay in :mod:`clmdetour.tasks.brat`, :mod:`clmdetour.tasks.formats` and
:mod:`clmdetour.tasks.bigbio`. Adding a format is one entry registered with :func:`register` (its module, the
schema's ``source`` / ``format`` enums, which the test suite checks against :data:`FORMATS`, and a test);
a format added after a task type names the types it gives in :attr:`TaskFormat.types`.

This module imports no reader: the config checks and the Snakefile can use it without ``datasets``.
"""

from __future__ import annotations

from clmdetour.tasks.fileformats import folders, hub, tables, words
from clmdetour.tasks.fileformats.base import FILES, FOLDERS, HUB, TaskFormat

__all__ = ["FILES", "FOLDERS", "FORMATS", "HUB", "TaskFormat", "get_format", "hub_formats", "local_formats",
           "register"]

#: The registered formats, by name, in registration order (the order of the schema's enums).
FORMATS: dict[str, TaskFormat] = {}


def register(fmt: TaskFormat) -> TaskFormat:
    """Add a format to :data:`FORMATS` (returned, so a module can keep it).

    Raises:
        ValueError: a format of that name is already registered.
    """
    if fmt.name in FORMATS:
        raise ValueError(f"task format {fmt.name!r} is registered twice")
    FORMATS[fmt.name] = fmt
    return fmt


def get_format(name: str, where: str = "format") -> TaskFormat:
    """The registry entry of a format name.

    Raises:
        KeyError: ``name`` is not a registered format (the message names ``where`` and the known ones).
    """
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise KeyError(f"{where}: unknown task format {name!r}; known: {list(FORMATS)}") from None


def local_formats() -> tuple[str, ...]:
    """The formats a task's ``source`` can name (files on disk), in registry order."""
    return tuple(n for n, f in FORMATS.items() if f.local)


def hub_formats() -> tuple[str, ...]:
    """The formats read by Hub split names (a ``hub`` source's ``format``: null is the first of them)."""
    return tuple(n for n, f in FORMATS.items() if f.layout == HUB)


for _module in (folders, words, tables, hub):  # the schema's order
    for _fmt in _module.ENTRIES:
        register(_fmt)
