"""Reading a task's records: the field helpers every task type's ``read_record`` uses.

A record is one JSON object, CSV/TSV row or Hub example; a field name may be dotted
(``meta.title``) to reach a nested value. Errors are :class:`FormatError`, whose message
names the file and line (``where``).
"""

from __future__ import annotations

from clmdetour.errors import ExpectedError
from clmdetour.tasktypes.tags import iob2_to_spans
from clmdetour.textio import nfc

MISSING = object()  # what get_field returns for an absent field (None is a present, null value)


class FormatError(ExpectedError, ValueError):
    """A task source file cannot be used; the message names the file and line."""


def check_tags(tags: list[str], where: str) -> None:
    """Raises FormatError: ``tags`` are not strict IOB2 (the message starts with ``where``)."""
    try:
        iob2_to_spans(tags)
    except ValueError as e:
        raise FormatError(f"{where}: {e}") from None


def as_label_list(value, sep: str, where: str) -> list[str]:
    """The labels of a multilabel field: a list, or a ``sep``-separated string; NFC, stripped, empty
    parts dropped; ``None`` is no label.

    Raises:
        FormatError: any other value (the message starts with ``where``).
    """
    if value is None:
        return []
    if isinstance(value, list):
        return [nfc(str(v)).strip() for v in value if str(v).strip()]
    if isinstance(value, str):
        return [nfc(p).strip() for p in value.split(sep) if p.strip()]
    raise FormatError(f"{where}: multilabel field must be a list or a {sep!r}-separated string, got {value!r}")


def get_field(rec: dict, name: str):
    """``rec[name]``, or for a dotted ``name`` (``meta.title``) the nested value; :data:`MISSING` when absent."""
    if name in rec:
        return rec[name]
    if "." not in name:
        return MISSING
    cur = rec
    for part in name.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return MISSING
    return cur


def text_of(rec: dict, fields: dict, where: str) -> str:
    """The record's text: ``text_field`` (a name, or a list joined by ``text_separator``, default a
    newline; null or blank parts skipped), NFC.

    Raises:
        FormatError: a text field missing, not a string, or every part empty (names ``where``).
    """
    names = fields.get("text_field") or "text"
    names = [names] if isinstance(names, str) else list(names)
    parts = []
    for name in names:
        value = get_field(rec, name)
        if value is MISSING:
            raise FormatError(f"{where}: text field {name!r} (text_field) missing; fields: {sorted(rec)}")
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if not isinstance(value, str):
            raise FormatError(f"{where}: text field {name!r} is not a string: {value!r}")
        parts.append(value.strip() if len(names) > 1 else value)
    sep = fields.get("text_separator")
    text = ("\n" if sep is None else sep).join(parts)
    if not text.strip():
        raise FormatError(f"{where}: text field {names[0] if len(names) == 1 else names!r} is empty")
    return nfc(text)
