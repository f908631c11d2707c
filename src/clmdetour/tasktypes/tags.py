"""IOB2 word tags: the entity spans they encode (strict IOB2, Tjong Kim Sang & Veenstra 1999)."""

from __future__ import annotations

import re


def iob2_to_spans(tags: list[str]) -> list[tuple[int, int, str]]:
    """Entity spans over word indices ``(first, last_exclusive, type)`` from IOB2 tags.

    Strict IOB2: an ``I-X`` that does not continue an entity of type ``X`` is an error.

    Raises:
        ValueError: a malformed tag or an ``I-`` tag that starts an entity.
    """
    spans: list[tuple[int, int, str]] = []
    cur: list | None = None
    for i, tag in enumerate(tags):
        if tag == "O":
            cur = None
            continue
        m = re.fullmatch(r"([BI])-(.+)", tag)
        if not m:
            raise ValueError(f"tag {i} {tag!r} is not O, B-<type> or I-<type>")
        if m.group(1) == "B":
            cur = [i, i + 1, m.group(2)]
            spans.append(cur)
        else:
            if cur is None or cur[2] != m.group(2):
                raise ValueError(f"tag {i} {tag!r} continues no {m.group(2)} entity (strict IOB2)")
            cur[1] = i + 1
    return [tuple(s) for s in spans]
