"""Corpus shards: the pieces the corpus step is cut into, one Snakemake job each (issue 40).

A source is cut at planning time, from the config and the local files' sizes alone:

- ``jsonl`` and ``text`` files: ``ceil(size / corpus.shard_mb)`` byte ranges of equal size per file;
  a line (ended by LF or CRLF) belongs to the range its first byte lies in, so no document is split or
  read twice (a file with CR-only line ends, or a JSON array, is one shard);
- ``csv`` and ``parquet`` files: one shard per file (a quoted CSV field may hold a newline);
- ``hub``: ``corpus.hub_shards`` contiguous groups of the fetched split's data files (sorted),
  which are not known before the fetch; a group without a file is an empty shard;
- ``demo``: one shard.

Shards keep one canonical order, (source, file, position), so the merge
(:mod:`clmdetour.corpus.merge`) sees the documents in the order one job reading every source would,
whatever the shard size: the packed token ids do not depend on it.

Two jobs per shard:

1. :func:`shard_text` (``corpus_shard_text``): load, :func:`~clmdetour.corpus.steps.clean`, the length
   filter, the held-apart draw, exact deduplication within the shard, and each kept document's
   decontamination matches (the drop is decided by the merge: the boilerplate rule counts documents
   over the whole source). Writes ``docs.parquet`` (``text``, ``hash``, ``held``, ``matches``) and
   ``counts.json``. It needs no tokenizer, so the held-apart text that builds a base model's
   tokenizer is read from it too.
2. :func:`shard_tokens` (``corpus_shard_tokens``): tokenises the shard's kept documents into
   ``ids.bin`` (the ids of every document, concatenated, little-endian, the vocabulary's smallest
   unsigned type) and ``docs.parquet`` (``hash``: 32-byte SHA-256, ``n_tokens``, ``held``, ``matches``).

Memory of both jobs grows with the shard, not the corpus (docs/performance.md).
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

from clmdetour.corpus.sources import SourceError, has_content, json_kind, load_source, source_files

#: The ``corpus`` keys a shard's text job reads: a change to any other key (the mix, packing, the split)
#: reruns only the merge.
SHARD_TEXT_KEYS = ("unicode_normalization", "min_chars", "min_words", "held_apart_fraction", "decontamination",
                   "batch_size")
#: Formats cut by byte ranges within a file (one document per line).
LINE_FORMATS = ("jsonl", "text")


def _cut_by_lines(file: str, fmt: str) -> bool:
    """Whether a file may be cut into byte ranges: a ``text`` file, or a ``jsonl`` one that is not a JSON
    array (a ``.json`` file may hold one, pretty-printed over many lines; ``datasets`` reads it whole)."""
    if fmt not in LINE_FORMATS or not os.path.isfile(file):
        return False
    if fmt == "jsonl":
        with open(file, "rb") as f:
            head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
        return not head.startswith(b"[")
    return True


def plan_shards(cfg: dict, root: str | Path = ".") -> list[dict]:
    """The shards of the corpus, in canonical order (source, file, position).

    Args:
        cfg: the validated ``corpus`` section (``sources``, ``shard_mb``, ``hub_shards``).
        root: folder relative source paths are resolved against (the working directory).

    Returns:
        One dict per shard: ``id`` (``{source}-{k:05d}``), ``source``, ``index`` (k), and the piece:
        ``file``, ``start``, ``end`` (bytes; ``end`` None = the whole file) for local files,
        ``group``/``groups`` for ``hub`` sources, nothing more for ``demo``. A missing local path gives
        one shard naming it (its job reports it).

    Raises:
        SourceError: a source folder without files of its format, or with a broken link.
    """
    if not cfg["shard_mb"] > 0:  # NaN passes the schema's bound
        raise ValueError(f"corpus.shard_mb is {cfg['shard_mb']}: give a size in MB (default 256)")
    limit = cfg["shard_mb"] * 1e6
    shards = []
    for source in cfg["sources"]:
        fmt, pieces = source["format"], []
        if fmt == "demo":
            pieces = [{}]
        elif fmt == "hub":
            pieces = [{"group": k, "groups": cfg["hub_shards"]} for k in range(cfg["hub_shards"])]
        else:
            path = Path(root) / source["path"]
            for f in source_files(path, fmt) if path.exists() else [str(path)]:
                size = os.path.getsize(f) if os.path.isfile(f) else 0
                n = max(1, math.ceil(size / limit)) if _cut_by_lines(f, fmt) else 1
                pieces += [{"file": f, "start": k * size // n, "end": (k + 1) * size // n if n > 1 else None}
                           for k in range(n)]
        shards += [{"id": f"{source['name']}-{k:05d}", "source": source["name"], "index": k, **p}
                   for k, p in enumerate(pieces)]
    return shards


def shard_lines(file: str | Path, start: int, end: int) -> tuple[bytes, int]:
    """The whole lines of ``file`` whose first byte lies in ``[start, end)``.

    Returns:
        ``(block, begin)``: the lines' bytes (ending with the last line's newline, if the file has one)
        and the byte offset of the first.
    """
    with open(file, "rb") as f:
        if start > 0:
            f.seek(start - 1)
            f.readline()  # the rest of the line holding byte start-1 belongs to the shard before
        begin = f.tell()
        if begin >= end:
            return b"", begin
        block = f.read(end - begin)
        if block and not block.endswith(b"\n"):
            block += f.readline()
    return block, begin


def _lines_before(file: str | Path, offset: int) -> int:
    """Newlines in the first ``offset`` bytes of ``file`` (read in 16 MB blocks; only on an error path)."""
    count, left = 0, offset
    with open(file, "rb") as f:
        while left > 0:
            block = f.read(min(left, 1 << 24))
            if not block:
                break
            count += block.count(b"\n")
            left -= len(block)
    return count


def _jsonl_range(block: bytes, file: str, begin: int, field: str, name: str) -> tuple[list[str | None], int]:
    """The texts of a byte range of a JSON-lines file, parsed line by line (``json``), as loading the whole
    file reads them: a blank line is skipped; a ``null`` line, or an object without ``field`` or with a
    null ``field``, is a null text; the file's first non-blank line must be an object (as
    :func:`clmdetour.corpus.sources.load_source` requires). Parsing here, not with ``datasets``, keeps a
    range's types and errors those of its lines, not of what the range happens to hold (all dates, no
    ``field`` at all).

    Returns:
        ``(texts, missing)``: one entry per non-blank line; ``missing`` counts lines without ``field``.

    Raises:
        SourceError: naming the file and line: not UTF-8, not JSON, not an object, ``field`` not a string.
    """
    texts, missing, offset = [], 0, None
    if begin == 0 and block.startswith(b"\xef\xbb\xbf"):
        block = block[3:]

    def where(i: int) -> str:
        nonlocal offset
        offset = _lines_before(file, begin) if offset is None else offset
        return f"{file}:{offset + i + 1}"

    for i, raw in enumerate(block.split(b"\n")):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            line = where(i).rsplit(":", 1)
            raise SourceError(f"corpus source {name!r}: {line[0]} line {line[1]} is not valid UTF-8 "
                              f"(byte {e.start}: {raw[e.start:e.start + 4]!r})") from None
        except json.JSONDecodeError as e:
            raise SourceError(f"corpus source {name!r} (config corpus.sources): {where(i)}: not valid JSON ({e.msg} at "
                              f"column {e.colno}); each line must be one JSON object") from None
        if obj is None and (begin > 0 or texts):
            texts.append(None)
            continue
        if not isinstance(obj, dict):
            kind = "null" if obj is None else type(obj).__name__
            raise SourceError(f"corpus source {name!r} (config corpus.sources): {where(i)}: a JSON {kind}, not an "
                              "object; each line must be one JSON object")
        value = obj.get(field)
        missing += field not in obj
        if value is not None and not isinstance(value, str):
            raise SourceError(f"corpus source {name!r} (config corpus.sources): {where(i)}: field {field!r} is a JSON "
                              f"{json_kind(value)} ({json.dumps(value)[:60]}), not a string; each document's text "
                              "is a string (null: the line is skipped and counted)")
        texts.append(value)
    return texts, missing


def _text_range(block: bytes, file: str, begin: int, name: str) -> list[str]:
    """The documents of a byte range of a ``text`` file: its lines (``str.splitlines``, as ``datasets``' text
    builder splits a whole file), blank ones included (the length filter counts them).

    Raises:
        SourceError: the range is not valid UTF-8, naming the file and line.
    """
    try:
        return block.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        line_start = block.rfind(b"\n", 0, e.start) + 1
        line = _lines_before(file, begin) + block.count(b"\n", 0, e.start) + 1
        raise SourceError(f"corpus source {name!r}: {file} line {line} is not valid UTF-8 "
                          f"(byte {e.start - line_start}: {block[e.start:e.start + 4]!r})") from None


def read_shard(source: dict, shard: dict, demo_corpus=None, hub_dir=None):
    """Load one shard as a Dataset with a ``text`` column (:func:`clmdetour.corpus.sources.load_source`).

    A byte range of a ``jsonl`` file is parsed line by line (:func:`_jsonl_range`), one of a ``text``
    file split into lines (:func:`_text_range`): both as reading the whole file would, whatever the
    range holds, an error naming the source's file and line. A file that holds no document (no line with text, a CSV header alone)
    gives an empty shard: the merge refuses a source none of whose files holds one.

    Returns:
        ``(documents, info)``: a ``datasets.Dataset`` with a ``text`` column (a whole file, the demo, a Hub
        group), or a list of texts (a byte range, read without importing ``datasets``: a shard job's
        fixed cost); ``info`` is ``{"empty": why the shard's file holds no document, or None,
        "missing_field": lines without the text field}``.

    Raises:
        SourceError: as ``load_source``, naming the source's file and line.
    """
    fmt, info = source["format"], {"empty": None, "missing_field": 0}
    if fmt == "demo":
        return load_source(source, demo_corpus=demo_corpus, normalize=False), info
    if fmt == "hub":
        return load_source(source, hub_dir=hub_dir, hub_group=(shard["group"], shard["groups"]), normalize=False), info
    file = shard["file"]
    if not os.path.exists(file):
        raise SourceError(f"corpus source {source['name']!r}: {file} does not exist")
    if shard["end"] is None:
        if fmt != "parquet" and not has_content(Path(file)):
            return [], dict(info, empty=f"{file} is empty (no line with text)")
        try:
            return load_source({**source, "path": file}, normalize=False), info
        except SourceError as e:
            if "holds no documents" not in str(e):
                raise
            return [], dict(info, empty=str(e).split(": ", 1)[-1])
    block, begin = shard_lines(file, shard["start"], shard["end"])
    if not block or (fmt == "jsonl" and not block.strip()):  # no line starts here, or blank lines only
        return [], dict(info, empty=f"{file} is empty (no line with text)")
    if fmt == "jsonl":
        texts, missing = _jsonl_range(block, file, begin, source.get("text_field", "text"), source["name"])
        return texts, dict(info, missing_field=missing)
    return _text_range(block, file, begin, source["name"]), info


_WORKER: dict = {}  # the text job's settings in each worker process (set before the fork)


def _text_batch(texts: list[str | None]) -> tuple[dict, list[list[str]]]:
    """One batch of a text job: cleaned fields (:func:`clmdetour.corpus.steps.clean_batch`) and, for every
    document long enough to keep, its decontamination matches (``[]`` for the others)."""
    from clmdetour.corpus.steps import clean_batch, long_enough

    cfg, decon = _WORKER["cfg"], _WORKER["decon"]
    fields = clean_batch(texts, cfg["unicode_normalization"], cfg["min_words"])
    if not decon.keys:
        return fields, [[] for _ in texts]
    return fields, [decon.matches(t) if ok else [] for t, ok in zip(fields["text"], long_enough(fields, cfg))]


def _batches(docs, batch_size: int):
    """The texts of ``docs`` (a Dataset's ``text`` column, or a list) a batch at a time (lists of at most
    ``batch_size`` documents)."""
    if isinstance(docs, list):
        for i in range(0, len(docs), batch_size):
            yield docs[i:i + batch_size]
        return
    for table in docs.with_format("arrow").iter(batch_size=batch_size):
        yield table.column("text").to_pylist()


def shard_text(cfg: dict, source: dict, shard: dict, out_dir: str | Path,
               eval_texts: dict[str, list[str]] | None = None, demo_corpus=None, hub_dir=None,
               num_proc: int = 1) -> dict:
    """Job ``corpus_shard_text``: one shard's cleaned documents, hashes and decontamination matches.

    Reads the shard a batch of ``corpus.batch_size`` documents at a time (cleaning and matching in
    ``num_proc`` processes, in order), keeps each document that passes the length filter and is not a
    duplicate of an earlier one of the shard (or is held apart), and writes them as they come: memory
    holds the shard's hashes and a few batches, not its text.

    Args:
        cfg: the validated ``corpus`` section (the :data:`SHARD_TEXT_KEYS` are read).
        source: the shard's entry of ``corpus.sources``.
        shard: one entry of :func:`plan_shards`.
        out_dir: the folder written (atomically): ``docs.parquet`` (``text``, ``hash``: hex SHA-256,
            ``held``, ``matches``) and ``counts.json``.
        eval_texts: ``{task: dev+test texts}`` for decontamination.
        demo_corpus, hub_dir: as :func:`read_shard`.
        num_proc: processes cleaning and matching batches.

    Returns:
        The shard's counts (documents): ``documents_read``, ``too_short``, ``null_text``,
        ``overlong_word``, ``held_apart``, ``duplicates_within_shard``, ``kept``, ``empty`` (why the shard's
        file holds no document, or None), ``missing_field`` (JSON lines without the text field).

    Raises:
        SourceError: the shard cannot be read (names the file and line).
    """
    import multiprocessing

    import pyarrow as pa
    import pyarrow.parquet as pq

    from clmdetour.corpus.steps import decontaminator, deduplicate
    from clmdetour.io import atomic_output_dir, atomic_write_json

    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()
    else:  # read when datasets is imported, if a whole file is loaded
        os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    ds, info = read_shard(source, shard, demo_corpus, hub_dir)
    _WORKER.update(cfg=cfg, decon=decontaminator(cfg, eval_texts))
    schema = pa.schema([("text", pa.string()), ("hash", pa.string()), ("held", pa.bool_()),
                        ("matches", pa.list_(pa.string()))])
    totals = dict.fromkeys(("too_short", "null_text", "overlong_word", "held_apart", "duplicates", "kept"), 0)
    seen: set[str] = set()
    procs = min(num_proc, max(1, len(ds) // cfg["batch_size"]))
    pool = multiprocessing.get_context("fork").Pool(procs) if procs > 1 else None
    try:
        with atomic_output_dir(out_dir) as tmp:
            with pq.ParquetWriter(Path(tmp) / "docs.parquet", schema) as writer:
                batches = _batches(ds, cfg["batch_size"])
                for fields, matches in (pool.imap(_text_batch, batches) if pool else map(_text_batch, batches)):
                    keep_idx, counts = deduplicate(fields, cfg, seen)
                    held = set(counts.pop("held_indices"))
                    rows = sorted([*keep_idx, *held])
                    for key in totals:
                        totals[key] += len(keep_idx) if key == "kept" else counts[key]
                    writer.write_table(pa.table({"text": [fields["text"][i] for i in rows],
                                                 "hash": [fields["hash"][i] for i in rows],
                                                 "held": [i in held for i in rows],
                                                 "matches": [matches[i] for i in rows]}, schema=schema))
            record = {"shard": shard["id"], "documents_read": len(ds), **totals, **info}
            record["duplicates_within_shard"] = record.pop("duplicates")
            atomic_write_json(Path(tmp) / "counts.json", record)
    finally:
        if pool:
            pool.close()
            pool.join()
        _WORKER.clear()
    return record


def tokenizer_facts(tokenizer_dir: str | Path) -> dict | None:
    """``{"vocab_size", "pad_token_id", "json"}`` of a tokenizer folder read with the ``tokenizers`` library
    alone (``tokenizer.json``, and the pad token of ``tokenizer_config.json`` or ``special_tokens_map.json``):
    what ``transformers`` would give as ``len(tokenizer)``, ``pad_token_id`` and
    ``backend_tokenizer.to_str()``, without importing it. None when a file or the pad token is missing.
    """
    folder = Path(tokenizer_dir)
    if not (folder / "tokenizer.json").exists():
        return None
    from tokenizers import Tokenizer

    fast = Tokenizer.from_file(str(folder / "tokenizer.json"))
    pad = None
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if pad is None and (folder / name).exists():
            pad = json.loads((folder / name).read_text(encoding="utf-8")).get("pad_token")
    pad = pad.get("content") if isinstance(pad, dict) else pad
    pad_id = fast.token_to_id(pad) if isinstance(pad, str) else None
    if pad_id is None:
        return None
    return {"vocab_size": fast.get_vocab_size(with_added_tokens=True), "pad_token_id": pad_id, "json": fast.to_str()}


def load_encoder(tokenizer_dir: str | Path, add_special_tokens: bool = True):
    """``(encode, vocab_size)``: ``encode(texts) -> [[ids]]`` with special tokens (unless
    ``add_special_tokens`` is False) and no truncation, as ``transformers``' fast tokenizer gives them
    (``tokenizer(texts, add_special_tokens=True, truncation=False)``), and the vocabulary size with added tokens.

    Reads ``tokenizer.json`` with the ``tokenizers`` library itself when the folder has one (no
    ``transformers`` import, no per-document conversion, no character offsets: ``encode_batch_fast``,
    1.7x ``encode_batch`` on the real French text, same ids); else calls the ``transformers`` tokenizer.
    """
    path = Path(tokenizer_dir) / "tokenizer.json"
    if path.exists():
        from tokenizers import Tokenizer

        fast = Tokenizer.from_file(str(path))
        fast.no_truncation()
        fast.no_padding()
        # encode_batch_fast (tokenizers >= 0.20) skips the character offsets, which ids do not need
        encode_batch = getattr(fast, "encode_batch_fast", fast.encode_batch)
        return (lambda texts: [e.ids for e in encode_batch(texts, add_special_tokens=add_special_tokens)],
                fast.get_vocab_size(with_added_tokens=True))
    from transformers import AutoTokenizer

    from clmdetour.modeling.folders import check_model_folder

    check_model_folder(tokenizer_dir)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    return ((lambda texts: tokenizer(texts, add_special_tokens=add_special_tokens, truncation=False)["input_ids"]),
            len(tokenizer))


#: Characters of text per tokenizer call of a token job: bounds the memory of the encodings (about 100 bytes
#: per token while they live) whatever the documents' lengths. A document longer than this is tokenised in
#: pieces of at most this many characters, cut before a whitespace character (:func:`pieces`), with the special
#: tokens added once around the whole document.
ENCODE_CHARS = 1_000_000


def pieces(text: str, size: int = ENCODE_CHARS) -> list[str]:
    """``text`` cut into consecutive pieces of at most ``size`` characters (their concatenation is ``text``), each
    cut placed before the last whitespace character of the window when it has one (a word is then never cut: the
    pre-tokenizers of BPE and SentencePiece tokenizers split there anyway, so the pieces' ids concatenated are the
    whole text's), else at ``size`` (a run of ``size`` characters without a space)."""
    out, start = [], 0
    while len(text) - start > size:
        end = start + size
        cut = max(text.rfind(c, start + 1, end + 1) for c in " \n\t\r")
        cut = cut if cut > start else end
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


def _encoded(encode, texts: list[str], encode_plain=None, size: int = ENCODE_CHARS):
    """Each text's ids, in order, from tokenizer calls of about ``size`` characters each (lazily). A text longer
    than ``size`` is encoded in :func:`pieces` without special tokens (``encode_plain``) and given the special
    tokens of an empty document around them (``encode([""])``: ``[CLS]``, ``[SEP]``), so its memory is that of
    one piece's encodings plus its ids, never that of the whole document's encodings."""
    chunk, chars = [], 0
    for t in texts:
        if len(t) > size and encode_plain is not None:
            if chunk:
                yield from encode(chunk)
                chunk, chars = [], 0
            yield _encode_long(encode, encode_plain, t, size)
            continue
        chunk.append(t)
        chars += len(t)
        if chars >= size:
            yield from encode(chunk)
            chunk, chars = [], 0
    if chunk:
        yield from encode(chunk)


def special_tokens_around(encode, encode_plain, probe: str = "a") -> tuple[list[int], list[int]]:
    """``(head, tail)``: the special tokens the tokenizer adds before and after a document (``[CLS]``, ``[SEP]``
    for ModernBERT's), read off ``probe`` encoded with (``encode``) and without (``encode_plain``) them.

    Raises:
        ValueError: the plain ids are not a contiguous part of the ids with special tokens.
    """
    [full], [plain] = encode([probe]), encode_plain([probe])
    for k in range(len(full) - len(plain) + 1):
        if full[k:k + len(plain)] == plain:
            return full[:k], full[k + len(plain):]
    raise ValueError(f"the tokenizer's ids of {probe!r} without special tokens ({plain}) are not part of its "
                     f"ids with them ({full})")


def _encode_long(encode, encode_plain, text: str, size: int):
    """The ids of one long document (see :func:`_encoded`), as a numpy int64 array."""
    import numpy as np

    head, tail = special_tokens_around(encode, encode_plain)
    parts = [np.asarray(head, dtype=np.int64)]
    parts += [np.asarray(ids, dtype=np.int64) for piece in pieces(text, size) for ids in encode_plain([piece])]
    parts.append(np.asarray(tail, dtype=np.int64))
    return np.concatenate(parts)


def shard_tokens(text_dir: str | Path, tokenizer_dir: str | Path, out_dir: str | Path, batch_size: int = 1000) -> dict:
    """Job ``corpus_shard_tokens``: tokenise one shard's kept documents (special tokens added, no truncation).

    Reads ``docs.parquet`` of :func:`shard_text` a batch at a time (flat memory: the batch's text, the encodings
    of at most :data:`ENCODE_CHARS` characters, about 100 bytes per token, and the ids of the longest document
    at 8 bytes per token; a 300 MB one-line document is tokenised in pieces, :func:`_encoded`) and writes ``ids.bin``
    (every kept document's ids, concatenated, in the vocabulary's smallest unsigned type,
    :func:`clmdetour.corpus.pack.token_dtype`, little-endian), ``docs.parquet`` (``hash``: 32-byte
    SHA-256 of the cleaned text, ``n_tokens``: int32, 0 for a held-apart document, which is not
    tokenised, ``held``, ``matches``) and ``counts.json`` (the text job's counts, ``tokens``,
    ``token_dtype``).

    Args:
        text_dir: the shard's text folder (:func:`shard_text`).
        tokenizer_dir: the base model's tokenizer folder.
        out_dir: the folder written (atomically).
        batch_size: documents per tokenizer call (``corpus.batch_size``).

    Returns:
        The counts written.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from clmdetour.corpus.pack import token_dtype
    from clmdetour.io import atomic_output_dir, atomic_write_json

    encode, vocab_size = load_encoder(tokenizer_dir)
    encode_plain, _ = load_encoder(tokenizer_dir, add_special_tokens=False)
    dtype = token_dtype(vocab_size).newbyteorder("<")
    record = json.loads((Path(text_dir) / "counts.json").read_text(encoding="utf-8"))
    schema = pa.schema([("hash", pa.binary(32)), ("n_tokens", pa.int32()), ("held", pa.bool_()),
                        ("matches", pa.list_(pa.string()))])
    tokens = 0
    with atomic_output_dir(out_dir) as tmp:
        source = pq.ParquetFile(Path(text_dir) / "docs.parquet")
        with open(Path(tmp) / "ids.bin", "wb") as ids, pq.ParquetWriter(Path(tmp) / "docs.parquet", schema) as writer:
            for batch in source.iter_batches(batch_size=batch_size, columns=["text", "hash", "held", "matches"]):
                held = batch.column("held").to_pylist()
                texts = [t for t, h in zip(batch.column("text").to_pylist(), held) if not h]
                encoded = _encoded(encode, texts, encode_plain)
                n_tokens = []
                for h in held:
                    ids_of_doc = [] if h else next(encoded)
                    n_tokens.append(len(ids_of_doc))
                    if len(ids_of_doc):
                        ids.write(np.asarray(ids_of_doc, dtype=dtype).tobytes())
                tokens += sum(n_tokens)
                hashes = [bytes.fromhex(h) for h in batch.column("hash").to_pylist()]
                writer.write_table(pa.table({"hash": pa.array(hashes, pa.binary(32)), "n_tokens": pa.array(n_tokens, pa.int32()),
                                             "held": batch.column("held"), "matches": batch.column("matches")}, schema=schema))
        record.update(tokens=tokens, token_dtype=np.dtype(dtype).name)
        atomic_write_json(Path(tmp) / "counts.json", record)
    return record
