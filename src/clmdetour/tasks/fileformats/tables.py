"""Table formats: ``jsonl`` (one JSON object a line, or one array), ``tsv`` and ``csv`` (a header row, then one row
per example). Fields are named by the task's reader keys (``text_field``, ``label_field``, ``id_field``,
``doc_id_field`` ...); the relation keys (``entity_markers``, ``label_map``) act on their rows. Reader:
:func:`clmdetour.tasks.formats.read_table`.
"""

from __future__ import annotations

from collections.abc import Mapping

from clmdetour.tasks.fileformats.base import FILES, TaskFormat


def _read(name: str):
    def read(reader, path, sub) -> list[dict]:
        from clmdetour.tasks.formats import read_table

        return reader.relation_rows(read_table(path, name, reader.ttype, reader.spec))

    return read


def _jsonl_description(spec: Mapping) -> str:
    from clmdetour.tasktypes import TASK_TYPES

    return TASK_TYPES[spec["type"]].jsonl_description(spec)  # a message about a spec resolved before


def _delimited_description(name: str):
    return lambda spec: (f"{name.upper()} with a header row and columns {spec['text_field']!r}, "
                         f"{spec['label_field']!r}")


JSONL = TaskFormat("jsonl", FILES, extension="jsonl", example_extension="json", describe=_jsonl_description,
                   read_unit=_read("jsonl"), fields=True, table=True)
TSV = TaskFormat("tsv", FILES, extension="tsv", describe=_delimited_description("tsv"), read_unit=_read("tsv"),
                 fields=True, table=True, string_fields=True)
CSV = TaskFormat("csv", FILES, extension="csv", describe=_delimited_description("csv"), read_unit=_read("csv"),
                 fields=True, table=True, string_fields=True)

ENTRIES = (JSONL, TSV, CSV)
