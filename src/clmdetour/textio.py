"""Reading the text files researchers have: UTF-8 with or without a BOM, LF, CRLF or CR, NFC or NFD.

One place for the rules every task reader follows (docs/tasks.md, "Encodings
and line endings"): a file is decoded as UTF-8 (a byte that is not UTF-8 is an
error naming the file and line), a leading byte-order mark U+FEFF is removed,
lines end at LF, CRLF or CR, and texts and words leave the readers in Unicode
normalisation form C (https://unicode.org/reports/tr15/) so that an NFD file
gives the same rows as an NFC one.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

BOM = "\ufeff"
_NEWLINE_RE = re.compile(r"\r\n|\r|\n")


def nfc(text: str) -> str:
    """``text`` in Unicode normalisation form C (composed characters)."""
    return unicodedata.normalize("NFC", text)


def decode_utf8(data: bytes, path: str | Path, error: type[Exception] = ValueError) -> str:
    """``data`` decoded as UTF-8, a leading BOM kept.

    Raises:
        error: a byte that is not UTF-8; the message names the file, the line (1-based)
            and the byte offset.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(f"{path}:{line}: not UTF-8 (byte {data[e.start:e.start + 1]!r} at byte offset {e.start}); "
                    "save the file as UTF-8") from None


def read_text(path: str | Path, what: str = "file", error: type[Exception] = ValueError,
              keep_bom: bool = False) -> str:
    """The content of a UTF-8 file, line endings kept as they are.

    Args:
        path: the file.
        what: what the file is, for the message when it is missing.
        error: the exception class raised (the caller's format error).
        keep_bom: keep a leading U+FEFF (BRAT ``.txt`` files, whose offsets may count it).

    Raises:
        error: the file is missing, or a byte is not UTF-8 (names the file and line).
    """
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: {what} not found")
    text = decode_utf8(path.read_bytes(), path, error)
    return text[1:] if text.startswith(BOM) and not keep_bom else text


def text_lines(text: str) -> list[str]:
    """Lines of ``text`` split at LF, CRLF or CR (the terminators removed; no empty last line)."""
    lines = _NEWLINE_RE.split(text)
    return lines[:-1] if lines and lines[-1] == "" else lines


def counted(n: int, noun: str, nouns: str | None = None) -> str:
    """``n`` and the noun in the number it takes, for messages: ``counted(1, "record")`` is ``'1 record'``,
    ``counted(2, "record")`` ``'2 records'``; ``nouns`` is the plural when it is not ``noun + "s"``."""
    return f"{n} {noun if n == 1 else (nouns or noun + 's')}"


def line_ending_names(text: str) -> list[str]:
    """The kinds of line ending found in ``text`` (``CRLF``, ``CR``, ``LF``), for messages."""
    crlf = text.count("\r\n")
    out = ["CRLF"] if crlf else []
    if text.count("\r") > crlf:
        out.append("CR")
    if text.count("\n") > crlf:
        out.append("LF")
    return out


def word_spans(words, separator: str = " ") -> tuple[str, list[list[int]]]:
    """Join ``words`` with ``separator``: the joining rule of NER rows whose source has no text (CoNLL/BIO).

    Returns:
        ``(text, spans)`` with ``text[a:b] == words[i]`` for ``spans[i] == [a, b]``
        (character offsets, end exclusive).
    """
    spans, pos = [], 0
    for w in words:
        spans.append([pos, pos + len(w)])
        pos += len(w) + len(separator)
    return separator.join(words), spans


def locate_words(text: str, words) -> list[list[int]] | None:
    """Character spans of ``words`` found in order in ``text``, separated by whitespace only.

    For NER rows that carry both a running text and its words (JSONL/TSV/CSV
    ``text_field`` beside ``words_field``): the model is then fed the original
    text. Returns ``None`` when a word is not found at the next position, or
    when anything but whitespace lies between two words (or before the first,
    or after the last): the caller falls back to :func:`word_spans`.
    """
    spans, pos = [], 0
    for w in words:
        if not w:
            return None
        start = text.find(w, pos)
        if start < 0 or text[pos:start].strip():
            return None
        spans.append([start, start + len(w)])
        pos = start + len(w)
    return spans if not text[pos:].strip() else None


def one_group_regex(pattern, key: str, holds: str, error: type[Exception] = ValueError) -> re.Pattern:
    """``pattern`` compiled, checked to have exactly one capture group (a config key that captures one value).

    Args:
        pattern: the regular expression (Python ``re`` syntax) as configured.
        key: the config key it comes from (``tasks.<name>.doc_marker``), for messages.
        holds: what the group captures (``the document id``), for messages.
        error: the exception class raised (the caller's config or format error).

    Returns:
        The compiled pattern.

    Raises:
        error: ``pattern`` is not a string, is not a valid regular expression, or has
            zero or several capture groups; one line naming ``key``.
    """
    if not isinstance(pattern, str) or not pattern:
        raise error(f"{key}: expected a regular expression with one capture group ({holds}), got {pattern!r}")
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise error(f"{key}: {pattern!r} is not a valid regular expression ({e})") from None
    if compiled.groups != 1:
        raise error(f"{key}: {pattern!r} has {compiled.groups} capture groups; it needs exactly one, holding "
                    f"{holds} (write other groups as (?:...))")
    return compiled
