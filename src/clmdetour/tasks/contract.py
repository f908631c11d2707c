"""The task contract (``results/tasks/{task}``): its writer and its reader, side by side.

A prepared task is a folder with ``labels.json`` (task, type, labels, metric;
the task type adds what it needs, e.g. NER's BIO ``tags``), ``manifest.json``
(what preparation did), and one ``datasets`` folder per split (``train``,
``dev``, ``test``) whose columns are ``id``, ``text`` and the task type's own
(:meth:`clmdetour.tasktypes.TaskType.features`). :func:`write_task` writes
it atomically; :func:`load_task_data` reads and checks it; the trainer, the
trivial baseline and the table read tasks only through this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from clmdetour.errors import ExpectedError
from clmdetour.io import atomic_output_dir, atomic_write_json, read_json
from clmdetour.tasks.split import SPLITS
from clmdetour.tasktypes import TASK_TYPES, TaskType, get_task_type

__all__ = ["SPLITS", "TaskData", "TaskDataError", "load_task_data", "output_columns", "read_split_rows",
           "task_eval_texts", "write_task"]


def output_columns(task_type: str) -> list[str]:
    """The columns of a prepared task's rows, by type name (the task contract, docs/tasks.md).

    ``prepare_task`` carries them in its params (the rule file passes the config's ``type`` string: this
    is where it becomes the type), so a change of the contract (NER's ``word_offsets``) reruns the
    preparation of the tasks it affects.

    Raises:
        InputError: an unknown type name.
    """
    return list(get_task_type(task_type, "task type").features())


def write_task(out_dir: str | Path, rows: dict[str, list[dict]], labels_json: dict, manifest: dict) -> None:
    """Write a built task atomically (a temporary sibling folder renamed into place); the splits' columns
    are those of ``labels_json["type"]``.

    Raises:
        InputError: ``labels_json["type"]`` is not a registered type.
    """
    import datasets

    features = get_task_type(labels_json["type"], "labels.json type").features()
    datasets.disable_progress_bars()
    with atomic_output_dir(out_dir) as tmp:
        for split in SPLITS:
            ds = datasets.Dataset.from_list(rows[split], features=features)
            ds.save_to_disk(str(tmp / split))
        atomic_write_json(tmp / "labels.json", labels_json)
        atomic_write_json(tmp / "manifest.json", manifest)


class TaskDataError(ExpectedError, ValueError):
    """Task data cannot be used; the message names the file (and row id)."""


@dataclass
class TaskData:
    """A task's rows and label set, read from ``results/tasks/{task}``, with its task type (the object the
    trainer, the trivial baseline and the scorer call; its ``name`` is ``labels.json``'s ``type``)."""

    name: str
    task_type: TaskType  # the registered type (:data:`clmdetour.tasktypes.TASK_TYPES`) of labels.json's ``type``
    labels: list[str]  # class names (classification) or IOB2 tags (ner), in id order
    metric: str
    splits: dict[str, list[dict]]
    # strings the fine-tuning adds to the tokenizer as special tokens (labels.json marker_tokens; relation tasks)
    marker_tokens: list[str] = field(default_factory=list)


#: Feature types whose Arrow values are the row values as they are (no decoding by ``datasets``).
PLAIN_FEATURE_TYPES = frozenset({"Value", "List", "LargeList", "Sequence", "ClassLabel"})


def _plain_features(features) -> bool:
    if isinstance(features, dict):
        if "_type" in features and features["_type"] not in PLAIN_FEATURE_TYPES:
            return False
        return all(_plain_features(v) for v in features.values())
    if isinstance(features, list):
        return all(_plain_features(v) for v in features)
    return True


def read_split_rows(path: str | Path) -> list[dict]:
    """The rows of a split folder written by ``datasets.Dataset.save_to_disk``, as ``Dataset.to_list()`` gives them.

    The folder's Arrow files (named in its ``state.json``) are read with pyarrow, as ``datasets``
    itself reads them, without importing ``datasets`` (and pandas with it: 0.7 s of a fine-tuning
    job's start on 2 CPU cores). A folder that is not that plain layout (a format set on the
    dataset, a feature type that ``datasets`` decodes, such as images) is read by
    ``datasets.load_from_disk`` instead.

    Raises:
        FileNotFoundError: and the errors of ``datasets.load_from_disk``, for a folder neither way reads.
    """
    import json

    import pyarrow as pa
    import pyarrow.ipc

    path = Path(path)
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
        info = json.loads((path / "dataset_info.json").read_text(encoding="utf-8"))
        plain = state.get("_format_type") is None and _plain_features(info.get("features"))
        files = [path / f["filename"] for f in state["_data_files"]] if plain else []
    except (OSError, ValueError, KeyError, TypeError):
        files = []
    if files:
        rows: list[dict] = []
        for file in files:
            with pa.memory_map(str(file)) as source:  # the table's buffers live in the map: convert inside
                rows.extend(pa.ipc.open_stream(source).read_all().to_pylist())
        return rows
    from datasets import load_from_disk

    return load_from_disk(str(path)).to_list()


def load_task_data(task_dir: str | Path, task: str) -> TaskData:
    """Read ``labels.json`` and the ``train``/``dev``/``test`` datasets of a task folder.

    Raises:
        TaskDataError: missing file, a name or type that does not match, an
            empty split, or a row whose label is not in ``labels.json`` (the
            message names the file and the row id).
    """
    task_dir = Path(task_dir)
    labels_path = task_dir / "labels.json"
    if not labels_path.exists():
        raise TaskDataError(f"{labels_path}: missing (expected the output of the task preparation rule)")
    spec = read_json(labels_path)
    for key in ("task", "type", "labels", "metric"):
        if key not in spec:
            raise TaskDataError(f"{labels_path}: key {key!r} missing")
    if spec["task"] != task:
        raise TaskDataError(f"{labels_path}: describes task {spec['task']!r}, not {task!r}")
    if spec["type"] not in TASK_TYPES:
        raise TaskDataError(f"{labels_path}: type {spec['type']!r} is not one of {tuple(TASK_TYPES)}")
    ttype = TASK_TYPES[spec["type"]]
    if spec["metric"] not in ttype.metrics:
        raise TaskDataError(f"{labels_path}: metric {spec['metric']!r} is not one of {ttype.metrics}")
    try:
        labels = ttype.model_labels(spec, str(labels_path))
    except ValueError as e:
        raise TaskDataError(str(e)) from None
    if not labels:
        raise TaskDataError(f"{labels_path}: empty label set")
    known = set(labels)
    splits = {}
    for split in SPLITS:
        path = task_dir / split
        if not path.exists():
            raise TaskDataError(f"{path}: split folder missing")
        rows = read_split_rows(path)
        if not rows:
            raise TaskDataError(f"{path}: split is empty")
        for row in rows:
            try:
                values = ttype.row_values(row, str(path))
            except ValueError as e:
                raise TaskDataError(str(e)) from None
            bad = [v for v in values if v not in known]
            if bad:
                raise TaskDataError(f"{path}: row {row['id']!r} has label {bad[0]!r} not in {labels_path.name} ({len(labels)} labels)")
        splits[split] = rows
    markers = spec.get("marker_tokens") or []
    if not isinstance(markers, list) or not all(isinstance(m, str) and m for m in markers):
        raise TaskDataError(f"{labels_path}: marker_tokens {markers!r} is not a list of non-empty strings")
    return TaskData(task, ttype, labels, spec["metric"], splits, list(markers))


def task_eval_texts(task_dir: str | Path) -> list[str]:
    """The non-empty ``text`` of every dev and test row of a prepared task (for decontamination).

    Args:
        task_dir: ``results/tasks/{task}``.

    Returns:
        Texts of ``dev`` then ``test`` rows, in row order (empty texts left out).

    Raises:
        FileNotFoundError: ``task_dir`` lacks ``labels.json`` or a split folder.
    """
    import datasets

    task_dir = Path(task_dir)
    if not (task_dir / "labels.json").exists():
        raise FileNotFoundError(f"{task_dir}: not a prepared task folder (labels.json missing)")
    read_json(task_dir / "labels.json")
    texts: list[str] = []
    for split in ("dev", "test"):
        if not (task_dir / split).is_dir():
            raise FileNotFoundError(f"{task_dir / split}: split folder missing")
        texts.extend(t for t in datasets.load_from_disk(str(task_dir / split))["text"] if t)
    return texts
