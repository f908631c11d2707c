"""Relation classification over a marked sentence: argument markers and the fine-to-group label map.

A relation-classification task is a ``multiclass`` (or ``multilabel``) task whose
text marks the two arguments of one candidate pair, as ChemProt's benchmark
files do (``<< chemical >> ... [[ protein ]]``; Peng et al. 2019, BLUE). Two
task keys act on the raw rows a table reader (:mod:`clmdetour.tasks.formats`)
returns:

- ``entity_markers``: pairs ``[open, close]``; every row's text must mark one
  argument per pair: the opening marker (followed by whitespace) exactly once,
  then a closing marker (preceded by whitespace) after it (else an error
  naming the file and line; :func:`marked_spans`). The markers stay in the text; ``marker_tokens``
  (fine-tuning, :func:`clmdetour.tasktypes.markers.add_marker_tokens`) decides
  whether the tokenizer keeps them whole.
- ``label_map``: fine label -> the label the task uses (ChemProt's 13 relation
  types -> the 5 CPR groups scored by the benchmark). A label not in the map is
  an error naming the file, line and key, or, with ``label_map_unmapped: drop``,
  is dropped (a multiclass row with it; from a multilabel row's list) and
  counted.
"""

from __future__ import annotations

from collections import Counter

from clmdetour.errors import ExpectedError
from clmdetour.tasktypes import TaskType

UNMAPPED_POLICIES = ("error", "drop")  # tasks.{task}.label_map_unmapped


class RelationError(ExpectedError, ValueError):
    """A relation row or key cannot be used; the message names the file and line or the key."""


def check_marker_pairs(value, key: str) -> list[tuple[str, str]]:
    """``entity_markers`` as a list of ``(open, close)`` pairs, checked.

    Args:
        value: the config value, e.g. ``[["<<", ">>"], ["[[", "]]"]]``.
        key: the config key named in errors (``tasks.<t>.entity_markers``).

    Raises:
        RelationError: not a non-empty list of 2-string pairs, an empty or
            whitespace-bearing marker, a marker given twice, or one marker inside
            another (``<`` and ``<<``: counting them would be ambiguous).
    """
    if not isinstance(value, list) or not value:
        raise RelationError(f"{key}: expected a list of [open, close] marker pairs, got {value!r}")
    pairs = []
    for pair in value:
        if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                or not all(isinstance(m, str) and m.strip() and m == m.strip() for m in pair)):
            raise RelationError(f"{key}: {pair!r} is not an [open, close] pair of non-empty strings "
                                "without surrounding spaces")
        pairs.append((pair[0], pair[1]))
    flat = [m for p in pairs for m in p]
    for i, a in enumerate(flat):
        for b in flat[i + 1:]:
            if a in b or b in a:
                raise RelationError(f"{key}: markers {a!r} and {b!r} overlap (one is the other or inside it); "
                                    "each marker must be found on its own")
    return pairs


def check_label_map(value, key: str) -> dict[str, str]:
    """``label_map`` checked: a non-empty mapping of label strings to label strings.

    Raises:
        RelationError: not a mapping, empty, or a key or value that is not a non-empty string.
    """
    if not isinstance(value, dict) or not value:
        raise RelationError(f"{key}: expected a mapping {{fine label: label used}}, got {value!r}")
    for k, v in value.items():
        if not isinstance(k, str) or not k.strip() or not isinstance(v, str) or not v.strip():
            raise RelationError(f"{key}: {k!r}: {v!r} is not a pair of non-empty label strings")
    return dict(value)


def marked_spans(text: str, pairs: list[tuple[str, str]]) -> list[tuple[int, int]] | str:
    """The ``(start, end)`` character span of each pair's marked argument (markers included), or why there is none.

    The rule: an opening marker is the ``open`` string followed by whitespace; it must occur
    exactly once; the argument ends at the first ``close`` string preceded by whitespace after
    it. The marker strings elsewhere are ordinary text: ChemProt writes ``PGE1>STA2>>17``,
    ``94 >> probenecid`` (much greater than) and IUPAC names with ``[[`` inside an argument.

    Returns:
        One span per pair, in ``pairs`` order; or a message (str) saying which marker is missing
        or repeated.
    """
    import re

    spans = []
    for open_, close in pairs:
        opens = [m.start() for m in re.finditer(re.escape(open_) + r"(?=\s)", text)]
        if len(opens) != 1:
            return (f"opening entity marker {open_!r} (followed by a space) occurs {len(opens)} times, "
                    "expected once")
        m = re.compile(r"(?<=\s)" + re.escape(close)).search(text, opens[0] + len(open_))
        if m is None:
            return f"no closing entity marker {close!r} (after a space) follows {open_!r}"
        spans.append((opens[0], m.end()))
    return spans


def check_markers(rows: list[dict], pairs: list[tuple[str, str]], key: str) -> None:
    """Every row's ``text`` marks one argument per marker pair (:func:`marked_spans`).

    Raises:
        RelationError: ``<file>:<line>: ...`` naming the marker, how often it occurs and ``key``.
    """
    for row in rows:
        got = marked_spans(row["text"], pairs)
        if isinstance(got, str):
            raise RelationError(f"{row['where']}: {got} ({key}: each row marks its two arguments, e.g. "
                                f"'<< a >> ... [[ b ]]'); text {row['text'][:80]!r}")


def map_labels(rows: list[dict], ttype: TaskType, label_map: dict[str, str], unmapped: str, key: str,
               counts: Counter) -> list[dict]:
    """Rows with their labels mapped by ``label_map`` (multiclass ``label``, multilabel ``labels``).

    Args:
        rows: raw rows (``where``, ``label`` or ``labels``).
        ttype: the task's type (a class-label type: ``multiclass`` or ``multilabel``).
        label_map: fine label -> label used.
        unmapped: ``error`` or ``drop`` (``tasks.<t>.label_map_unmapped``).
        key: the config key of the map (``tasks.<t>.label_map``), for messages.
        counts: receives ``label_map_mapped`` (labels mapped), ``label_map_unmapped_dropped``
            (labels dropped) and ``label_map_unmapped_rows_dropped`` (multiclass rows dropped).

    Returns:
        The kept rows (new dicts; the fine label stays in ``raw_label``).

    Raises:
        RelationError: a label not in the map with ``unmapped: error`` (names file, line, label and key),
            or an unknown policy, or a type without class labels.
    """
    if unmapped not in UNMAPPED_POLICIES:
        raise RelationError(f"{key}_unmapped: {unmapped!r} is not one of {UNMAPPED_POLICIES}")
    if not ttype.class_labels:
        raise RelationError(f"{key}: a label map applies to class labels (multiclass, multilabel), not {ttype.name!r}")

    def one(label: str, row: dict) -> str | None:
        if label in label_map:
            counts["label_map_mapped"] += 1
            return label_map[label]
        if unmapped == "error":
            raise RelationError(f"{row['where']}: label {label!r} is not in {key} ({len(label_map)} labels: "
                                f"{sorted(label_map)[:13]}); add it, or set {key}_unmapped: drop")
        counts["label_map_unmapped_dropped"] += 1
        return None

    out = []
    for row in rows:
        if not ttype.label_separator:  # one label a row (multiclass)
            label = one(row["label"], row)
            if label is None:
                counts["label_map_unmapped_rows_dropped"] += 1
                continue
            out.append({**row, "label": label})
        else:
            labels = [x for x in (one(lab, row) for lab in row["labels"]) if x is not None]
            out.append({**row, "labels": list(dict.fromkeys(labels))})
    return out


def relation_report(spec: dict, info: dict) -> dict:
    """The manifest's ``relation`` section (a task with ``label_map`` or ``entity_markers``): the keys,
    and the counts of :func:`map_labels` (``label_map_mapped``, ``label_map_unmapped_dropped``,
    ``label_map_unmapped_rows_dropped``) from ``info["annotations"]``."""
    ann = info["annotations"]
    return {
        "entity_markers": spec.get("entity_markers"), "marker_tokens": bool(spec.get("marker_tokens")),
        "label_map": spec.get("label_map"), "label_map_unmapped": spec.get("label_map_unmapped"),
        **{k: ann.get(k, 0) for k in ("label_map_mapped", "label_map_unmapped_dropped",
                                      "label_map_unmapped_rows_dropped")}}
