"""A task file format's entry (:class:`TaskFormat`) and the split layouts; the registry is
:mod:`clmdetour.tasks.fileformats`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: How a format lays out its splits: one folder per split (``subfolder`` applies, the split unit is the
#: document), one file per split (``train.<ext>``; a hash split reads one file), or the Hub's split names
#: (``train`` / ``validation`` / ``test``; ``path`` is one folder).
FOLDERS, FILES, HUB = "folders", "files", "hub"


@dataclass(frozen=True)
class TaskFormat:
    """One task file format.

    Attributes:
        name: the ``tasks.{task}.format`` value.
        layout: :data:`FOLDERS`, :data:`FILES` or :data:`HUB`.
        describe: ``spec -> one line`` describing the files a task of this format expects (errors about a
            user task's missing files).
        read_unit: :data:`FOLDERS` / :data:`FILES`: ``(reader, path, subfolder) -> raw rows`` of one file or
            folder (``reader``: :class:`clmdetour.tasks.reading.SourceReader`; rows with ``id``, ``text``,
            ``where``, ``doc`` and the type's label columns).
        read_splits: :data:`HUB`: ``reader -> (rows per split, files read or None, split rule)``.
        extension: :data:`FILES`: a split file's default name is ``<split>.<extension>``.
        example_extension: the extension shown in the "name your files" hint (default: ``extension``).
        local: the format can be named as a task's ``source`` (files on disk); False for ``hub``, read only
            from a Hub source.
        word_lines: one word a line: ``tag_column`` and ``tag_scheme`` apply, documents come from marks.
        doc_marks: documents are marked in the file (``-DOCSTART-``, ``doc_marker``): a file without marks is
            split sentence by sentence.
        tag_columns: the ``tag_column`` values the format allows (None: any column but the word's).
        fields: records with named fields: ids from ``id_field`` (generated when it is null).
        table: rows of a table file (one file a source): a hash split goes row by row without ``doc_id_field``.
        string_fields: every field is a string (TSV, CSV): a multilabel field is split on ``label_separator``.
        generated_ids: how generated ids look (``<file stem>-<line>``; Hub: ``<split>-<row>``).
        documents: how the manifest counts documents: ``rows`` (one a row), ``doc`` (distinct ``doc``) or
            ``segments`` (distinct files of sentence rows when ``segmentation: sentence``).
        reports: ``(spec, info) -> dict``: the manifest sections this format adds (e.g. ``icdo``).
        policies: ``spec -> dict``: the manifest's ``policies`` entries this format adds.
        types: task types the format gives besides those whose ``TaskType.formats`` list it.
    """

    name: str
    layout: str
    describe: Callable[[Mapping], str]
    read_unit: Callable[[Any, Path, str | None], list[dict]] | None = None
    read_splits: Callable[[Any], tuple[dict[str, list[dict]], list[Path] | None, dict]] | None = None
    extension: str | None = None
    example_extension: str | None = None
    local: bool = True
    word_lines: bool = False
    doc_marks: bool = False
    tag_columns: tuple[int, ...] | None = None
    fields: bool = False
    table: bool = False
    string_fields: bool = False
    generated_ids: str = "<file stem>-<line>"
    documents: str = "rows"
    reports: Callable[[Mapping, Mapping], dict] | None = None
    policies: Callable[[Mapping], dict] | None = None
    types: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if self.layout not in (FOLDERS, FILES, HUB):
            raise ValueError(f"format {self.name!r}: layout {self.layout!r} is not one of {(FOLDERS, FILES, HUB)}")
        if (self.layout == HUB) != (self.read_splits is not None) or (self.layout != HUB) != (self.read_unit is not None):
            raise ValueError(f"format {self.name!r}: a {self.layout} format needs "
                             f"{'read_splits' if self.layout == HUB else 'read_unit'} (and not the other)")
        if self.layout == FILES and not self.extension:
            raise ValueError(f"format {self.name!r}: a files format needs its extension")
        if self.documents not in ("rows", "doc", "segments"):
            raise ValueError(f"format {self.name!r}: documents {self.documents!r} is not rows, doc or segments")

    def default_splits(self) -> dict[str, str]:
        """The ``splits`` map when a task gives none: Hub split names, folder names or file names."""
        if self.layout == HUB:
            return {"train": "train", "dev": "validation", "test": "test"}
        if self.layout == FOLDERS:
            return {k: k for k in ("train", "dev", "test")}
        return {k: f"{k}.{self.extension}" for k in ("train", "dev", "test")}

    def hint_extension(self) -> str | None:
        """The extension of the example file names in the "name your files" hint (None: none)."""
        return self.example_extension or self.extension

    def gives(self, task_types: Mapping[str, Any]) -> tuple[str, ...]:
        """The names of the task types this format can hold: those listing it in their ``formats``, then
        :attr:`types` (``task_types``: :data:`clmdetour.tasktypes.TASK_TYPES`)."""
        listed = tuple(n for n, t in task_types.items() if self.name in t.formats)
        return listed + tuple(t for t in self.types if t not in listed)
