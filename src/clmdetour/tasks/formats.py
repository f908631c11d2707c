"""Readers of the non-BRAT task formats: CoNLL/BIO, JSONL/TSV/CSV, local Hub copies.

Every reader returns *raw rows*: dicts with ``id``, ``text`` and, by task type,
``words`` + ``tags`` (ner), ``label`` (multiclass) or ``labels`` (multilabel),
plus ``where`` (``file:line`` or ``folder[split] row n``) used in error
messages by the label-set checks. Errors are :class:`FormatError` naming the
file and line.

- **CoNLL/BIO**: one word per line, the word in the first column and its tag in
  the last (tab or space separated); a blank line ends a sentence;
  ``-DOCSTART-`` lines are skipped. Tags must be strict IOB2 (``O``,
  ``B-X``, ``I-X`` continuing ``X``). ``text`` is the words joined by spaces.
- **JSONL**: one JSON object per line. **TSV/CSV**: a header row, then one row
  per example (Python's ``csv`` module; TSV uses a tab delimiter). Field names
  come from the task config (``text_field``, ``label_field``, ``id_field``;
  ``words_field`` / ``tags_field`` for NER in JSONL). A multilabel field is a
  JSON list, or in TSV/CSV a string split on ``label_separator``. A missing
  id gets ``<file stem>-<line>``.
- **Hub**: a dataset snapshot already on disk (fetched by the ``fetch_task_hub``
  rule) loaded with ``datasets.load_dataset(<folder>, name=hub_config)``;
  parquet / arrow / json files only (``datasets`` >= 4 refuses loading
  scripts). Integer ``ClassLabel`` values are mapped to their names.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from clmdetour.tasks.brat import iob2_to_spans

TABLE_FORMATS = ("jsonl", "tsv", "csv")


class FormatError(ValueError):
    """A task source file cannot be used; the message names the file and line."""


def _check_tags(tags: list[str], where: str) -> None:
    try:
        iob2_to_spans(tags)
    except ValueError as e:
        raise FormatError(f"{where}: {e}") from None


def read_conll(path: str | Path) -> list[dict]:
    """Read a CoNLL/BIO file into NER raw rows (see module doc).

    Raises:
        FormatError: missing file, a line with fewer than 2 columns, or tags that
            are not strict IOB2 (message ``<file>:<line>: ...``).
    """
    path = Path(path)
    if not path.is_file():
        raise FormatError(f"{path}: CoNLL file not found")
    rows: list[dict] = []
    words: list[str] = []
    tags: list[str] = []
    start = 1

    def flush():
        if words:
            where = f"{path}:{start}"
            _check_tags(tags, where)
            rows.append({"id": f"{path.stem}-{start}", "text": " ".join(words), "words": list(words),
                         "tags": list(tags), "where": where})
        words.clear()
        tags.clear()

    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip("\n\r")
            if not line.strip():
                flush()
                start = lineno + 1
                continue
            if line.startswith("-DOCSTART-"):
                start = lineno + 1
                continue
            cols = line.split("\t") if "\t" in line else line.split()
            if len(cols) < 2:
                raise FormatError(f"{path}:{lineno}: expected '<word> ... <tag>', got {line!r}")
            if not words:
                start = lineno
            words.append(cols[0])
            tags.append(cols[-1].strip())
    flush()
    return rows


def _as_label_list(value, sep: str, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, str):
        return [p.strip() for p in value.split(sep) if p.strip()]
    raise FormatError(f"{where}: multilabel field must be a list or a {sep!r}-separated string, got {value!r}")


def _row_from_record(rec: dict, task_type: str, fields: dict, where: str, default_id: str) -> dict:
    """One raw row from a record (JSON object, CSV row or Hub example)."""
    if not isinstance(rec, dict):
        raise FormatError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    rid = rec.get(fields["id_field"]) if fields.get("id_field") else None
    row = {"id": str(rid) if rid not in (None, "") else default_id, "where": where}
    if task_type == "ner":
        for key in ("words_field", "tags_field"):
            if fields[key] not in rec:
                raise FormatError(f"{where}: field {fields[key]!r} ({key}) missing; fields: {sorted(rec)}")
        words, tags = rec[fields["words_field"]], rec[fields["tags_field"]]
        if not isinstance(words, list) or not isinstance(tags, list) or len(words) != len(tags):
            raise FormatError(f"{where}: {fields['words_field']!r} and {fields['tags_field']!r} must be lists of "
                              "equal length")
        tags = [str(t) for t in tags]
        _check_tags(tags, where)
        row.update(words=[str(w) for w in words], tags=tags,
                   text=str(rec.get(fields["text_field"]) or " ".join(str(w) for w in words)))
        return row
    if fields["text_field"] not in rec:
        raise FormatError(f"{where}: text field {fields['text_field']!r} missing; fields: {sorted(rec)}")
    if fields["label_field"] not in rec:
        raise FormatError(f"{where}: label field {fields['label_field']!r} missing; fields: {sorted(rec)}")
    text = rec[fields["text_field"]]
    if not isinstance(text, str) or not text.strip():
        raise FormatError(f"{where}: text field {fields['text_field']!r} is empty or not a string")
    row["text"] = text
    value = rec[fields["label_field"]]
    if task_type == "multiclass":
        if isinstance(value, (list, dict)) or value is None or str(value).strip() == "":
            raise FormatError(f"{where}: multiclass label {fields['label_field']!r} must be one value, got {value!r}")
        row["label"] = str(value).strip()
    else:
        row["labels"] = _as_label_list(value, fields.get("label_separator") or "|", where)
    return row


def read_table(path: str | Path, fmt: str, task_type: str, fields: dict) -> list[dict]:
    """Read a JSONL, TSV or CSV file into raw rows (see module doc).

    Args:
        path: the file.
        fmt: ``"jsonl"``, ``"tsv"`` or ``"csv"``.
        task_type: ``"ner"`` (JSONL only), ``"multiclass"`` or ``"multilabel"``.
        fields: ``text_field``, ``label_field``, ``id_field``, ``words_field``,
            ``tags_field``, ``label_separator``.

    Raises:
        FormatError: missing file, invalid JSON, a missing field, an empty text,
            or a malformed label (``<file>:<line>: ...``).
    """
    path = Path(path)
    if fmt not in TABLE_FORMATS:
        raise FormatError(f"{path}: format {fmt!r} is not one of {TABLE_FORMATS}")
    if not path.is_file():
        raise FormatError(f"{path}: {fmt} file not found")
    if task_type == "ner" and fmt != "jsonl":
        raise FormatError(f"{path}: NER tasks read CoNLL, JSONL (words/tags fields) or BRAT, not {fmt}")
    rows = []
    with open(path, encoding="utf-8", newline="") as f:
        if fmt == "jsonl":
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise FormatError(f"{where}: invalid JSON: {e.msg}") from None
                rows.append(_row_from_record(rec, task_type, fields, where, f"{path.stem}-{lineno}"))
        else:
            reader = csv.DictReader(f, delimiter="\t" if fmt == "tsv" else ",")
            for rec in reader:
                where = f"{path}:{reader.line_num}"
                rows.append(_row_from_record(rec, task_type, fields, where, f"{path.stem}-{reader.line_num}"))
    return rows


def read_hub_snapshot(folder: str | Path, hub_config: str | None, split_map: dict[str, str], task_type: str,
                      fields: dict) -> dict[str, list[dict]]:
    """Load a local Hub dataset snapshot with ``datasets`` and return raw rows per split.

    Args:
        folder: the snapshot folder (``resources/datasets/{name}``).
        hub_config: dataset configuration name, or ``None``.
        split_map: our split name (``train``/``dev``/``test``) -> the dataset's split
            name (e.g. ``dev`` -> ``validation``); a split missing from the map is not read.
        task_type, fields: as in :func:`read_table`.

    Raises:
        FormatError: folder missing, ``datasets`` cannot load it (e.g. a loading
            script), or a mapped split is absent.
    """
    import datasets

    folder = Path(folder)
    if not folder.is_dir():
        raise FormatError(f"{folder}: Hub snapshot folder not found (run the fetch_task_hub rule)")
    try:
        dd = datasets.load_dataset(str(folder), name=hub_config)
    except Exception as e:  # datasets raises many types (script refused, no data files ...)
        raise FormatError(f"{folder}: datasets.load_dataset failed: {type(e).__name__}: {e}") from None
    out: dict[str, list[dict]] = {}
    for ours, theirs in split_map.items():
        if theirs not in dd:
            raise FormatError(f"{folder}: split {theirs!r} (for {ours}) not in the dataset; splits: {sorted(dd)}")
        ds = dd[theirs]
        names = {}
        for col, feat in ds.features.items():
            inner = getattr(feat, "feature", None)
            if isinstance(feat, datasets.ClassLabel):
                names[col] = feat.names
            elif isinstance(inner, datasets.ClassLabel):
                names[col] = inner.names
            elif isinstance(feat, list) and feat and isinstance(feat[0], datasets.ClassLabel):
                names[col] = feat[0].names
        rows = []
        for i, rec in enumerate(ds):
            for col, labels in names.items():
                v = rec[col]
                rec[col] = [labels[x] for x in v] if isinstance(v, list) else labels[v]
            rows.append(_row_from_record(rec, task_type, fields, f"{folder}[{theirs}] row {i}", f"{theirs}-{i}"))
        out[ours] = rows
    return out

