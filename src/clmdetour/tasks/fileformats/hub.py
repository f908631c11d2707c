"""Formats read by Hub split names: ``hub`` (a dataset snapshot loaded with ``datasets``), ``bigbio_kb`` (a BigBIO
knowledge-base parquet export: documents with passages and entities, read as BRAT documents) and ``bigbio_text``
(a BigBIO text-classification export). ``path`` is one folder; ``splits`` maps ours to the Hub's
(default ``train`` / ``validation`` / ``test``). Readers: :func:`clmdetour.tasks.formats.read_hub_snapshot`,
:mod:`clmdetour.tasks.bigbio`.
"""

from __future__ import annotations

from pathlib import Path

from clmdetour.tasks.fileformats.base import HUB, TaskFormat
from clmdetour.tasks.fileformats.folders import entity_policies, entity_reports


def _read_snapshot(reader) -> tuple[dict[str, list[dict]], None, dict]:
    from clmdetour.tasks.formats import read_hub_snapshot

    spec = reader.spec
    splits = read_hub_snapshot(Path(spec["path"]), spec.get("hub_config"), spec["splits"], reader.ttype, spec)
    return ({k: reader.relation_rows(v) for k, v in splits.items()}, None,
            {"policy": "given", "hub_splits": spec["splits"]})


def _read_bigbio(split_rows):
    """A BigBIO reader: ``split_rows(reader, folder, their split) -> (rows, parquet files)`` for each split."""
    def read(reader) -> tuple[dict[str, list[dict]], list[Path], dict]:
        spec, path = reader.spec, Path(reader.spec["path"])
        splits, roots, split_files = {}, [], {}
        for ours, theirs in spec["splits"].items():
            splits[ours], files = split_rows(reader, path, theirs)
            roots += files
            split_files[ours] = [str(f.relative_to(path)) for f in files]
        return splits, roots, {"policy": "given", "hub_splits": spec["splits"], "files": split_files}

    return read


def _kb_rows(reader, path: Path, split: str) -> tuple[list[dict], list[Path]]:
    from clmdetour.tasks import bigbio

    docs, files = bigbio.read_kb_split(path, reader.spec.get("hub_config"), split, reader.counts)
    return reader.brat_rows(docs), files


def _text_rows(reader, path: Path, split: str) -> tuple[list[dict], list[Path]]:
    from clmdetour.tasks import bigbio

    rows, files = bigbio.read_text_split(path, reader.spec.get("hub_config"), split, reader.ttype)
    return reader.relation_rows(rows), files


def _parquet_description(name: str):
    return lambda spec: (f"a folder of {name} parquet files, <hub_config>/<split>-*.parquet, "
                         "<hub_config>/<split>/*.parquet or data/<split>-*.parquet")


HUB_SNAPSHOT = TaskFormat("hub", HUB, describe=lambda spec: "a Hub dataset snapshot (parquet, arrow or json files)",
                          read_splits=_read_snapshot, local=False, fields=True, generated_ids="<split>-<row>")
BIGBIO_KB = TaskFormat("bigbio_kb", HUB, describe=_parquet_description("bigbio_kb"), read_splits=_read_bigbio(_kb_rows),
                       documents="segments", reports=entity_reports, policies=entity_policies)
BIGBIO_TEXT = TaskFormat("bigbio_text", HUB, describe=_parquet_description("bigbio_text"),
                         read_splits=_read_bigbio(_text_rows), documents="doc")

ENTRIES = (HUB_SNAPSHOT, BIGBIO_KB, BIGBIO_TEXT)
