"""A prepared task's ``manifest.json``: what preparation read, did and kept.

:func:`task_manifest` assembles it from the reading's ``info``
(:func:`clmdetour.tasks.reading.load_raw_splits`), the reports of the label-set policy
(:mod:`clmdetour.tasks.labels`) and the checks (:mod:`clmdetour.tasks.checks`), the input files
with their SHA-256 (:func:`files_with_hashes`), documents and ids per split
(:func:`document_counts`, :func:`describe_ids`), the policies applied and each source kind's own
section, made beside its reader (:mod:`~clmdetour.tasks.brat`, :mod:`~clmdetour.tasks.fracco`,
:mod:`~clmdetour.tasks.formats`, :mod:`~clmdetour.tasks.relation`).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from clmdetour.io import sha256_file, sha256_json
from clmdetour.tasks import relation
from clmdetour.tasks.fileformats import get_format
from clmdetour.tasks.split import SPLITS
from clmdetour.tasktypes import TaskType


def files_with_hashes(paths: list[Path]) -> list[dict]:
    """Every file of ``paths`` (a folder: the files under it, sorted) as ``{"path", "sha256", "bytes"}``.

    Raises:
        OSError: a path that cannot be read (a missing file: ``FileNotFoundError``).
    """
    files = []
    for p in paths:
        items = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
        for f in items:
            files.append({"path": str(f), "sha256": sha256_file(f), "bytes": f.stat().st_size})
    return files


def describe_ids(name: str, splits: dict[str, list[dict]], spec: dict) -> dict[str, str]:
    """Where each split's example ids come from (a field, generated, or document position); warns when generated.

    Generated ids (``id_field`` null) are ``<file stem>-<line>`` (Hub: ``<split>-<row>``); when
    the records have an ``id`` field all the same, the description says it was not read.
    """
    ids = {}
    id_field = spec.get("id_field")
    fmt = get_format(spec["format"])
    pattern = fmt.generated_ids
    for split in SPLITS:
        gen = sum(bool(r.get("id_generated")) for r in splits[split])
        unused = sum(bool(r.get("id_unused")) for r in splits[split])
        hint = (f"; {unused} rows have an 'id' field, not read: set tasks.{name}.id_field: id to use it"
                if unused else "")
        ids[split] = (f"generated: {pattern} ({gen} rows; id_field is null{hint})"
                      if gen else f"field {id_field!r}" if fmt.fields else "document / sentence position")
        if gen:
            import logging

            logging.getLogger(__name__).warning("task %s: %s ids generated as %s (id_field is null%s)",
                                                name, split, pattern, hint)
    return ids


def document_counts(spec: dict, splits: dict[str, list[dict]]) -> dict[str, int]:
    """Documents per split: the units a hash split keeps together.

    CoNLL: distinct documents (``-DOCSTART-``, a document comment or a ``doc_marker``
    match; sentences of a file without marks count one each); BRAT with sentence
    segmentation: distinct files; otherwise one per row.
    """
    documents = get_format(spec["format"]).documents
    if documents == "doc":
        return {k: len({r.get("doc") or r["id"] for r in v}) for k, v in splits.items()}
    by_sentence = documents == "segments" and spec["segmentation"] == "sentence"
    return {k: len({r["id"].rsplit(":", 1)[0] for r in v}) if by_sentence else len(v) for k, v in splits.items()}


def task_manifest(name: str, spec: dict, info: dict, rows: dict[str, list[dict]], labels: list[str],
                  files_read: list[str], reports: dict, ttype: TaskType) -> dict:
    """The task's ``manifest.json``: source, input files with SHA-256, split, counts, documents,
    label set, unlabelled rows, split overlap, conflicting labels, repeated records, ids, policies and
    a hash of each split's rows.

    ``reports`` holds ``label_set``, ``unlabelled``, ``split_overlap``, ``conflicting_labels``,
    ``duplicates``, ``ids`` and, optionally, ``documents`` (:func:`document_counts` of the raw rows;
    else counted from ``rows``).
    """
    source = {k: spec.get(k) for k in ("source", "format", "path", "url", "sha256", "dataset", "hub_id",
                                        "hub_config", "revision", "subfolder", "licence", "description", "fetch")
              if spec.get(k) is not None}
    files = files_with_hashes([Path(p) for p in files_read])
    manifest = {
        "task": name,
        "type": spec["type"],
        "source": source,
        "files": files,
        "files_sha256": sha256_json([[f["path"], f["sha256"]] for f in files]),
        "split": info["split"],
        "counts": {k: len(v) for k, v in rows.items()},
        "documents": reports.get("documents") or document_counts(spec, rows),
        "label_counts": {k: ttype.label_counts(v) for k, v in rows.items()},
        "label_set": {"policy": spec["label_set"], "labels": len(labels), **reports["label_set"]},
        "unlabelled": reports["unlabelled"],
        "split_overlap": reports["split_overlap"],
        "conflicting_labels": reports["conflicting_labels"],
        "duplicates": reports["duplicates"],
        "traps": reports.get("traps", {}),
        "merged_label_forms": reports.get("merged_label_forms", {}),
        "ids": reports["ids"],
        "annotations": info["annotations"],
        "policies": _policies(spec),
        "rows_sha256": {k: sha256_json(v) for k, v in rows.items()},
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    manifest.update(_source_reports(spec, info))
    return manifest


def _source_reports(spec: dict, info: dict) -> dict:
    """The manifest's sections of one source kind: the format's own
    (:attr:`clmdetour.tasks.fileformats.TaskFormat.reports`: brat's ``discontinuous_policies``, ``type_from_note``
    and ``entity_types``, FRACCO's ``icdo``, CoNLL's ``tag_scheme``), then the relation keys' ``relation``
    (:mod:`clmdetour.tasks.relation`)."""
    fmt = get_format(spec["format"])
    out = dict(fmt.reports(spec, info)) if fmt.reports else {}
    if spec.get("label_map") or spec.get("entity_markers"):
        out["relation"] = relation.relation_report(spec, info)
    return out


def _policies(spec: dict) -> dict:
    fmt = get_format(spec["format"])
    pol = {"unseen_labels": spec["label_set"]["unseen"], "top_k": spec["label_set"]["top_k"]}
    if fmt.policies:
        pol.update(fmt.policies(spec))
    if spec.get("label_map"):
        pol["label_map_unmapped"] = spec["label_map_unmapped"]
    if spec.get("entity_markers"):
        pol["marker_tokens"] = spec["marker_tokens"]
    pol["max_unlabelled_fraction"] = spec["max_unlabelled_fraction"]
    pol["max_split_overlap"] = spec["max_split_overlap"]
    pol["overlap_min_words"] = spec["overlap_min_words"]
    pol["duplicates"] = spec["duplicates"]
    return pol
