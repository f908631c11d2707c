"""BRAT-style folder formats: ``brat`` (entities: NER) and ``fracco`` (BRAT + ICD-O notes: document codes).

A split is a folder (or its ``subfolder`` values) of ``name.txt`` + ``name.ann`` pairs, read by
:func:`clmdetour.tasks.brat.read_brat_folder`; ``missing_ann`` applies, the split unit is the document.
The entity keys (``segmentation``, ``discontinuous``, ``entity_types``, ``type_map``, ``type_from_note``) and
their manifest sections are shared with ``bigbio_kb`` (:mod:`.hub`), whose documents are BRAT documents too.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from clmdetour.tasks.fileformats.base import FOLDERS, TaskFormat

#: How entity offsets are matched to the ``.txt`` (the manifest's ``policies.offsets``).
OFFSETS_RULE = ("the .txt as written, else without BOM, else CRLF/CR as one character: the first reading every "
                "entity fits")


def _documents(reader, path: Path, sub: str | None) -> list:
    from clmdetour.tasks import brat

    prefix = f"{sub}/" if sub and len(reader.subs) > 1 else ""
    return brat.read_brat_folder(path, reader.spec["missing_ann"], True, reader.counts, id_prefix=prefix)


def entity_reports(spec: Mapping, info: Mapping) -> dict:
    """The manifest sections of an entity format: ``discontinuous_policies`` (what each policy keeps),
    ``type_from_note`` and ``entity_types`` when set (:mod:`clmdetour.tasks.brat`)."""
    from clmdetour.tasks import brat

    out = {"discontinuous_policies": {"chosen": spec["discontinuous"], **info["discontinuous_policies"]}}
    if isinstance(spec.get("type_from_note"), dict):
        out["type_from_note"] = brat.type_note_report(spec, info)
    if spec.get("entity_types") is not None:
        out["entity_types"] = brat.entity_types_report(spec, info)
    return out


def entity_policies(spec: Mapping) -> dict:
    """The manifest policies of an entity format: segmentation, sentence rule, discontinuous, nested, words and the
    entity-type keys."""
    from clmdetour.language import get_language
    from clmdetour.tasks import brat

    sentence = spec["segmentation"] == "sentence"
    return {
        "segmentation": spec["segmentation"],
        "sentence_splitter": spec["sentence_splitter"] if sentence else None,
        "sentence_rule": (f"line breaks, then {get_language().sentence_rule}; never inside an "
                       "entity" if spec["sentence_splitter"] == "spacy" else
                       "split at line breaks and after . ! ? followed by whitespace and an upper-case letter "
                       "or digit; never inside an entity") if sentence else None,
        "discontinuous": spec["discontinuous"],
        "nested": "flat: longest span kept, then earliest start, then type name; overlapping others dropped",
        "words": f"regex {brat.WORD_RE.pattern!r}, cut at entity boundaries",
        "entity_types": spec["entity_types"],
        "type_map": spec.get("type_map"),
        "type_from_note": spec.get("type_from_note"),
    }


def _folder_policies(spec: Mapping) -> dict:
    return {"missing_ann": spec["missing_ann"], "offsets": OFFSETS_RULE}


def _fracco_reports(spec: Mapping, info: Mapping) -> dict:
    from clmdetour.tasks import fracco

    return {"icdo": fracco.icdo_report(spec, info)}


BRAT = TaskFormat(
    "brat", FOLDERS, describe=lambda spec: "BRAT folders of name.txt + name.ann pairs",
    read_unit=lambda reader, path, sub: reader.brat_rows(_documents(reader, path, sub)),
    documents="segments", reports=entity_reports,
    policies=lambda spec: dict(entity_policies(spec), **_folder_policies(spec)))

FRACCO = TaskFormat(
    "fracco", FOLDERS,
    describe=lambda spec: "BRAT folders of name.txt + name.ann pairs with '#<n>\\tICD-O T<k>\\t<codes>' note lines",
    read_unit=lambda reader, path, sub: reader.fracco_rows(_documents(reader, path, sub)),
    reports=_fracco_reports, policies=_folder_policies)

ENTRIES = (BRAT, FRACCO)
