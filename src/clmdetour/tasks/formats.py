"""Readers of the non-BRAT task formats: CoNLL/BIO, JSONL/TSV/CSV, local Hub copies.

Every reader returns *raw rows*: dicts with ``id``, ``text`` and, by task type,
``words`` + ``tags`` (ner), ``label`` (multiclass) or ``labels`` (multilabel),
plus ``where`` (``file:line`` or ``folder[split] row n``) used in error
messages by the label-set checks, ``doc`` (the document the row belongs to:
the unit of hash splits and of a dev set derived from train) and, where the
reader made the id up, ``id_generated``. Errors are :class:`~clmdetour.tasktypes.records.FormatError`
naming the file and line (or the config key).

Encodings and line endings (every reader): files are UTF-8, with or without a
byte-order mark (removed); line endings may be LF, CRLF or CR; a byte that is
not UTF-8 is an error naming the file and line. Texts and words are returned
in Unicode NFC (https://unicode.org/reports/tr15/), so an NFD file gives the
same rows as an NFC one.

- **CoNLL/BIO**: one word per line, the word in the first column and its tag in
  the last (tab or space separated); a blank line ends a sentence. Lines
  starting with ``comment_prefix`` (default ``#``) before a sentence's first
  word are comments (CoNLL-U style: ``# sent_id = 1``, ``# text = ...``);
  ``-DOCSTART-`` lines and ``# doc_id = X`` / ``# newdoc id = X`` /
  ``# document_id = X`` comments start a document. ``doc_marker`` (a regex
  with one capture group, the document id) replaces that comment rule: it is
  searched in each comment line (prefix included) and ``-DOCSTART-`` line,
  and a match starts the document its group names (an empty group: a new
  numbered one). Sentences under the same id (``# doc=X sent=1``, ``# doc=X
  sent=2``) are one document; a new id starts another. Without ``doc_marker``,
  ``-DOCSTART- (227508)`` starts document ``227508`` (BC5CDR's PMIDs). The tag
  is in column ``tag_column`` (0-based, default -1: the last); every word line
  has as many columns as the file's first. Tags must be strict IOB2 (``O``,
  ``B-X``, ``I-X`` continuing ``X``), or IOB1 converted to IOB2 with
  ``tag_scheme: iob1`` (:func:`iob1_to_iob2`). ``text`` is the words joined by
  spaces. A file without document marks gives one document per sentence.
- **IOB TSV** (``iob_tsv``): ``word<TAB>tag`` a line, blank line between
  sentences, no comments: the CoNLL reader with exactly two tab-separated
  columns (:func:`read_iob_tsv`).
- **JSONL**: one JSON object per line; a file holding one JSON array of
  objects (``[{...}, {...}]``) is read too. **TSV**: a header row, then one
  row per example, fields separated by tabs and *no quoting* (a ``"`` is an
  ordinary character), unless ``quoting: csv``. **CSV**: a header row,
  comma-separated, RFC 4180 quoting (Python's ``csv`` with a strict dialect).
  A row whose number of fields differs from the header's is an error. Field
  names come from the task config (``text_field``, ``label_field``,
  ``id_field``, ``doc_id_field``; ``words_field`` / ``tags_field`` for NER in
  JSONL); a dotted name (``meta.title``) walks nested JSON objects, and
  ``text_field`` may be a list of fields joined by ``text_separator``. A
  multilabel field is a JSON list, or a string split on ``label_separator``.
  ``id_field``: when set, every row must have it; when null, no field is read
  as the id (not even one named ``id``): ids are ``<file stem>-<line>`` (Hub:
  ``<split>-<row>``) and the rows are marked ``id_generated`` (the manifest
  says so), and ``id_unused`` when the record has an ``id`` field all the same.
- **Hub**: a dataset snapshot already on disk (fetched by the ``fetch_task_hub``
  rule, or a local folder given as ``path``) loaded with
  ``datasets.load_dataset(<folder>, name=hub_config)``; parquet / arrow / json
  files only (``datasets`` >= 4 refuses loading scripts). Integer
  ``ClassLabel`` values are mapped to their names.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
from collections import Counter
from pathlib import Path

from clmdetour.tasktypes import TaskType
from clmdetour.tasktypes.records import (
    MISSING,
    FormatError,
    check_tags,
    get_field,
)
from clmdetour.textio import nfc, one_group_regex, text_lines, word_spans
from clmdetour.textio import read_text as _read_text

TABLE_FORMATS = ("jsonl", "tsv", "csv")
QUOTINGS = ("none", "csv")
# CoNLL comments that start a document (CoNLL-U's "# newdoc id = X" and common variants).
_DOC_COMMENT_RE = re.compile(r"(?:newdoc id|newdoc|doc_id|doc id|document_id|document id|docid)\s*[=:]?\s*(\S.*)?$",
                             re.IGNORECASE)
# a skipped comment that looks like a document mark (read_conll warns when the file then marks no documents)
_DOC_LIKE_RE = re.compile(r"doc=|doc_id|document", re.IGNORECASE)


def read_text(path: str | Path, what: str = "file") -> str:
    """UTF-8 text of ``path`` without its BOM (:func:`clmdetour.textio.read_text`); errors are FormatError."""
    return _read_text(path, what, FormatError)


class PlainTSV(csv.Dialect):
    """Tab-separated values without quoting: a ``"`` is an ordinary character (IANA text/tab-separated-values)."""

    delimiter = "\t"
    quoting = csv.QUOTE_NONE
    quotechar = None
    escapechar = None
    doublequote = False
    skipinitialspace = False
    lineterminator = "\n"
    strict = True


class QuotedTSV(csv.excel_tab):
    """Tab-separated values with CSV-style quoting (``quoting: csv``), strict: a stray quote is an error."""

    strict = True


class StrictCSV(csv.excel):
    """RFC 4180 comma-separated values, strict: a stray quote is an error."""

    strict = True


TAG_SCHEMES = ("iob2", "iob1")  # tasks.{task}.tag_scheme
# "-DOCSTART- (227508)": the document id in parentheses (BC5CDR, NCBI's PubTator exports); "-DOCSTART- -X- O" has none.
_DOCSTART_ID_RE = re.compile(r"^-DOCSTART-\s*\(\s*([^()]*?)\s*\)")


def iob1_to_iob2(tags: list[str]) -> tuple[list[str], int]:
    """IOB2 tags from IOB1 tags, and how many tags were changed.

    IOB1 (Ramshaw & Marcus 1995, the CoNLL-2003 files) writes ``B-X`` only where an
    entity of type ``X`` directly follows another of the same type; an entity
    otherwise starts with ``I-X``. IOB2 (Tjong Kim Sang & Veenstra 1999) starts
    every entity with ``B-X``. So an ``I-X`` that follows ``O``, the sentence start
    or a tag of another type becomes ``B-X``; every other tag is kept. A tag that
    is not ``O``/``B-*``/``I-*`` is kept as it is (the strict IOB2 check reports it).

    Args:
        tags: one sentence's tags, in order.

    Returns:
        ``(iob2_tags, converted)``: the tags (same length) and the number changed.
    """
    out: list[str] = []
    converted = 0
    for tag in tags:
        if tag.startswith("I-"):
            prev = out[-1] if out else "O"
            if prev == "O" or prev[2:] != tag[2:] or prev[:2] not in ("B-", "I-"):
                tag = "B-" + tag[2:]
                converted += 1
        out.append(tag)
    return out, converted


class _ConllReader:
    """One pass of :func:`read_conll` over a file: the sentence being read, its document, the rows so far.

    Fed line by line (:meth:`blank`, :meth:`docstart`, :meth:`comment`, :meth:`word_line`), then
    :meth:`finish`; arguments as :func:`read_conll`'s, ``marker`` compiled.
    """

    def __init__(self, path: Path, marker: re.Pattern | None, tag_column: int, tag_scheme: str, counts: Counter,
                 tag_column_key: str, tab_only: bool, columns: int | None, tag_scheme_key: str = "tag_scheme"):
        self.path, self.marker, self.tag_column, self.tag_scheme = path, marker, tag_column, tag_scheme
        self.tag_scheme_key = tag_scheme_key
        self.counts, self.tag_column_key, self.tab_only, self.columns = counts, tag_column_key, tab_only, columns
        self.rows: list[dict] = []
        self.words: list[str] = []
        self.tags: list[str] = []
        self.start = 1  # line of the sentence's first word (or the line after the last blank / comment)
        self.doc_id: str | None = None
        self.docs = 0  # documents started
        self.first_line: list[int] = []  # [line number, columns] of the file's first word line
        self.skipped = 0  # comment lines that start no document
        self.doc_like: tuple[int, str] | None = None  # the first skipped comment that looks like a document mark

    def flush(self) -> None:
        """End the sentence being read (if any): check its tags and add its row."""
        if self.words:
            where = f"{self.path}:{self.start}"
            sent = list(self.tags)
            if self.tag_scheme == "iob1":
                sent, n = iob1_to_iob2(sent)
                self.counts["iob1_converted_tags"] += n
            self.check(sent, where)
            text, offsets = word_spans(self.words)
            doc = f"{self.path.stem}#{self.doc_id}" if self.doc_id is not None else None
            self.rows.append({"id": f"{self.path.stem}-{self.start}", "text": text, "words": list(self.words),
                              "word_offsets": offsets, "tags": sent, "where": where, "doc": doc})
        self.words.clear()
        self.tags.clear()

    def check(self, tags: list[str], where: str) -> None:
        """Strict IOB2 check of one sentence's tags; under ``iob2``, an error that ``iob1`` would not raise
        (an entity starting with ``I-``) names ``tag_scheme_key: iob1``."""
        try:
            check_tags(tags, where)
        except FormatError as e:
            if self.tag_scheme != "iob2":
                raise
            try:
                check_tags(iob1_to_iob2(tags)[0], where)
            except FormatError:
                raise e from None
            raise FormatError(f"{e}; if the file is IOB1 (an entity may start with I-, as in CoNLL-2003), set "
                              f"{self.tag_scheme_key}: iob1 (converted to IOB2, counted in the manifest)") from None

    def new_doc(self, name: str | None) -> None:
        self.docs += 1
        self.doc_id = name or f"d{self.docs}"

    def blank(self, lineno: int) -> None:
        self.flush()
        self.start = lineno + 1

    def docstart(self, lineno: int, line: str) -> None:
        """A ``-DOCSTART-`` line: the sentence ends and a document starts (its id from the marker or ``(id)``)."""
        self.flush()
        m = self.marker.search(line) if self.marker else _DOCSTART_ID_RE.match(line)
        self.new_doc(((m.group(1) or "").strip() or None) if m else None)
        self.start = lineno + 1

    def comment(self, lineno: int, line: str, prefix: str) -> None:
        """A comment before a sentence: a document mark, or skipped (counted as ``comment_lines_skipped``)."""
        m = self.marker.search(line) if self.marker else _DOC_COMMENT_RE.match(line[len(prefix):].strip())
        if m:
            self.new_doc((m.group(1) or "").strip() or None)
        else:
            self.skipped += 1
            self.counts["comment_lines_skipped"] += 1
            if self.doc_like is None and _DOC_LIKE_RE.search(line):
                self.doc_like = (lineno, line)
        self.start = lineno + 1

    def word_line(self, lineno: int, line: str) -> None:
        """A word line: its columns checked against the file's first word line, its word and tag kept."""
        path, columns, tag_column = self.path, self.columns, self.tag_column
        cols = line.rstrip("\r\n").split("\t") if self.tab_only or "\t" in line else line.split()
        if self.tab_only or "\t" in line:
            cols = [c.strip() for c in cols]
            while len(cols) > 1 and cols[-1] == "" and (columns is None or len(cols) > columns):
                cols.pop()  # trailing tabs
        if len(cols) < 2:
            sep = "<TAB>" if self.tab_only else " ... "
            raise FormatError(f"{path}:{lineno}: expected '<word>{sep}<tag>', got {line!r}")
        if not self.first_line:
            self.first_line[:] = [lineno, columns or len(cols)]
        if len(cols) != self.first_line[1]:
            what = (f"every line has {columns} tab-separated columns (word, tag)" if columns else
                    f"the file's first word line ({path}:{self.first_line[0]}) has {self.first_line[1]}")
            raise FormatError(f"{path}:{lineno}: {len(cols)} columns, but {what}; got {line!r}")
        if not -len(cols) <= tag_column < len(cols) or tag_column in (0, -len(cols)):
            raise FormatError(f"{self.tag_column_key}: column {tag_column} is not a tag column of {path}:{lineno}, "
                              f"which has {len(cols)} columns (0-based, the word is column 0; -1 = the last)")
        if not self.words:
            self.start = lineno
        self.words.append(nfc(cols[0]))
        self.tags.append(cols[tag_column].strip())

    def finish(self) -> list[dict]:
        """The rows, each with its ``doc`` (a file without marks: one per sentence) and ``doc_marked``."""
        self.flush()
        marked = self.docs > 0
        for row in self.rows:
            if row["doc"] is None:
                row["doc"] = f"{self.path.stem}#d0" if marked else row["id"]
            row["doc_marked"] = marked
        return self.rows


def _warn_unread_doc_marks(reader: _ConllReader, doc_marker: str | None, doc_marker_key: str) -> None:
    """Warn when a file that marks no documents has a skipped comment that looks like a document mark."""
    if reader.docs or reader.doc_like is None:
        return
    lineno, line = reader.doc_like
    rule = (f"no comment matches {doc_marker_key} {doc_marker!r}" if doc_marker else
            "no -DOCSTART- line or '# doc_id = X' / '# newdoc id = X' / '# document_id = X' comment")
    logging.getLogger(__name__).warning(
        "%s:%d: comment %r looks like a document mark, but the file marks no documents (%s): it is read "
        "sentence by sentence (%d comment lines skipped), so a hash split or a derived dev may part a document's "
        "sentences; set %s to a regular expression whose one capture group is the document id (e.g. 'doc=(\\S+)')",
        reader.path, lineno, line.strip(), rule, reader.skipped, doc_marker_key)


def read_conll(path: str | Path, comment_prefix: str | None = "#", doc_marker: str | None = None,
               tag_column: int = -1, tag_scheme: str = "iob2", counts: Counter | None = None,
               tag_column_key: str = "tag_column", tab_only: bool = False, columns: int | None = None,
               doc_marker_key: str = "doc_marker", tag_scheme_key: str = "tag_scheme") -> list[dict]:
    """Read a CoNLL/BIO file into NER raw rows (see module doc).

    Args:
        path: the file (UTF-8, any line endings).
        comment_prefix: lines starting with it before a sentence's first word are
            comments; ``None`` reads every non-blank line as a word line.
        doc_marker: a regex with exactly one capture group (the document id), searched
            in comment lines and ``-DOCSTART-`` lines; a match starts that document.
            ``None``: ``-DOCSTART-`` (with its ``(id)`` when written) and the
            ``# doc_id = X`` comments of the module doc.
        tag_column: 0-based index of the tag column (negative: from the end; -1 = the
            last); the word is always column 0.
        tag_scheme: ``"iob2"`` (checked strictly) or ``"iob1"`` (converted to IOB2 by
            :func:`iob1_to_iob2`, the changed tags counted as ``iob1_converted_tags``).
        counts: a Counter receiving ``iob1_converted_tags`` and ``comment_lines_skipped``
            (comments that start no document) (optional).
        tag_column_key: the config key named when ``tag_column`` is out of range.
        tab_only: columns are separated by tabs only (a word may contain spaces);
            otherwise by tabs when the line has one, else by runs of whitespace.
        columns: the number of columns every word line must have (``None``: as many
            as the file's first word line).
        doc_marker_key: the config key named in the warning logged when the file marks no
            documents but a skipped comment looks like a mark (holds ``doc=``, ``doc_id`` or ``document``).
        tag_scheme_key: the config key named when strict IOB2 fails on tags that ``iob1`` would read
            (an entity starting with ``I-``).

    Returns:
        One row per sentence: ``id`` (``<stem>-<first line>``), ``text``, ``words``,
        ``tags`` (IOB2), ``where``, ``doc`` (``<stem>#<document id>`` when the file
        marks documents, e.g. ``train#227508`` after ``-DOCSTART- (227508)``, else the
        row id) and ``doc_marked`` (whether it does).

    Raises:
        FormatError: missing or non-UTF-8 file, a line with fewer than 2 columns, a
            word line whose column count differs from the file's first word line (or
            from ``columns``), a ``tag_column`` outside a line's columns (names the
            key, file and line), tags that are not strict IOB2 after the scheme's
            conversion (message ``<file>:<line>: ...``; under ``iob2``, when ``iob1`` would read
            them, it suggests ``tag_scheme_key: iob1``), an unknown ``tag_scheme``, or
            a ``doc_marker`` that is not a regex with exactly one capture group (names
            ``doc_marker``).
    """
    path = Path(path)
    if tag_scheme not in TAG_SCHEMES:
        raise FormatError(f"{path}: tag_scheme {tag_scheme!r} is not one of {TAG_SCHEMES}")
    marker = None if doc_marker is None else one_group_regex(doc_marker, "doc_marker", "the document id", FormatError)
    counts = counts if counts is not None else Counter()
    text = read_text(path, "CoNLL file")
    reader = _ConllReader(path, marker, tag_column, tag_scheme, counts, tag_column_key, tab_only, columns,
                          tag_scheme_key)
    for lineno, line in enumerate(text_lines(text), start=1):
        if not line.strip():
            reader.blank(lineno)
        elif line.startswith("-DOCSTART-"):
            reader.docstart(lineno, line)
        elif comment_prefix and not reader.words and line.startswith(comment_prefix):
            reader.comment(lineno, line, comment_prefix)
        else:
            reader.word_line(lineno, line)
    rows = reader.finish()
    _warn_unread_doc_marks(reader, doc_marker, doc_marker_key)
    return rows


def read_iob_tsv(path: str | Path, tag_scheme: str = "iob2", counts: Counter | None = None,
                 tag_scheme_key: str = "tag_scheme") -> list[dict]:
    """Read a two-column IOB TSV file (``word<TAB>tag`` a line, blank line between sentences) into NER raw rows.

    :func:`read_conll` with exactly two tab-separated columns, the tag last, no
    comments and no ``doc_marker`` (a ``-DOCSTART-`` line still starts a document).

    Raises:
        FormatError: as :func:`read_conll`; a line without exactly two tab-separated
            columns names the file and line.
    """
    return read_conll(path, comment_prefix=None, doc_marker=None, tag_column=-1, tag_scheme=tag_scheme,
                      counts=counts, tab_only=True, columns=2, tag_scheme_key=tag_scheme_key)


def _row_from_record(rec: dict, ttype: TaskType, fields: dict, where: str, default_id: str) -> dict:
    """One raw row from a record (JSON object, CSV row or Hub example)."""
    if not isinstance(rec, dict):
        raise FormatError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    id_field = fields.get("id_field")
    rid = get_field(rec, id_field) if id_field else MISSING
    if rid is MISSING or rid is None or str(rid).strip() == "":
        row = {"id": default_id, "where": where, "id_generated": True}
        if not id_field and get_field(rec, "id") not in (MISSING, None, ""):
            row["id_unused"] = True  # id_field null: an 'id' field is there but not read (manifest ids says so)
    else:
        row = {"id": str(rid).strip(), "where": where}
    doc_field = fields.get("doc_id_field")
    if doc_field:
        doc = get_field(rec, doc_field)
        if doc is MISSING or doc is None or str(doc).strip() == "":
            raise FormatError(f"{where}: document id field {doc_field!r} (doc_id_field) missing or empty; "
                              f"fields: {sorted(rec)}")
        row["doc"] = str(doc).strip()
    return ttype.read_record(rec, fields, where, row)


def _json_records(path: Path, text: str) -> list[tuple[str, object]]:
    """``(where, record)`` pairs of a JSON-lines file, or of a file holding one JSON array."""
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise FormatError(f"{path}:{e.lineno}: the file starts with '[' (a JSON array) but is not valid JSON: "
                              f"{e.msg}") from None
        if not isinstance(data, list):
            raise FormatError(f"{path}: expected JSON lines or a JSON array of objects")
        return [(f"{path}: array item {i}", rec) for i, rec in enumerate(data)]
    out = []
    for lineno, line in enumerate(text_lines(text), start=1):
        if not line.strip():
            continue
        try:
            out.append((f"{path}:{lineno}", json.loads(line)))
        except json.JSONDecodeError as e:
            try:
                whole = json.loads(text)
            except json.JSONDecodeError:
                whole = None
            if isinstance(whole, dict):
                raise FormatError(f"{path}: the file is one JSON object spread over several lines; jsonl expects "
                                  "one object per line (or a JSON array of objects)") from None
            raise FormatError(f"{path}:{lineno}: invalid JSON: {e.msg} (column {e.colno}); jsonl expects one "
                              "object per line") from None
    return out


def _table_records(path: Path, text: str, fmt: str, quoting: str | None) -> list[tuple[str, dict]]:
    """``(where, {column: value})`` pairs of a TSV or CSV file with a header row."""
    quoting = quoting or ("none" if fmt == "tsv" else "csv")
    if quoting not in QUOTINGS:
        raise FormatError(f"{path}: quoting must be one of {QUOTINGS}, got {quoting!r}")
    dialect = StrictCSV if fmt == "csv" else (PlainTSV if quoting == "none" else QuotedTSV)
    if fmt == "csv" and quoting == "none":
        dialect = type("PlainCSV", (PlainTSV,), {"delimiter": ","})
    reader = csv.reader(io.StringIO(text, newline=None), dialect=dialect)
    out = []
    try:
        header = next(reader, None)
        if not header:
            raise FormatError(f"{path}:1: empty file (a header row is expected)")
        header = [h.strip() for h in header]
        dup = sorted({h for h in header if header.count(h) > 1})
        if dup:
            raise FormatError(f"{path}:1: duplicate column names {dup} in the header")
        for values in reader:
            if not values or all(not v.strip() for v in values):
                continue
            where = f"{path}:{reader.line_num}"
            if len(values) != len(header):
                hint = ("; TSV is read without quoting: a tab inside a field needs quoting: csv"
                        if fmt == "tsv" and quoting == "none" else "")
                raise FormatError(f"{where}: {len(values)} fields, the header has {len(header)} "
                                  f"({header}){hint}")
            out.append((where, dict(zip(header, values))))
    except csv.Error as e:
        raise FormatError(f"{path}:{reader.line_num}: {fmt.upper()} quoting error: {e} (quoting: {quoting})") from None
    return out


def read_table(path: str | Path, fmt: str, ttype: TaskType, fields: dict) -> list[dict]:
    """Read a JSONL, TSV or CSV file into raw rows (see module doc).

    Args:
        path: the file (UTF-8, with or without BOM, any line endings).
        fmt: ``"jsonl"``, ``"tsv"`` or ``"csv"``.
        ttype: the task's type (:data:`clmdetour.tasktypes.TASK_TYPES`; its ``formats`` say which of
            ``fmt`` it reads; its ``read_record`` turns a record into a raw row).
        fields: ``text_field`` (a name, a dotted path or a list of them),
            ``text_separator``, ``label_field``, ``id_field`` (None: no id
            field, ids ``<file stem>-<line>``), ``doc_id_field``,
            ``words_field``, ``tags_field``, ``label_separator``, ``quoting``
            (TSV/CSV: ``none`` or ``csv``; None = ``none`` for TSV, ``csv`` for CSV).

    Raises:
        FormatError: missing or non-UTF-8 file, invalid JSON, a row whose field
            count differs from the header's, a missing field (the configured
            ``id_field`` included), an empty text, or a malformed label
            (``<file>:<line>: ...``).
    """
    path = Path(path)
    if fmt not in TABLE_FORMATS:
        raise FormatError(f"{path}: format {fmt!r} is not one of {TABLE_FORMATS}")
    text = read_text(path, f"{fmt} file")
    if fmt not in ttype.formats:
        raise FormatError(f"{path}: {ttype.description} tasks read {', '.join(ttype.formats)}, not {fmt}")
    records = _json_records(path, text) if fmt == "jsonl" else _table_records(path, text, fmt, fields.get("quoting"))
    rows = []
    for i, (where, rec) in enumerate(records):
        line = where.rsplit(":", 1)[-1] if fmt != "jsonl" or ": array item" not in where else str(i)
        rows.append(_row_from_record(rec, ttype, fields, where, f"{path.stem}-{line.strip()}"))
    generated = [r for r in rows if r.get("id_generated")]
    if fields.get("id_field") and generated:
        raise FormatError(f"{generated[0]['where']}: id field {fields['id_field']!r} (id_field) missing or empty; "
                          f"fields: {sorted(records[rows.index(generated[0])][1])}")
    return rows


def read_hub_snapshot(folder: str | Path, hub_config: str | None, split_map: dict[str, str], ttype: TaskType,
                      fields: dict) -> dict[str, list[dict]]:
    """Load a local Hub dataset snapshot with ``datasets`` and return raw rows per split.

    Args:
        folder: the snapshot folder (``resources/datasets/{name}``).
        hub_config: dataset configuration name, or ``None``.
        split_map: our split name (``train``/``dev``/``test``) -> the dataset's split
            name (e.g. ``dev`` -> ``validation``); a split missing from the map is not read.
        ttype, fields: as in :func:`read_table`.

    Raises:
        FormatError: folder missing, ``datasets`` cannot load it (e.g. a loading
            script), a mapped split is absent, or the configured ``id_field`` is missing.
    """
    import datasets

    folder = Path(folder)
    if not folder.is_dir():
        raise FormatError(f"{folder}: Hub snapshot folder not found (run the fetch_task_hub rule)")
    try:
        dd = datasets.load_dataset(str(folder), name=hub_config)
    except Exception as e:  # noqa: BLE001 (datasets raises many types (script refused, no data files ...))
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
            rows.append(_row_from_record(rec, ttype, fields, f"{folder}[{theirs}] row {i}", f"{theirs}-{i}"))
        generated = [r for r in rows if r.get("id_generated")]
        if fields.get("id_field") and generated:
            raise FormatError(f"{generated[0]['where']}: id field {fields['id_field']!r} (id_field) missing or empty; "
                              f"columns: {ds.column_names}")
        out[ours] = rows
    return out


def tag_scheme_report(spec: dict, info: dict) -> dict:
    """The conll / iob_tsv manifest's ``tag_scheme`` section: the scheme, the tag column and the IOB1 tags
    converted (``iob1_converted_tags`` of :func:`read_conll`, from ``info["annotations"]``)."""
    return {"scheme": spec["tag_scheme"], "tag_column": spec["tag_column"],
            "iob1_converted_tags": info["annotations"].get("iob1_converted_tags", 0)}
