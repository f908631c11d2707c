"""Traps of real task files that change scores without stopping the task: reported (log and manifest), never refused.

Each check runs on the rows a task keeps (after the label-set policy), before any
fine-tuning, and its counts go to the manifest's ``traps`` section
(:func:`record_traps`):

- **identical records under different ids**: two rows whose input (the task type's
  :meth:`~clmdetour.tasktypes.base.TaskType.compared_texts`, compared exactly after
  Unicode NFC and surrounding whitespace: for multiple choice, the question and its
  options in a canonical order) and answer (``compared_label_key``: for multiple choice,
  the correct options' texts, not their keys) are the same but
  whose ids differ, within a split or across splits (a record copied under a new id;
  the same id twice is :mod:`clmdetour.tasks.checks`' repeated record);
- **problems inside one record**, from the type
  (:meth:`~clmdetour.tasktypes.base.TaskType.record_problems`): e.g. a multiple-choice
  question offering the same option text twice;
- **distribution shift between splits**: per split, the share of rows per value of the
  type's :meth:`~clmdetour.tasktypes.base.TaskType.profile_key` (the class, the number of
  labels or of correct options); a dev or test split whose shares differ from train's by a
  total variation distance (half the sum of absolute differences) of at least
  :data:`SHIFT_WARN` is warned;
- **note types that are not groups** (BRAT ``type_from_note`` read by field or regex): entity
  types holding spaces or commas beside types that hold none (a semantic-type name read
  instead of a group code) are warned, naming them (:func:`suspect_note_types`);
- **written types beside note types** (BRAT ``type_from_note``, either form): labels that only
  entities kept with the type written in the ``.ann`` carry (an entity without a note, or whose note
  yielded no type under ``unmatched: written``; a type renamed by ``type_map`` is the researcher's
  choice and not counted), beside labels read from notes: a concept id such as ``C0022646`` among
  the group codes. Warned with each label's entity count and first ``file:line``
  (:func:`written_types_beside_note_types`).

A split unit of one sentence (a CoNLL file without document marks, split by hash or with
dev derived from train) is warned by :func:`warn_sentence_unit`.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections import Counter

from clmdetour.tasks.split import SPLITS
from clmdetour.tasktypes import TaskType
from clmdetour.textio import counted

log = logging.getLogger(__name__)

SHIFT_WARN = 0.2  # total variation distance between a split's profile and train's that is warned
EXAMPLES = 3  # examples kept per report


def _exact(parts: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(unicodedata.normalize("NFC", t).strip() for t in parts)


def identical_records(splits: dict[str, list[dict]], ttype: TaskType) -> dict:
    """Rows with the same input and answer under different ids (module doc).

    Returns:
        ``{"groups", "rows", "across_splits", "examples"}``: ``groups`` the distinct
        (input, answer) pairs held by at least two ids, ``rows`` the rows in them beyond the
        first of each group, ``across_splits`` the groups spread over two splits or more,
        ``examples`` up to :data:`EXAMPLES` lists of ``"split:id"``.
    """
    seen: dict[tuple, list[tuple[str, str]]] = {}
    for split in SPLITS:
        for row in splits.get(split, []):
            key = (_exact(ttype.compared_texts(row)), ttype.compared_label_key(row))
            seen.setdefault(key, []).append((split, row["id"]))
    groups = [ids for ids in seen.values() if len({i for _, i in ids}) > 1]
    return {"groups": len(groups), "rows": sum(len(g) - 1 for g in groups),
            "across_splits": sum(len({s for s, _ in g}) > 1 for g in groups),
            "examples": [[f"{s}:{i}" for s, i in g[:4]] for g in groups[:EXAMPLES]]}


def record_problems(splits: dict[str, list[dict]], ttype: TaskType) -> dict:
    """Problems inside single records, from :meth:`TaskType.record_problems`.

    Returns:
        ``{problem: {"rows": n, "examples": ["split:id", ...]}}`` (empty when none).
    """
    out: dict[str, dict] = {}
    for split in SPLITS:
        for row in splits.get(split, []):
            for problem in ttype.record_problems(row):
                entry = out.setdefault(problem, {"rows": 0, "examples": []})
                entry["rows"] += 1
                if len(entry["examples"]) < EXAMPLES:
                    entry["examples"].append(f"{split}:{row['id']}")
    return out


def profile_shift(splits: dict[str, list[dict]], ttype: TaskType) -> dict:
    """Per split, the share of rows per :meth:`TaskType.profile_key` value, and each split's total variation
    distance to train (module doc); ``{}`` for a type without a profile.

    Returns:
        ``{"profile": what the key is, "shares": {split: {value: fraction}}, "distance": {"dev": d, "test": d},
        "warn_at": SHIFT_WARN}``; fractions and distances rounded to 4 decimals.
    """
    if ttype.profile_name is None:
        return {}
    shares = {}
    for split in SPLITS:
        c = Counter(str(ttype.profile_key(r)) for r in splits.get(split, []))
        n = sum(c.values()) or 1
        shares[split] = {k: round(v / n, 4) for k, v in sorted(c.items())}
    dist = {}
    for split in SPLITS[1:]:
        keys = set(shares["train"]) | set(shares[split])
        dist[split] = round(sum(abs(shares["train"].get(k, 0) - shares[split].get(k, 0)) for k in keys) / 2, 4)
    return {"profile": ttype.profile_name, "shares": shares, "distance": dist, "warn_at": SHIFT_WARN}


def suspect_note_types(types: list[str]) -> list[str]:
    """Entity types that do not look like group codes: those holding a space or a comma, when at least one
    other type holds neither (``'Amino Acid, Peptide, or Protein'`` beside ``'CHEM'``); [] otherwise."""
    odd = sorted(t for t in types if re.search(r"[\s,]", t))
    return odd if len(odd) < len(types) else []


def written_types_beside_note_types(labels: set[str], type_origins: dict) -> dict:
    """The labels that only types written in the ``.ann`` give, when types read from notes are labels too
    (module doc); ``{}`` when no kept label was read from a note.

    Args:
        labels: the labels the task keeps (after ``entity_types`` and the label-set policy).
        type_origins: :func:`clmdetour.tasks.brat.tally_type_origins`' tally (``{"note": Counter,
            "written": {type: {...}}}``), or ``{}``.

    Returns:
        ``{label: {"entities", "without_note", "unmatched_note", "example"}}`` for each kept label that no
        note gave: the entities kept with that written type (before the flat policy drops nested ones), how
        many had no note and how many a note yielding no type, and the first ``file:line``.
    """
    from_notes = set(type_origins.get("note") or {}) & labels
    if not from_notes:
        return {}
    written = type_origins.get("written") or {}
    return {t: dict(written[t]) for t in sorted(written) if t in labels and t not in from_notes}


def _warn_written_types(name: str, odd: dict, note_labels: list[str], rule) -> None:
    """The log warning of :func:`written_types_beside_note_types`' labels, naming the keys that fix them."""
    key = f"tasks.{name}"
    shown = "; ".join(f"{t!r}: {counted(e['entities'], 'entity', 'entities')} ({e['without_note']} without a note, "
                      f"{e['unmatched_note']} whose note yields no type), e.g. {e['example']}" for t, e in odd.items())
    fixes = [f"keep only the types read from notes with {key}.entity_types: {note_labels}",
             f"name the group of a written type with {key}.type_map"]
    if any(e["unmatched_note"] for e in odd.values()) and isinstance(rule, dict):
        fixes.append(f"stop on a note that yields no type with {key}.type_from_note.unmatched: error "
                     "(or leave its entity out with unmatched: drop)")
    log.warning("task %s: %s written in the .ann %s labels beside the %s read from notes "
                "(%s.type_from_note): %s; %s (traps.written_types_beside_note_types)", name,
                counted(len(odd), "entity type"), "becomes" if len(odd) == 1 else "become",
                counted(len(note_labels), "type"), key, shown, "; or ".join(fixes))


def _note_traps(name: str, splits: dict[str, list[dict]], ttype: TaskType, spec: dict | None, info: dict | None,
                report: dict) -> None:
    """The BRAT ``type_from_note`` traps of :func:`record_traps`, added to ``report`` and warned."""
    rule = (spec or {}).get("type_from_note")
    if not rule:
        return
    types = sorted({lab for rows in splits.values() for r in rows for lab in ttype.row_labels(r)})
    if isinstance(rule, dict):
        odd = suspect_note_types(types)
        report["note_types_suspect"] = odd
        if odd:
            log.warning("task %s: %d of %d entity types read from notes (tasks.%s.type_from_note) do not look like "
                        "group codes: %s; if the notes' last field is not always the group, read it with a regex "
                        "(type_from_note.regex with one capture group, unmatched: error), or keep the groups with "
                        "tasks.%s.entity_types", name, len(odd), len(types), name, odd, name)
    origins = (info or {}).get("type_origins") or {}
    written = written_types_beside_note_types(set(types), origins)
    report["written_types_beside_note_types"] = written
    if written:
        note_labels = sorted(set(origins.get("note") or {}) & set(types))
        _warn_written_types(name, written, note_labels, rule)


def record_traps(name: str, splits: dict[str, list[dict]], ttype: TaskType, spec: dict | None = None,
                 info: dict | None = None) -> dict:
    """The manifest's ``traps`` section (module doc), each found trap warned in one log line naming the task.

    Args:
        name: task name (messages).
        splits: the rows kept per split.
        ttype: the task's type.
        spec: the resolved task spec (``type_from_note``), or None.
        info: what :func:`clmdetour.tasks.reading.load_raw_splits` returned beside the rows
            (``type_origins``), or None.

    Returns:
        ``{"identical_records", "record_problems", "profile_shift", "note_types_suspect"}``, and
        ``written_types_beside_note_types`` for a task with ``type_from_note``.
    """
    report = {"identical_records": identical_records(splits, ttype), "record_problems": record_problems(splits, ttype),
              "profile_shift": profile_shift(splits, ttype), "note_types_suspect": []}
    ident = report["identical_records"]
    if ident["groups"]:
        one = ident["rows"] == 1
        log.warning("task %s: %s %s another's %s and answer under a different id (%d across splits), "
                    "e.g. %s; the manifest lists them (traps.identical_records)", name,
                    counted(ident["rows"], "record"), "repeats" if one else "repeat", ttype.input_description,
                    ident["across_splits"], ident["examples"][0])
    for problem, entry in report["record_problems"].items():
        log.warning("task %s: %s with %s, e.g. %s (traps.record_problems)", name, counted(entry["rows"], "record"),
                    problem, entry["examples"])
    shift = report["profile_shift"]
    for split, d in (shift.get("distance") or {}).items():
        if d >= SHIFT_WARN:
            log.warning("task %s: the %s of %s differs from train's (total variation %.2f >= %.2f): train %s, %s %s; "
                        "a constant answer chosen on train fits %s differently (traps.profile_shift)", name,
                        shift["profile"], split, d, SHIFT_WARN, shift["shares"]["train"], split, shift["shares"][split],
                        split)
    _note_traps(name, splits, ttype, spec, info, report)
    return report


def warn_sentence_unit(name: str | None, split_rule: dict) -> bool:
    """Warn when a split (or the dev derived from train) assigns single sentences, not documents, so
    neighbouring sentences of one document may land in different splits; returns whether it warned."""
    units = [("the split", split_rule.get("unit") or ""), ("dev", (split_rule.get("dev") or {}).get("unit") or "")]
    warned = False
    for what, unit in units:
        if unit.startswith("sentence"):
            why = unit[len("sentence"):].strip()
            log.warning("task %s: %s is made sentence by sentence%s; sentences of one document may land in train "
                        "and %s; mark the documents (-DOCSTART- lines, '# doc_id = X' comments, or tasks.%s.doc_marker)",
                        name, what, f" {why}" if why else "", "dev" if what == "dev" else "dev/test", name)
            warned = True
    return warned
