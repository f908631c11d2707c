"""Readers of the BigBIO schemas from their Hub parquet exports (``bigbio_kb``, ``bigbio_text``).

BigBIO (Fries et al. 2022, https://github.com/bigscience-workshop/biomedical)
publishes each biomedical dataset in harmonised schemas. Their loading scripts
no longer run under ``datasets`` >= 4, but the Hub's parquet exports of the
same configurations do; this module reads those files with pyarrow.

Files: for a split named ``S`` (the Hub's own split name: ``train``,
``validation``, ``test``) and ``hub_config`` ``C`` (e.g.
``ncbi_disease_bigbio_kb``), the first pattern that matches any file:
``C/S-*.parquet``, ``C/S/*.parquet`` (the layout of the Hub's
``refs/convert/parquet`` branch), ``C/S.parquet``; without ``hub_config``:
``data/S-*.parquet``, ``data/S/*.parquet``, ``S-*.parquet``. The files of a
split are read in name order.

- ``bigbio_kb`` rows: ``id``, ``document_id``, ``passages`` (``id``, ``type``,
  ``text`` (list of strings), ``offsets`` (list of ``[start, end]``)),
  ``entities`` (``id``, ``type``, ``text``, ``offsets``, ``normalized``),
  ``relations``, ... The document text is formed by the passages placed at
  their offsets (characters between passages are spaces); every entity
  fragment's text must equal the document text at its offsets, else an error
  naming the file, row and entity id. A row becomes a
  :class:`clmdetour.tasks.brat.BratDocument`, so the BRAT keys
  (``segmentation``, ``discontinuous``, ``entity_types``, ``type_map``) apply.
  Relations are not read (counted as ``bigbio_relations_not_read``).
- ``bigbio_text`` rows: ``id``, ``document_id``, ``text``, ``labels`` (a list):
  a multilabel row keeps the list; a multiclass row must hold exactly one label.
  Row ids are ``<split>-<id>`` (BigBIO numbers rows per split, so a bare id
  repeats across splits); the document is ``document_id``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from clmdetour.tasks.brat import BratDocument, BratEntity
from clmdetour.tasktypes import TaskType
from clmdetour.tasktypes.records import FormatError
from clmdetour.textio import nfc

BIGBIO_FORMATS = ("bigbio_kb", "bigbio_text")


def split_files(folder: str | Path, hub_config: str | None, split: str) -> list[Path]:
    """The parquet files of one split (patterns in the module doc), sorted by name.

    Raises:
        FormatError: the folder is missing, or no pattern matches (names the patterns tried,
            and the configurations and parquet files the folder holds).
    """
    import glob

    folder = Path(folder)
    if not folder.is_dir():
        raise FormatError(f"{folder}: BigBIO parquet folder not found (run the fetch_task_hub rule, or give path)")
    base = glob.escape(str(folder))
    if hub_config:
        c = glob.escape(hub_config)
        patterns = [f"{c}/{split}-*.parquet", f"{c}/{split}/*.parquet", f"{c}/{split}.parquet"]
    else:
        patterns = [f"data/{split}-*.parquet", f"data/{split}/*.parquet", f"{split}-*.parquet"]
    for pattern in patterns:
        found = sorted(Path(p) for p in glob.glob(f"{base}/{pattern}"))
        if found:
            return found
    present = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.parquet"))[:8]
    configs = sorted({p.split("/")[0] for p in present if "/" in p})
    raise FormatError(f"{folder}: no parquet file for split {split!r} (hub_config {hub_config!r}; tried {patterns}); "
                      f"configurations present: {configs}; parquet files: {present}")


def read_parquet_rows(files: list[Path]) -> list[tuple[str, dict]]:
    """``(where, row)`` pairs of parquet files (``where``: ``<file> row <n>``, 0-based per file).

    Raises:
        FormatError: a file that pyarrow cannot read (names it).
    """
    import pyarrow.parquet as pq

    out = []
    for f in files:
        try:
            rows = pq.read_table(f).to_pylist()
        except Exception as e:  # noqa: BLE001 (pyarrow raises several types for a damaged file)
            raise FormatError(f"{f}: not a readable parquet file: {type(e).__name__}: {e}") from None
        out += [(f"{f} row {i}", r) for i, r in enumerate(rows)]
    return out


def _need(row: dict, keys: tuple[str, ...], where: str, schema: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise FormatError(f"{where}: {schema} row without {missing}; columns: {sorted(row)} (is the hub_config a "
                          f"{schema} configuration?)")


def _offsets(value, where: str, what: str) -> list[tuple[int, int]]:
    try:
        spans = [(int(s), int(e)) for s, e in value]
    except (TypeError, ValueError):
        raise FormatError(f"{where}: {what} offsets {value!r} are not a list of [start, end]") from None
    for s, e in spans:
        if s < 0 or e < s:
            raise FormatError(f"{where}: {what} offsets [{s}, {e}] are not a span (0 <= start <= end)")
    return spans


def kb_document(row: dict, where: str, counts: Counter | None = None) -> BratDocument:
    """One ``bigbio_kb`` row as a document: its passages' text with the entities at their offsets.

    Returns:
        A :class:`BratDocument` (``doc_id`` = ``document_id``, ``txt_path`` = ``where``), entity
        ``line`` = the entity's position in the row (for messages).

    Raises:
        FormatError: missing columns, no passage, a passage whose text length differs from its
            offsets or that overlaps another with other characters, or an entity whose text differs
            from the document at its offsets (names ``where`` and the entity id).
    """
    counts = counts if counts is not None else Counter()
    _need(row, ("document_id", "passages", "entities"), where, "bigbio_kb")
    doc_id = str(row["document_id"]).strip() or str(row.get("id"))
    pieces = []
    for p in row["passages"] or []:
        texts, spans = list(p.get("text") or []), _offsets(p.get("offsets") or [], where, f"passage {p.get('id')!r}")
        if len(texts) != len(spans):
            raise FormatError(f"{where}: passage {p.get('id')!r} has {len(texts)} texts for {len(spans)} offsets")
        for t, (s, e) in zip(texts, spans):
            if e - s != len(t):
                raise FormatError(f"{where}: passage {p.get('id')!r} text of {len(t)} characters at offsets "
                                  f"[{s}, {e}] ({e - s} characters)")
            pieces.append((s, t))
    if not pieces:
        raise FormatError(f"{where}: document {doc_id!r} has no passage text")
    buf: list[str | None] = [None] * max(s + len(t) for s, t in pieces)
    for s, t in pieces:
        for i, ch in enumerate(t):
            if buf[s + i] is not None and buf[s + i] != ch:
                raise FormatError(f"{where}: passages overlap at character {s + i} with different text")
            buf[s + i] = ch
    text = "".join(" " if c is None else c for c in buf)
    entities = []
    for k, ent in enumerate(row["entities"] or []):
        eid = ent.get("id")
        spans = _offsets(ent.get("offsets") or [], where, f"entity {eid!r}")
        written = list(ent.get("text") or [])
        if not spans:
            raise FormatError(f"{where}: entity {eid!r} has no offsets")
        got = [text[s:e] for s, e in spans]
        if (got != written if len(written) == len(spans) else " ".join(got) != " ".join(written)):
            raise FormatError(f"{where}: entity {eid!r} text {written!r} differs from the document text at its "
                              f"offsets {[list(x) for x in spans]}: {got!r} (document {doc_id!r})")
        entities.append(BratEntity(id=str(eid), type=str(ent.get("type")), fragments=spans,
                                   surface=" ".join(written), line=k))
    counts["bigbio_relations_not_read"] += len(row.get("relations") or [])
    return BratDocument(doc_id=doc_id, text=text, entities=entities, txt_path=where, ann_path=where)


def read_kb_split(folder: str | Path, hub_config: str | None, split: str,
                  counts: Counter | None = None) -> tuple[list[BratDocument], list[Path]]:
    """The ``bigbio_kb`` documents of one split, and the files read (:func:`kb_document`).

    Raises:
        FormatError: as :func:`split_files`, :func:`read_parquet_rows` and :func:`kb_document`.
    """
    files = split_files(folder, hub_config, split)
    return [kb_document(row, where, counts) for where, row in read_parquet_rows(files)], files


def read_text_split(folder: str | Path, hub_config: str | None, split: str, ttype: TaskType
                    ) -> tuple[list[dict], list[Path]]:
    """The raw rows of one ``bigbio_text`` split (module doc), and the files read (``ttype``: the task's type, a
    class-label type).

    Returns:
        Rows with ``id`` (``<split>-<id>``), ``text`` (NFC), ``doc`` (``document_id``),
        ``where``, ``raw_label`` and ``label`` (multiclass) or ``labels`` (multilabel).

    Raises:
        FormatError: missing columns, an empty text, labels that are not a list, or a
            multiclass row without exactly one label (names the file and row).
    """
    if "bigbio_text" not in ttype.formats:
        raise FormatError(f"{folder}: bigbio_text gives multiclass or multilabel tasks, not {ttype.name!r}")
    files = split_files(folder, hub_config, split)
    out = []
    for where, row in read_parquet_rows(files):
        _need(row, ("id", "document_id", "text", "labels"), where, "bigbio_text")
        text, labels = row["text"], row["labels"]
        if not isinstance(text, str) or not text.strip():
            raise FormatError(f"{where}: empty text")
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise FormatError(f"{where}: labels {labels!r} is not a list of strings")
        labels = list(dict.fromkeys(nfc(x).strip() for x in labels if x.strip()))
        rec = {"id": f"{split}-{row['id']}", "text": nfc(text), "doc": str(row["document_id"]), "where": where,
               "raw_label": row["labels"]}
        if not ttype.label_separator:  # one label a row (multiclass)
            if len(labels) != 1:
                raise FormatError(f"{where}: {len(labels)} labels {labels!r}; a multiclass task needs exactly one "
                                  "per row (use type: multilabel)")
            rec["label"] = labels[0]
        else:
            rec["labels"] = labels
        out.append(rec)
    return out, files
