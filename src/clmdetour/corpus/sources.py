"""Loading pretraining-corpus sources as ``datasets.Dataset`` objects with one ``text`` column.

Formats: ``hub`` (a Hub dataset already fetched into ``resources/datasets/{name}/``
by the fetch rule, read offline with ``datasets.load_dataset``), ``jsonl``,
``csv``, ``text`` (one document per line), ``parquet`` (local files or folders,
through the ``datasets`` builders of the same names), and ``demo`` (the rows of
the generated demo corpus whose ``source`` equals the source name).

Local files are UTF-8 with or without a byte-order mark, with LF, CRLF or CR
line endings; texts leave here in Unicode NFC (an NFD file gives the same
documents as an NFC one), without a leading BOM. A source that cannot be
loaded raises :class:`SourceError` naming the source, its config key
(``corpus.sources``, by name) and the file or Hub id.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

from clmdetour.errors import ExpectedError

BUILDERS = {"jsonl": "json", "csv": "csv", "text": "text", "parquet": "parquet"}


class SourceError(ExpectedError, ValueError):
    """A corpus source cannot be read; the message names the source and file."""


def check_utf8(path: Path, source: str) -> None:
    """Fail on the first line of ``path`` that is not valid UTF-8.

    Raises:
        SourceError: naming the source, the file and the line number.
    """
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise SourceError(f"corpus source {source!r}: {path} line {lineno} is not valid UTF-8 "
                                  f"(byte {e.start}: {line[e.start:e.start + 4]!r})") from None


def _clean_texts(batch: dict) -> dict:
    """Batch function: a leading BOM removed and Unicode NFC, for every text."""
    out = []
    for t in batch["text"]:
        if isinstance(t, str):
            t = t.lstrip("\ufeff")
            if not unicodedata.is_normalized("NFC", t):
                t = unicodedata.normalize("NFC", t)
        out.append(t)
    return {"text": out}


def source_files(path: Path, fmt: str) -> list[str]:
    """The files of a source path (a file, or a folder's files of the format's suffixes, sorted).

    Raises:
        SourceError: a folder without such files, or an entry of that suffix that is a broken link.
    """
    if path.is_dir():
        suffixes = {"jsonl": (".jsonl", ".json"), "csv": (".csv",), "text": (".txt",), "parquet": (".parquet",)}[fmt]
        entries = sorted(p for p in path.rglob("*") if p.suffix in suffixes)
        broken = [p for p in entries if p.is_symlink() and not p.exists()]
        if broken:
            raise SourceError(f"{broken[0]}: a link to a file that does not exist ({os.readlink(broken[0])})")
        files = [str(p) for p in entries if p.is_file()]  # a folder named like a file is walked, not read
        if not files:
            raise SourceError(f"{path}: no {'/'.join(suffixes)} files in this folder")
        return files
    return [str(path)]


def _first_json_line_problem(path: str) -> str | None:
    """The first non-blank line of a JSON-lines file, if it is not a JSON object, as ``file:line: ...``.

    Cheap (one line per file), and needed before ``datasets`` reads the file: a file whose lines are
    ``null`` crashes its JSON reader (a segmentation fault in pyarrow, not an exception).
    """
    import json

    with open(path, encoding="utf-8", errors="replace") as f:
        for i, line in enumerate(f, start=1):
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    return None  # datasets reports it, first_bad_json_line names it
                if not isinstance(obj, dict):
                    return (f"{path}:{i}: a JSON {json_kind(obj) if obj is not None else 'null'}, not an object; "
                            "each line must be one JSON object")
                return None
    return None


def load_source(source: dict, root: str | Path = ".", demo_corpus: str | Path | None = None,
                hub_dir: str | Path | None = None, hub_group: tuple[int, int] | None = None, normalize: bool = True):
    """Load one configured source as a Dataset with a single ``text`` column.

    Args:
        source: one entry of ``corpus.sources`` (validated config).
        root: folder relative paths are resolved against (the workflow's working directory).
        demo_corpus: the generated demo corpus JSONL (format ``demo``).
        hub_dir: the fetched copy of a Hub dataset (format ``hub``).
        hub_group: ``(k, n)``: only the ``k``-th of ``n`` contiguous groups of the Hub split's data
            files (sorted), one corpus shard (:mod:`clmdetour.corpus.shards`); None = every file.
        normalize: strip a leading BOM and apply NFC here (one more pass over the text); False leaves
            both to the caller (a corpus shard's cleaning does both: ``clean_text``).

    Returns:
        ``datasets.Dataset`` with column ``text`` (str).

    Raises:
        SourceError: missing file, non-UTF-8 file, a file or Hub copy ``datasets``
            cannot load, missing text field, or an empty source; the message names
            the source and its config key.
    """
    name, fmt = source["name"], source["format"]
    field = source.get("text_field", "text")
    files: list[str] = []
    if fmt == "demo":
        ds, where = _load_demo(name, demo_corpus)
    elif fmt == "hub":
        ds, where = _load_hub(source, hub_dir, hub_group)
        if ds is None:
            return empty_text_dataset()
    elif fmt in BUILDERS:
        ds, where, files = _load_files(source, root, field)
    else:
        raise SourceError(f"corpus source {name!r}: unknown format {fmt!r}")
    if fmt == "text":
        field = "text"
    if field not in ds.column_names:
        raise SourceError(f"corpus source {name!r}: {where} has no field {field!r}; fields: {ds.column_names}")
    ds = ds.select_columns([field])
    if field != "text":
        ds = ds.rename_column(field, "text")
    if len(ds) == 0:
        raise SourceError(f"corpus source {name!r}: {where} holds no documents")
    check_text_type(ds, name, field, files, fmt, where)
    return ds.map(_clean_texts, batched=True) if normalize else ds


def empty_text_dataset():
    """A Dataset with a ``text`` column (strings) and no row: what an empty corpus shard reads."""
    import datasets

    return datasets.Dataset.from_dict({"text": []}, features=datasets.Features({"text": datasets.Value("string")}))


def _load_demo(name: str, demo_corpus: str | Path | None):
    """``(dataset, where)`` of the demo corpus rows of source ``name``. Raises SourceError."""
    import datasets

    if demo_corpus is None:
        raise SourceError(f"corpus source {name!r}: format 'demo' needs the generated demo corpus")
    try:
        ds = datasets.load_dataset("json", data_files=str(demo_corpus), split="train")
        ds = ds.filter(lambda s: s == name, input_columns="source")
    except Exception as e:  # noqa: BLE001 (datasets raises many types)
        raise SourceError(f"corpus source {name!r} (config corpus.sources, format demo): cannot load the demo "
                          f"corpus {demo_corpus}: {type(e).__name__}: {_first_line(e)}") from None
    return ds, str(demo_corpus)


def hub_split_files(source: dict, hub_dir: str | Path) -> tuple[str, list[str]]:
    """``(builder, files)``: the ``datasets`` packaged builder (``parquet``, ``json`` ...) of a fetched Hub
    dataset and the sorted data files of its configured split.

    Raises:
        Exception: as ``datasets.load_dataset_builder`` (the caller names the source).
    """
    import datasets

    builder = datasets.load_dataset_builder(str(hub_dir), name=source.get("hub_config"))
    split = source.get("split", "train")
    files = {str(k): v for k, v in (builder.config.data_files or {}).items()}.get(split)
    if files is None:
        raise ValueError(f"no split {split!r}; splits: {sorted(str(k) for k in builder.config.data_files or {})}")
    return builder.name, sorted(str(f) for f in files)


def _load_hub(source: dict, hub_dir: str | Path | None, group: tuple[int, int] | None = None):
    """``(dataset, where)`` of a fetched Hub dataset (``group``: one contiguous group of its files). Raises SourceError."""
    import datasets

    name = source["name"]
    if hub_dir is None or not Path(hub_dir).exists():
        raise SourceError(f"corpus source {name!r}: Hub dataset {source.get('hub_id')!r} was not fetched "
                          f"into {hub_dir} (run the fetch_dataset rule with network access)")
    try:
        if group is None:
            ds = datasets.load_dataset(str(hub_dir), name=source.get("hub_config"), split=source.get("split", "train"))
        else:
            builder, files = hub_split_files(source, hub_dir)
            k, n = group
            part = files[k * len(files) // n:(k + 1) * len(files) // n]
            if not part:  # fewer files than shards: this shard reads nothing
                return None, f"{source.get('hub_id')} ({hub_dir})"
            ds = datasets.load_dataset(builder, data_files=part, split="train")
    except Exception as e:  # noqa: BLE001 (datasets raises many types (no data files, unknown split or config ...))
        raise SourceError(f"corpus source {name!r} (config corpus.sources, hub_id {source.get('hub_id')!r}, "
                          f"hub_config {source.get('hub_config')!r}, split {source.get('split', 'train')!r}): "
                          f"datasets cannot load {hub_dir}: {type(e).__name__}: {_first_line(e)}") from None
    return ds, f"{source.get('hub_id')} ({hub_dir})"


def _load_files(source: dict, root: str | Path, field: str):
    """``(dataset, where, files)`` of a local file source (``BUILDERS`` formats), its files checked
    first (empty, not UTF-8, a bad first JSON line). Raises SourceError."""
    import datasets

    name, fmt = source["name"], source["format"]
    if not source.get("path"):
        raise SourceError(f"corpus source {name!r}: format {fmt!r} needs 'path'")
    path = Path(root) / source["path"]
    if not path.exists():
        raise SourceError(f"corpus source {name!r}: {path} does not exist")
    files = source_files(path, fmt)
    empty = [f for f in files if fmt != "parquet" and not has_content(Path(f))]
    if len(empty) == len(files):
        raise SourceError(f"corpus source {name!r} (config corpus.sources): {', '.join(empty[:3])} "
                          f"{'is' if len(empty) == 1 else 'are'} empty (no line with text); give the "
                          "source's documents or remove the source")
    files = [f for f in files if f not in empty]  # an empty file among full ones adds nothing
    if fmt != "parquet":
        for f in files:
            check_utf8(Path(f), name)
    for f in files if fmt == "jsonl" else []:
        bad = _first_json_line_problem(f)
        if bad:
            raise SourceError(f"corpus source {name!r} (config corpus.sources): {bad}")
    try:
        ds = datasets.load_dataset(BUILDERS[fmt], data_files=files, split="train")
    except Exception as e:  # noqa: BLE001 (datasets raises many types for malformed files)
        bad = first_bad_json_line(files, field) if fmt == "jsonl" else None
        if bad:
            raise SourceError(f"corpus source {name!r} (config corpus.sources): {bad}") from None
        if "corresponds to no data" in str(e):
            raise SourceError(f"corpus source {name!r} (config corpus.sources): {path} holds no documents "
                              f"(no row with a {field!r} field)") from None
        raise SourceError(f"corpus source {name!r} (config corpus.sources): cannot read {path} as {fmt}: "
                          f"{type(e).__name__}: {_first_line(e)}") from None
    return ds, str(path), files


def has_content(path: Path) -> bool:
    """Whether a text file holds a line that is not blank (read until the first one)."""
    with open(path, "rb") as f:
        return any(line.strip() for line in f)


def first_bad_json_line(files: list[str], field: str | None = None) -> str | None:
    """``"{file}:{line}: ..."`` for the first line of a JSON-lines file that is not one JSON object, or
    whose ``field`` (when given) is neither a string nor null; None when every line is good.

    Run only after ``datasets`` failed on the files or gave a text column that is not strings (its
    error names no line), so a good corpus is never read twice.
    """
    import json

    for f in files:
        with open(f, encoding="utf-8") as fh:
            for i, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    return f"{f}:{i}: not valid JSON ({e.msg} at column {e.colno}); each line must be one JSON object"
                if not isinstance(obj, dict):
                    return f"{f}:{i}: a JSON {type(obj).__name__}, not an object; each line must be one JSON object"
                value = obj.get(field) if field else None
                if value is not None and not isinstance(value, str):
                    return (f"{f}:{i}: field {field!r} is a JSON {json_kind(value)} ({json.dumps(value)[:60]}), not "
                            "a string; each document's text is a string (null: the line is skipped and counted)")
    return None


def json_kind(value) -> str:
    """JSON's name for the kind of a parsed value (``boolean``, ``number``, ``array``, ``object``; ``value``
    otherwise), for messages that refuse a field of the wrong kind."""
    return {bool: "boolean", int: "number", float: "number", list: "array", dict: "object"}.get(type(value), "value")


def check_text_type(ds, source: str, field: str, files: list[str], fmt: str, where: str) -> None:
    """Refuse a text column that is not strings (a number, a list, a mapping), naming the file and line.

    The Arrow type of the loaded column says at once whether every value is a string or null; only
    when it is not are the files read again to name the first bad line (JSON lines) or row.

    Raises:
        SourceError: naming the source, the file and line (or row) and the field.
    """
    import pyarrow as pa

    kind = ds.data.column("text").type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind):
        return
    bad = first_bad_json_line(files, field) if fmt == "jsonl" else None
    if bad is None:
        column = ds.data.column("text")
        row = next((i for i, v in enumerate(column.to_pylist()) if v is not None and not isinstance(v, str)), None)
        if row is None:
            return  # every value is null (an empty CSV column reads as numbers): counted as null texts
        bad = f"{where} row {row + 1}: field {field!r} holds {column[row].as_py()!r} ({kind}), not a string"
    raise SourceError(f"corpus source {source!r} (config corpus.sources): {bad}")


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else ""
