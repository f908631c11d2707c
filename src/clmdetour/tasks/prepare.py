"""Prepare one evaluation task: read its source, apply split and label-set policies, check it, write it.

This is the ``prepare_task`` job's code (run time). The task entry it starts from is resolved by
:func:`clmdetour.tasks.spec.resolve_task_spec` (planning time: the job's params). :func:`build_task`
runs the steps, each in its own module:

- reading the source into raw rows per split (:mod:`clmdetour.tasks.reading`);
- the label-set policy: labels chosen on train, applied to every split, unlabelled test rows
  refused (:mod:`clmdetour.tasks.labels`);
- the checks: repeated records, empty splits, repeated ids, leakage between splits, conflicting
  labels (:mod:`clmdetour.tasks.checks`);
- the manifest (:mod:`clmdetour.tasks.manifest`), with each source's own section made beside its
  reader (:mod:`~clmdetour.tasks.brat`, :mod:`~clmdetour.tasks.fracco`,
  :mod:`~clmdetour.tasks.formats`, :mod:`~clmdetour.tasks.relation`).

Output (``results/tasks/{task}/``, written atomically by :func:`clmdetour.tasks.contract.write_task`):
``train/``, ``dev/``, ``test/`` (``datasets.Dataset.save_to_disk``), ``labels.json`` and
``manifest.json``. Row columns: ``id``, ``text`` and the task type's own
(:meth:`clmdetour.tasktypes.base.TaskType.features`, the one source), by type:

- ``ner``: ``words``, ``word_offsets`` (each word's ``[start, end]`` in ``text``), ``tags`` (IOB2);
  ``text`` is the segment's original text;
- ``multiclass``: ``label``;
- ``multilabel``: ``labels``;
- ``similarity``: ``text_pair``, ``score``;
- ``multiple_choice``: ``options``, ``option_keys``, ``answers``.
"""

from __future__ import annotations

from pathlib import Path

from clmdetour.tasks.checks import (
    check_conflicting_labels,
    check_split_overlap,
    check_splits,
    drop_duplicate_records,
)
from clmdetour.tasks.contract import task_eval_texts, write_task
from clmdetour.tasks.labels import apply_label_set, check_label_kinds, check_unlabelled, merged_label_forms
from clmdetour.tasks.manifest import describe_ids, document_counts, task_manifest
from clmdetour.tasks.reading import load_raw_splits
from clmdetour.tasks.spec import marker_token_strings, resolve_task
from clmdetour.tasks.traps import record_traps


def build_task(name: str, spec: dict) -> tuple[dict[str, list[dict]], dict, dict]:
    """Read, split and label-filter a task (no writing), as named steps: resolve the spec, load the
    raw splits, handle repeated records, check the splits, apply the label set, check unlabelled
    rows and split overlap, count conflicting labels, keep the output columns, then describe the
    result (``labels.json``, manifest).

    Args:
        name: task name (used in messages and outputs).
        spec: the task's config entry (resolved here with :func:`~clmdetour.tasks.spec.resolve_task`, which gives
            the task type passed on to the reader and the manifest).

    Returns:
        ``(rows_per_split, labels_json, manifest)``; rows have exactly the output columns.

    Raises:
        TaskError: any source, split or label-set problem (see :mod:`~clmdetour.tasks.reading`,
            :mod:`~clmdetour.tasks.labels`, :mod:`~clmdetour.tasks.checks`).
    """
    spec, ttype = resolve_task(name, spec)
    splits, info = load_raw_splits(spec, name, ttype)
    files_read = [str(p) for p in info["files"]]
    splits, duplicates = drop_duplicate_records(name, splits, ttype, spec["duplicates"])
    # a given split's own file(s), named when that split is empty (not the Hub's split names)
    split_files = None if "hub_splits" in info["split"] else info["split"].get("files")
    check_splits(name, splits, files_read, split_files=split_files)
    merged_forms = merged_label_forms(name, splits)
    labels, splits, label_report = apply_label_set(splits, ttype, spec["label_set"],
                                                   spec["max_unlabelled_fraction"], spec)
    check_splits(name, splits, files_read, stage=" after the label-set policy", split_files=split_files)
    check_label_kinds(name, splits, labels, ttype)
    reports = {"label_set": label_report,
               "unlabelled": check_unlabelled(name, splits, label_report, ttype, spec),
               "split_overlap": check_split_overlap(name, splits, spec["max_split_overlap"],
                                                    spec["overlap_min_words"], spec, ttype),
               "conflicting_labels": check_conflicting_labels(name, splits, ttype),
               "duplicates": duplicates,
               "traps": record_traps(name, splits, ttype, spec, info),
               "merged_label_forms": merged_forms,
               "ids": describe_ids(name, splits, spec),
               "documents": document_counts(spec, splits)}
    cols = list(ttype.features())
    rows = {k: [{c: r[c] for c in cols} for r in v] for k, v in splits.items()}
    labels_json = ttype.labels_record(name, labels, spec.get("metric"))
    if marker_token_strings(spec):
        labels_json["marker_tokens"] = marker_token_strings(spec)
    return rows, labels_json, task_manifest(name, spec, info, rows, labels, files_read, reports, ttype)


def prepare_task(name: str, spec: dict, out_dir: str | Path) -> dict:
    """Build task ``name`` from its config entry and write it to ``out_dir``.

    Returns:
        The manifest (also written as ``out_dir/manifest.json``).

    Raises:
        TaskError: see :func:`build_task`; nothing is written then.
    """
    rows, labels_json, manifest = build_task(name, spec)
    write_task(out_dir, rows, labels_json, manifest)
    return manifest


def tasks_eval_texts(tasks: list[str], task_dirs: list[str]) -> dict[str, list[str]]:
    """``{task: its dev+test texts}`` (:func:`task_eval_texts`) of prepared tasks, for decontamination.

    Raises:
        ValueError: ``tasks`` and ``task_dirs`` differ in length.
        FileNotFoundError: as :func:`task_eval_texts`.
    """
    if len(tasks) != len(task_dirs):
        raise ValueError(f"{len(tasks)} task names for {len(task_dirs)} task folders")
    return {task: task_eval_texts(d) for task, d in zip(tasks, task_dirs)}
