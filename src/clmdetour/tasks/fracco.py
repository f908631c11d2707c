"""FRACCO: document-level ICD-O-3 codes from BRAT ``ICD-O`` notes.

FRACCO (Pignat et al., 2025, arXiv:2510.13873; Zenodo record 17284817) is the
French version of CANTEMIST: BRAT documents whose entities carry ICD-O-3 codes
in note lines ``#<n>\\tICD-O T<k>\\t<codes>``. A document's labels are the set
of valid codes found in its ``ICD-O`` notes.

Code validation (counts go to the task manifest):

- a note value is split on ``;`` and whitespace (``C34.1 8000/1;C34.9 8000/1``
  gives four pieces);
- a piece is kept when it is a valid ICD-O-3 topography code
  (:data:`TOPOGRAPHY_RE`, ``C\\d\\d.\\d``) or morphology code
  (:data:`MORPHOLOGY_RE`, ``\\d{4}/\\d``: histology and behaviour);
- every other piece is junk, counted by kind: ``bare_digits`` (``1`` ... ``4``:
  stray differentiation grades), ``morphology_with_grade`` (``8140/32``: a sixth
  grade digit; not in the task's code scheme, not rewritten), ``topography_without_subsite``
  (``C18``), ``tocheck``, ``todelete`` and ``other``;
- ``AnnotatorNotes`` lines (``trad``, ``todelete`` ...) carry no code and are
  counted by value; notes pointing at an entity id absent from the file are
  counted as ``notes_without_entity``.
"""

from __future__ import annotations

import re
from collections import Counter

from clmdetour.tasks.brat import BratDocument

TOPOGRAPHY_RE = re.compile(r"C\d\d\.\d")
MORPHOLOGY_RE = re.compile(r"\d{4}/\d")
CODE_KINDS = ("morphology", "topography", "both")


def code_kind(code: str) -> str | None:
    """``"topography"``, ``"morphology"`` or ``None`` (not a valid ICD-O-3 code)."""
    if TOPOGRAPHY_RE.fullmatch(code):
        return "topography"
    if MORPHOLOGY_RE.fullmatch(code):
        return "morphology"
    return None


def junk_kind(piece: str) -> str:
    """The junk category of an invalid note piece (see module doc)."""
    low = piece.lower()
    if low in ("tocheck", "todelete"):
        return low
    if re.fullmatch(r"\d+", piece):
        return "bare_digits"
    if re.fullmatch(r"\d{4}/\d\d+", piece):
        return "morphology_with_grade"
    if re.fullmatch(r"C\d\d", piece):
        return "topography_without_subsite"
    return "other"


def split_note_value(value: str) -> list[str]:
    """Pieces of an ``ICD-O`` note value, split on ``;`` and whitespace (empty pieces removed)."""
    return [p for p in re.split(r"[;\s]+", value) if p]


def document_codes(doc: BratDocument, kind: str = "both", counts: Counter | None = None,
                   junk_examples: dict | None = None) -> list[str]:
    """The sorted set of valid ICD-O-3 codes of one FRACCO document.

    Args:
        doc: a parsed BRAT document (offsets already checked).
        kind: ``"morphology"``, ``"topography"`` or ``"both"``; valid codes of the
            other kind are counted as ``codes_other_kind`` and left out.
        counts: optional Counter updated with ``icdo_notes``, ``codes_valid``,
            ``junk_<kind>``, ``annotator_notes_<value>``, ``notes_without_entity``,
            ``notes_other_type``, ``codes_other_kind``.
        junk_examples: optional dict ``junk kind -> "file:line value"`` (first seen).

    Returns:
        Sorted unique codes.

    Raises:
        ValueError: unknown ``kind``.
    """
    if kind not in CODE_KINDS:
        raise ValueError(f"code_kind must be one of {CODE_KINDS}, got {kind!r}")
    counts = counts if counts is not None else Counter()
    entity_ids = {e.id for e in doc.entities}
    codes: set[str] = set()
    for note in doc.notes:
        if note.note_type == "AnnotatorNotes":
            counts[f"annotator_notes_{note.value.lower() or 'empty'}"] += 1
            continue
        if note.note_type != "ICD-O":
            counts["notes_other_type"] += 1
            continue
        counts["icdo_notes"] += 1
        if note.target not in entity_ids:
            counts["notes_without_entity"] += 1
        pieces = split_note_value(note.value)
        if not pieces:
            counts["junk_empty"] += 1
        for piece in pieces:
            k = code_kind(piece)
            if k is None:
                jk = junk_kind(piece)
                counts[f"junk_{jk}"] += 1
                if junk_examples is not None:
                    junk_examples.setdefault(jk, f"{doc.ann_path}:{note.line} {piece}")
                continue
            counts["codes_valid"] += 1
            if kind != "both" and k != kind:
                counts["codes_other_kind"] += 1
                continue
            codes.add(piece)
    return sorted(codes)


def icdo_report(spec: dict, info: dict) -> dict:
    """The FRACCO manifest's ``icdo`` section: code kind, valid codes, junk and annotator-note counts.

    Args:
        spec: the resolved task spec (``label_set.code_kind``).
        info: what :func:`clmdetour.tasks.reading.load_raw_splits` returned beside the rows
            (``annotations``: the counts of :func:`document_codes`; ``icdo_junk_examples``).
    """
    ann = info["annotations"]
    return {
        "code_kind": spec["label_set"]["code_kind"],
        "valid_codes": ann.get("codes_valid", 0),
        "junk": {k[5:]: v for k, v in ann.items() if k.startswith("junk_")},
        "junk_total": sum(v for k, v in ann.items() if k.startswith("junk_")),
        "junk_examples": info["icdo_junk_examples"],
        "annotator_notes": {k[16:]: v for k, v in ann.items() if k.startswith("annotator_notes_")},
        "documents_without_ann": ann.get("documents_without_ann", 0),
    }
