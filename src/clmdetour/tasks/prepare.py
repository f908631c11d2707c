"""Prepare one evaluation task: read its source, apply split and label-set policies, write it.

This is the ``prepare_task`` job's code (run time). The task entry it starts from is resolved by
:func:`clmdetour.tasks.spec.resolve_task_spec` (planning time: the job's params); each source's own
manifest section is made beside its reader (:mod:`~clmdetour.tasks.brat`, :mod:`~clmdetour.tasks.fracco`,
:mod:`~clmdetour.tasks.formats`, :mod:`~clmdetour.tasks.relation`).

Output (``results/tasks/{task}/``, written atomically): ``train/``, ``dev/``,
``test/`` (``datasets.Dataset.save_to_disk``), ``labels.json`` and
``manifest.json``. Row columns by task type:

- ``ner``: ``id``, ``text`` (the segment's original text), ``words``, ``tags`` (IOB2);
- ``multiclass``: ``id``, ``text``, ``label``;
- ``multilabel``: ``id``, ``text``, ``labels``.

Label-set policy (``label_set`` in the task config):

- the label set is taken from **train** only: every label (entity type,
  class, code) seen in train, or with ``top_k`` the ``k`` most frequent by
  document frequency on train (rows containing the label; ties broken by
  label name);
- a label seen in train but outside the top ``k`` is removed everywhere (an
  entity becomes ``O``, a multiclass row is dropped, a multilabel code is
  removed from the row's list), counted in the manifest;
- a label in dev or test **never seen in train**: ``unseen: error`` raises
  :class:`TaskError` naming the file, line and label; ``unseen: drop``
  removes it as above and counts it. Default: ``error`` for ``ner`` and
  ``multiclass``, ``drop`` for ``multilabel`` (code sets have long tails:
  a hash split of 1,300 FRACCO documents always leaves codes seen only in test).
- a dev/test label unseen in train with ``unseen: error``: when few rows are
  affected (at most ``max_unlabelled_fraction`` of the split) the error names
  the first file, line and label and suggests ``unseen: drop``; otherwise it
  says how many labels and rows are affected and suggests checking the label
  field, the entity type or ``label_separator``;
- ``max_unlabelled_fraction`` (default 0.05): a multilabel task whose test rows
  have no label seen in train (after ``unseen`` handling, before ``top_k``), or
  a multiclass task whose test rows are dropped as unseen, above this fraction
  is refused; the error names the separator and shows one raw label value;
- an empty split (0 examples) is an error naming the files read.

Repeated records (``duplicates``): an id may occur once across the three
splits. A record repeated under the same id with the same text and labels
(the type's :meth:`~clmdetour.tasktypes.base.TaskType.example_texts` and
:meth:`~clmdetour.tasktypes.base.TaskType.label_key`) is an error with
``duplicates: error`` (default; the message suggests ``drop_identical``), or
dropped and counted with ``drop_identical``: the first copy is kept (splits in
train, dev, test order, rows in file order), so a test copy of a train record
leaves test. A same-id record with a different text or labels is always an
error naming both places.

Leakage between splits (:mod:`clmdetour.tasks.overlap`): exact and near-exact
text overlaps between train, dev and test are counted in the manifest, for
every length: examples of at least ``overlap_min_words`` (default 5) words,
which the check uses, and shorter ones (counted only). A task whose test
overlap fraction (test examples of at least ``overlap_min_words`` words whose
text occurs in train) exceeds ``max_split_overlap`` (default 0.01) is
refused, naming the count, the fraction, three example ids and the fix for
its source and split (:func:`overlap_fix`). The same
normalised text carrying different labels, within a split or across splits,
is counted in the manifest (``conflicting_labels``) and warned, never refused.
Hash splits and a dev set derived from train (a ``splits`` map without
``dev``) assign whole *documents*.
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from clmdetour.io import (
    sha256_file,
    sha256_json,
)
from clmdetour.language import get_language
from clmdetour.tasks import bigbio, brat, fracco, overlap, relation
from clmdetour.tasks.contract import (
    labels_record,
    output_columns,
    task_eval_texts,
    write_task,
)
from clmdetour.tasks.formats import (
    TABLE_FORMATS,
    FormatError,
    read_conll,
    read_hub_snapshot,
    read_iob_tsv,
    read_table,
    tag_scheme_report,
)
from clmdetour.tasks.segment import SegmentationError
from clmdetour.tasks.spec import (
    WORD_FORMATS,
    TaskError,
    expected_files,
    marker_token_strings,
    resolve_task_spec,
    subfolders,
)
from clmdetour.tasks.split import SPLITS, hash_split, hash_split_rule, hash_unit
from clmdetour.tasktypes import TASK_TYPES as TYPE_REGISTRY


def _files_with_hashes(paths: list[Path]) -> list[dict]:
    files = []
    for p in paths:
        items = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
        for f in items:
            files.append({"path": str(f), "sha256": sha256_file(f), "bytes": f.stat().st_size})
    return files


def _brat_rows(docs: list[brat.BratDocument], spec: dict, counts: Counter, policies: dict,
               note_rule: str | brat.NoteTypeRule | None = None, note_examples: dict | None = None,
               filtered_examples: list[str] | None = None) -> list[dict]:
    rows = []
    for doc in docs:
        brat.map_entity_types(doc, spec.get("type_map"), note_rule, counts, note_examples)
        first_line = {}
        for e in doc.entities:
            first_line.setdefault(e.type, f"{doc.ann_path}:{e.line}")
        kept = doc.entities if spec["entity_types"] is None else [e for e in doc.entities
                                                                  if e.type in set(spec["entity_types"])]
        for pol, c in brat.discontinuous_policy_counts(kept).items():
            policies.setdefault(pol, Counter()).update(c)
        for ex in brat.document_to_examples(doc, spec["segmentation"], spec["discontinuous"],
                                            spec["entity_types"], counts, spec["sentence_splitter"],
                                            filtered_examples):
            ex.pop("entities")
            ex["where"] = doc.txt_path
            ex["type_where"] = first_line
            ex["doc"] = doc.doc_id
            rows.append(ex)
    return rows


def _fracco_rows(docs: list[brat.BratDocument], spec: dict, counts: Counter, junk: dict) -> list[dict]:
    rows = []
    for doc in docs:
        codes = fracco.document_codes(doc, spec["label_set"]["code_kind"], counts, junk)
        rows.append({"id": doc.doc_id, "text": brat.nfc(doc.text), "labels": codes, "where": doc.ann_path,
                     "doc": doc.doc_id, "raw_label": codes})
    return rows


def _split_unit(spec: dict, rows: list[dict]) -> str:
    fmt = spec["format"]
    if fmt in ("brat", "fracco"):
        return "document"
    if fmt in WORD_FORMATS:
        marker = spec.get("doc_marker")
        marks = (f"-DOCSTART- lines or comments matching doc_marker {marker!r}" if marker else
                 "-DOCSTART- or '# doc_id = ...' comments")
        if rows and all(r.get("doc_marked") for r in rows):
            return f"document ({marks})"
        if marker:
            return f"sentence (the file marks no documents: no -DOCSTART- line or comment matching doc_marker {marker!r})"
        return "sentence (the file marks no documents: no -DOCSTART- line or '# doc_id = ...' comment)"
    if spec.get("doc_id_field"):
        return f"document (field {spec['doc_id_field']!r})"
    return "row id"


def relation_rows(rows: list[dict], spec: dict, name: str | None, counts: Counter) -> list[dict]:
    """A table reader's rows after the relation keys: ``entity_markers`` checked, ``label_map`` applied
    (:mod:`clmdetour.tasks.relation`); unchanged when the spec sets neither.

    Raises:
        relation.RelationError: a row without its markers, or a label not in the map (``label_map_unmapped:
            error``); the message names the file, line and ``tasks.<name>.<key>``.
    """
    key = f"tasks.{name}" if name else "tasks.<task>"
    if spec.get("entity_markers"):
        relation.check_markers(rows, [tuple(p) for p in spec["entity_markers"]], f"{key}.entity_markers")
    if spec.get("label_map"):
        rows = relation.map_labels(rows, spec["type"], spec["label_map"], spec["label_map_unmapped"],
                                   f"{key}.label_map", counts)
    return rows


@dataclass
class _SourceReader:
    """Reads one resolved spec's source files into raw rows, gathering what the manifest reports.

    Attributes:
        spec: the resolved task spec.
        name: the task name (config keys in messages), or None.
        note_rule: the checked ``type_from_note`` (:func:`brat.note_type_rule`).
        counts: the readers' counters (the manifest's ``annotations``).
        policies: brat: what each discontinuous policy keeps.
        junk: fracco: the first note piece of each junk kind.
        note_examples: brat with a ``type_from_note`` rule: the first unmatched and multi-group note.
        filtered_examples: brat: the first entities ``entity_types`` dropped (``file:line 'type'``).
    """

    spec: dict
    name: str | None
    note_rule: str | brat.NoteTypeRule | None = None
    counts: Counter = field(default_factory=Counter)
    policies: dict = field(default_factory=dict)
    junk: dict = field(default_factory=dict)
    note_examples: dict = field(default_factory=dict)
    filtered_examples: list = field(default_factory=list)

    def key(self, key: str) -> str:
        """The config key named in messages: ``tasks.<name>.<key>``, or the bare key without a name."""
        return f"tasks.{self.name}.{key}" if self.name else key

    @property
    def subs(self) -> list[str | None]:
        return subfolders(self.spec) if self.spec["format"] in ("brat", "fracco") else [None]

    def brat_rows(self, docs: list[brat.BratDocument]) -> list[dict]:
        return _brat_rows(docs, self.spec, self.counts, self.policies, self.note_rule, self.note_examples,
                          self.filtered_examples)

    def unit(self, p: Path, sub: str | None = None) -> list[dict]:
        """The raw rows of one file or folder (one split's, or the whole source's for a hash split)."""
        spec, fmt = self.spec, self.spec["format"]
        if fmt in ("brat", "fracco"):
            prefix = f"{sub}/" if sub and len(self.subs) > 1 else ""
            docs = brat.read_brat_folder(p, spec["missing_ann"], True, self.counts, id_prefix=prefix)
            return self.brat_rows(docs) if fmt == "brat" else _fracco_rows(docs, spec, self.counts, self.junk)
        if fmt == "conll":
            return read_conll(p, spec.get("comment_prefix"), spec.get("doc_marker"), spec["tag_column"],
                              spec["tag_scheme"], self.counts, self.key("tag_column"),
                              doc_marker_key=self.key("doc_marker"))
        if fmt == "iob_tsv":
            return read_iob_tsv(p, spec["tag_scheme"], self.counts)
        return relation_rows(read_table(p, fmt, spec["type"], spec), spec, self.name, self.counts)

    def units(self, paths: list[Path]) -> list[dict]:
        return [row for p, sub in zip(paths, self.subs) for row in self.unit(p, sub)]

    def info(self, roots: list, split_rule: dict) -> dict:
        """What :func:`load_raw_splits` returns beside the rows."""
        return {"files": roots, "annotations": dict(sorted(self.counts.items())), "icdo_junk_examples": self.junk,
                "type_note_examples": self.note_examples, "type_filtered_examples": self.filtered_examples,
                "split": split_rule, "discontinuous_policies": {k: dict(v) for k, v in self.policies.items()}}


def _read_hub(reader: _SourceReader) -> tuple[dict[str, list[dict]], dict]:
    """A local Hub snapshot, read with ``datasets``: rows per split and the split rule."""
    spec = reader.spec
    splits = read_hub_snapshot(Path(spec["path"]), spec.get("hub_config"), spec["splits"], spec["type"], spec)
    splits = {k: relation_rows(v, spec, reader.name, reader.counts) for k, v in splits.items()}
    return splits, {"policy": "given", "hub_splits": spec["splits"]}


def _read_bigbio(reader: _SourceReader) -> tuple[dict[str, list[dict]], list[Path], dict]:
    """A BigBIO parquet export: rows per split, the parquet files read, and the split rule."""
    spec, path = reader.spec, Path(reader.spec["path"])
    splits, roots, split_files = {}, [], {}
    for ours, theirs in spec["splits"].items():
        if spec["format"] == "bigbio_kb":
            docs, files = bigbio.read_kb_split(path, spec.get("hub_config"), theirs, reader.counts)
            splits[ours] = reader.brat_rows(docs)
        else:
            rows, files = bigbio.read_text_split(path, spec.get("hub_config"), theirs, spec["type"])
            splits[ours] = relation_rows(rows, spec, reader.name, reader.counts)
        roots += files
        split_files[ours] = [str(f.relative_to(path)) for f in files]
    return splits, roots, {"policy": "given", "hub_splits": spec["splits"], "files": split_files}


def _read_hashed(reader: _SourceReader, roots: list[Path]) -> tuple[dict[str, list[dict]], dict]:
    """The whole source, split by document hash (``split.policy: hash``): rows per split and the split rule."""
    sp = reader.spec["split"]
    rows = reader.units(roots)
    splits = {k: [] for k in SPLITS}
    for row in rows:
        splits[hash_split(row.get("doc") or row["id"], sp["dev_fraction"], sp["test_fraction"],
                          sp["salt"])].append(row)
    split_rule = hash_split_rule(sp["dev_fraction"], sp["test_fraction"], sp["salt"])
    split_rule["unit"] = _split_unit(reader.spec, rows)
    return splits, split_rule


def _read_given(reader: _SourceReader, roots: list[Path]) -> tuple[dict[str, list[dict]], dict]:
    """The source's own split files or folders (``split.policy: given``): rows per split and the split rule."""
    spec, n = reader.spec, len(reader.subs)
    splits, k = {}, 0
    for split in SPLITS:
        if split in spec["splits"]:
            splits[split] = reader.units(roots[k:k + n])
            k += n
    given = [x for x in SPLITS if x in spec["splits"]]
    files = {s: [str(r) for r in roots[i * n:(i + 1) * n]] for i, s in enumerate(given)}
    return splits, {"policy": "given", "files": {s: f[0] if len(f) == 1 else f for s, f in files.items()}}


def _derive_dev(spec: dict, splits: dict[str, list[dict]], split_rule: dict) -> None:
    """A splits map without dev: dev = the train documents with hash position < dev_fraction (in place)."""
    sp = spec["split"]
    train = splits["train"]
    splits["dev"] = [r for r in train if hash_unit(r.get("doc") or r["id"], sp["salt"]) < sp["dev_fraction"]]
    dev_ids = {id(r) for r in splits["dev"]}
    splits["train"] = [r for r in train if id(r) not in dev_ids]
    split_rule["dev"] = {"derived_from": "train", "unit": _split_unit(spec, train),
                         "rule": "dev if int(sha256(f'{salt}:{doc_id}').hexdigest()[:16], 16) / 16**16 "
                                 "< dev_fraction", "dev_fraction": sp["dev_fraction"], "salt": sp["salt"]}


def load_raw_splits(spec: dict, name: str | None = None) -> tuple[dict[str, list[dict]], dict]:
    """Read a resolved task spec's source into raw rows per split.

    Args:
        spec: a task spec resolved by :func:`~clmdetour.tasks.spec.resolve_task_spec`.
        name: the task name, for the config keys named in messages (``tasks.<name>.type_from_note``).

    Returns:
        ``(splits, info)``: ``splits`` maps ``train``/``dev``/``test`` to raw rows
        (``id``, ``text``, ``where``, ``doc`` and the type's label columns); ``info``
        holds ``files`` (paths read), ``annotations`` (policy counts),
        ``discontinuous_policies`` (brat: what each policy keeps), ``icdo_junk_examples``,
        ``type_note_examples`` (brat with a ``type_from_note`` rule: the first unmatched and
        multi-group note), ``type_filtered_examples`` (brat: the first entities ``entity_types``
        dropped) and ``split`` (the split rule, with its unit).

    Raises:
        TaskError: missing files or folders, or any reader error (file and line named).
    """
    fmt = spec["format"]
    roots = [Path(p) for p in expected_files(spec)]
    absent = [str(p) for p in roots if not p.exists()]
    if absent:
        raise TaskError(f"{absent[0]}: not found (task source files: {[str(r) for r in roots]})")
    reader = _SourceReader(spec, name)
    try:
        reader.note_rule = brat.note_type_rule(spec.get("type_from_note"), reader.key("type_from_note"))
    except brat.BratError as e:
        raise TaskError(str(e)) from None
    try:
        if fmt == "hub":
            splits, split_rule = _read_hub(reader)
        elif fmt in bigbio.BIGBIO_FORMATS:
            splits, roots, split_rule = _read_bigbio(reader)
        elif spec["split"]["policy"] == "hash":
            splits, split_rule = _read_hashed(reader, roots)
        else:
            splits, split_rule = _read_given(reader, roots)
        if "dev" not in splits:
            _derive_dev(spec, splits, split_rule)
    except (brat.BratError, FormatError, SegmentationError, relation.RelationError) as e:
        raise TaskError(str(e)) from None
    return splits, reader.info(roots, split_rule)


def _row_labels(row: dict, task_type: str) -> list[str]:
    return TYPE_REGISTRY[task_type].row_labels(row)


def _where_label(row: dict, label: str) -> str:
    return (row.get("type_where") or {}).get(label) or row["where"]


def _remove_labels(row: dict, task_type: str, drop: set[str]) -> dict | None:
    """The row without the dropped labels (``None``: drop the row, as a multiclass row)."""
    return TYPE_REGISTRY[task_type].remove_labels(row, drop)


def filter_split_labels(rows: list[dict], task_type: str, keep: set[str], train_df: Counter
                        ) -> tuple[list[dict], dict, Counter, dict[str, dict]]:
    """Remove the labels outside ``keep`` from one split's rows (a row left without any is dropped).

    Returns:
        ``(new_rows, counts, unseen, first_unseen)``: the kept rows; the split's report
        counts (see :func:`apply_label_set`); how often each label unseen in train occurs;
        the first row holding each unseen label (for messages).
    """
    outside: Counter = Counter()
    unseen: Counter = Counter()
    first_unseen: dict[str, dict] = {}
    new_rows = []
    dropped = dropped_unseen = without_seen = 0
    for row in rows:
        labels = _row_labels(row, task_type)
        bad = {x for x in labels if x not in keep}
        for x in bad:
            if x in train_df:
                outside[x] += 1
            else:
                unseen[x] += 1
                first_unseen.setdefault(x, row)
        if not any(x in train_df for x in labels):
            without_seen += 1
        new = _remove_labels(row, task_type, bad) if bad else row
        if new is None:
            dropped += 1
            dropped_unseen += any(x not in train_df for x in bad)
            continue
        new_rows.append(new)
    counts = {
        "outside_top_k": sum(outside.values()),
        "unseen_in_train": sum(unseen.values()),
        "unseen_in_train_labels": dict(sorted(unseen.items())),
        "rows_dropped": dropped,
        "rows_dropped_unseen": dropped_unseen,
        "rows_without_labels": sum(not _row_labels(r, task_type) for r in new_rows),
        "rows_without_seen_labels": without_seen,
        "distinct_labels": len({x for r in new_rows for x in _row_labels(r, task_type)}),
    }
    return new_rows, counts, unseen, first_unseen


def unseen_label_error(split: str, rows: list[dict], task_type: str, train_df: Counter, unseen: Counter,
                       first_unseen: dict[str, dict], max_unlabelled_fraction: float, fields: dict) -> TaskError:
    """The error for labels of ``split`` unseen in train under ``unseen: error``: names the file,
    line and label; suggests ``unseen: drop`` when few rows are affected, else says what to check."""
    label, row = next(iter(first_unseen.items()))
    affected = sum(any(x not in train_df for x in _row_labels(r, task_type)) for r in rows)
    head = f"{_where_label(row, label)}: label {label!r} in {split} is not in train"
    if affected <= max(1, max_unlabelled_fraction * len(rows)):
        return TaskError(f"{head} (train labels: {sorted(train_df)[:20]}{' ...' if len(train_df) > 20 else ''}); "
                         "set label_set.unseen: drop to drop it")
    what = TYPE_REGISTRY[task_type].label_source(fields)
    return TaskError(f"{head}; {len(unseen)} distinct {split} labels in {affected} of {len(rows)} rows "
                     f"are unseen in train ({sorted(unseen)[:5]}{' ...' if len(unseen) > 5 else ''}; "
                     f"train has {len(train_df)}: {sorted(train_df)[:5]}{' ...' if len(train_df) > 5 else ''}): too many "
                     f"to drop; check {what}")


def apply_label_set(splits: dict[str, list[dict]], task_type: str, label_set: dict,
                    max_unlabelled_fraction: float = 0.05, fields: dict | None = None
                    ) -> tuple[list[str], dict, dict]:
    """Choose the label set on train and apply it to every split (policy in the module doc).

    Args:
        splits: raw rows per split.
        task_type: ``ner``, ``multiclass`` or ``multilabel``.
        label_set: ``top_k`` (int or None), ``unseen`` (``error`` / ``drop``).
        max_unlabelled_fraction: share of a split's rows up to which unseen labels are
            "few" (the error then suggests ``unseen: drop``).
        fields: the task's reader keys (``label_field``, ``label_separator``), for messages.

    Returns:
        ``(labels, new_splits, report)``: sorted labels, filtered rows per split,
        and counts per split (``outside_top_k``, ``unseen_in_train``, ``rows_dropped``,
        ``rows_without_labels``, ``rows_without_seen_labels`` (no label seen in train,
        before ``top_k``), ``rows_dropped_unseen``, ``distinct_labels``); train document
        frequencies.

    Raises:
        TaskError: a dev/test label unseen in train with ``unseen: error`` (names the
            file, line and label, and either suggests ``unseen: drop`` or, when many
            rows are affected, how many labels are unseen and what to check), or an
            empty label set.
    """
    fields = fields or {}
    df = Counter(label for row in splits["train"] for label in _row_labels(row, task_type))
    ranked = sorted(df, key=lambda x: (-df[x], x))
    top_k = label_set.get("top_k")
    keep = set(ranked[:top_k] if top_k else ranked)
    if not keep:
        raise TaskError(f"{splits['train'][0]['where'] if splits['train'] else 'train'}: no labels in train")
    report: dict = {"train_document_frequency": dict(sorted(df.items(), key=lambda x: (-x[1], x[0])))}
    out = {}
    for split, rows in splits.items():
        new_rows, counts, unseen, first_unseen = filter_split_labels(rows, task_type, keep, df)
        if unseen and label_set["unseen"] == "error":
            raise unseen_label_error(split, rows, task_type, df, unseen, first_unseen, max_unlabelled_fraction, fields)
        out[split] = new_rows
        report[split] = counts
    return sorted(keep), out, report


def check_unlabelled(name: str, splits: dict[str, list[dict]], report: dict, task_type: str, spec: dict) -> dict:
    """Refuse a task whose test rows mostly carry no label seen in train (module doc, ``max_unlabelled_fraction``).

    Multilabel: test rows with no label seen in train; multiclass: test rows dropped
    because their label is unseen; ner is not checked (sentences without entities are normal).

    Returns:
        ``{"test_rows", "unlabelled", "fraction", "max_unlabelled_fraction"}`` for the manifest.

    Raises:
        TaskError: the fraction exceeds ``max_unlabelled_fraction``; the message names
            the task, the counts, the separator and one raw label value (file and line).
    """
    limit = spec["max_unlabelled_fraction"]
    test = report["test"]
    n = len(splits["test"]) + test["rows_dropped"]
    key = TYPE_REGISTRY[task_type].unlabelled_key
    bad = test[key] if key else 0
    frac = bad / n if n else 0.0
    out = {"test_rows": n, "unlabelled": bad, "fraction": round(frac, 6), "max_unlabelled_fraction": limit,
           "checked": key is not None}
    if key is not None and frac > limit:
        raw = next((r for r in splits["test"] if "raw_label" in r), None) or next(
            (r for r in splits["train"] if "raw_label" in r), None)
        shown = f"; a raw label value: {raw['raw_label']!r} ({raw['where']})" if raw else ""
        sep = f"label_separator is {spec['label_separator']!r}" if TYPE_REGISTRY[task_type].label_separator and spec["format"] in (
            "tsv", "csv") else f"label_field is {spec['label_field']!r}"
        raise TaskError(f"tasks.{name}: {bad} of {n} test rows ({100 * frac:.1f} %) have no label seen in train "
                        f"after label_set.unseen: {spec['label_set']['unseen']} (max_unlabelled_fraction {limit}); "
                        f"{len(report['train_document_frequency'])} distinct labels in train; {sep}{shown}; check label_separator / label_field, or raise "
                        f"tasks.{name}.max_unlabelled_fraction")
    return out


def label_counts(rows: list[dict], task_type: str) -> dict[str, int]:
    """Rows per label (ner: entities per type)."""
    return TYPE_REGISTRY[task_type].label_counts(rows)


def check_splits(name: str, splits: dict[str, list[dict]], files_read: list[str], stage: str = "") -> None:
    """Every split holds examples, and no id appears twice across splits.

    Raises:
        TaskError: an empty split (names the files read and ``stage``, e.g. "after
            the label-set policy"), or a repeated id (names both places).
    """
    for split in SPLITS:
        if not splits.get(split):
            raise TaskError(f"{files_read}: split {split!r} of task {name!r} is empty{stage or ' (0 examples)'}")
    seen: dict[str, str] = {}
    for split in SPLITS:
        for row in splits[split]:
            if row["id"] in seen:
                raise TaskError(f"{row['where']}: id {row['id']!r} appears twice ({seen[row['id']]}) in task {name!r}")
            seen[row["id"]] = row["where"]


def _short(text: str, chars: int = 40) -> str:
    return text if len(text) <= chars else text[:chars] + "..."


def _shown_labels(key: tuple) -> str:
    """A label key for messages: one value as itself (``'a'``, ``0.5``), several as a list."""
    return _short(repr(key[0]) if len(key) == 1 else repr(list(key)), 60)


def drop_duplicate_records(name: str, splits: dict[str, list[dict]], task_type: str, policy: str
                           ) -> tuple[dict[str, list[dict]], dict]:
    """Handle records repeated under one id (``tasks.{name}.duplicates``; rule in the module doc).

    Rows are visited split by split (train, dev, test), each in file order; a row whose
    id was seen before is a repeat, *identical* when its texts
    (:meth:`~clmdetour.tasktypes.base.TaskType.example_texts`) and labels
    (:meth:`~clmdetour.tasktypes.base.TaskType.label_key`) equal the first copy's.

    Args:
        name: task name (messages).
        splits: raw rows per split (``id``, ``where``, text and label columns).
        task_type: a registered task type name.
        policy: ``error`` (any repeat stops the task) or ``drop_identical``
            (identical repeats are dropped, the first copy kept).

    Returns:
        ``(splits, report)``: the rows without dropped repeats, and the manifest's
        ``duplicates``: ``policy``, ``dropped`` (rows dropped per split), ``dropped_total``,
        ``across_splits`` (dropped rows whose kept copy lies in another split) and
        ``examples`` (up to 3 ``{"id", "kept", "dropped"}`` with ``file:line`` places).

    Raises:
        TaskError: a repeated id whose text or labels differ from the first copy's (names
            both places, file:line, and what differs); with ``error``, an identical repeat
            too (the message suggests ``duplicates: drop_identical``).
    """
    ttype = TYPE_REGISTRY[task_type]
    first: dict[str, tuple[str, dict]] = {}
    dropped = {split: 0 for split in splits}
    across, examples, out = 0, [], {}
    for split, rows in splits.items():
        kept = []
        for row in rows:
            rid = row["id"]
            if rid not in first:
                first[rid] = (split, row)
                kept.append(row)
                continue
            first_split, orig = first[rid]
            head = f"{row['where']}: id {rid!r} appears twice ({orig['where']}) in task {name!r}"
            if ttype.example_texts(orig) != ttype.example_texts(row):
                a, b = ttype.example_texts(orig), ttype.example_texts(row)
                raise TaskError(f"{head} with a different text ({_short(' | '.join(a))!r} vs "
                                f"{_short(' | '.join(b))!r}); ids must be unique (tasks.{name}.duplicates "
                                "drops identical records only)")
            if ttype.label_key(orig) != ttype.label_key(row):
                raise TaskError(f"{head} with different labels ({_shown_labels(ttype.label_key(orig))} vs "
                                f"{_shown_labels(ttype.label_key(row))}); ids must be unique "
                                f"(tasks.{name}.duplicates drops identical records only)")
            if policy != "drop_identical":
                raise TaskError(f"{head}; the two records are identical (same text and labels): set "
                                f"tasks.{name}.duplicates: drop_identical to keep the first and count the repeats")
            dropped[split] += 1
            across += first_split != split
            if len(examples) < 3:
                examples.append({"id": rid, "kept": orig["where"], "dropped": row["where"]})
        out[split] = kept
    report = {"policy": policy, "dropped": dropped, "dropped_total": sum(dropped.values()),
              "across_splits": across, "examples": examples}
    if report["dropped_total"]:
        import logging

        logging.getLogger(__name__).warning("task %s: %d identical repeated records dropped (%s; duplicates: "
                                            "drop_identical), e.g. %s", name, report["dropped_total"], dropped,
                                            examples[0])
    return out, report


def check_split_overlap(name: str, splits: dict[str, list[dict]], max_split_overlap: float,
                        min_words: int = overlap.MIN_WORDS, spec: dict | None = None) -> dict:
    """Near-exact text shared between splits (:func:`overlap.split_overlap`), within the task's limit.

    Args:
        name: task name (messages).
        splits: rows per split.
        max_split_overlap: largest allowed test overlap fraction, in [0, 1].
        min_words: the check's floor (``tasks.{name}.overlap_min_words``), in normalised
            words; shorter examples are counted in ``by_length`` but never fail the task.
        spec: the resolved task spec, so the refusal names the fix for its case
            (:func:`overlap_fix`); None: a general hint.

    Returns:
        The overlap report, with ``max_split_overlap`` added.

    Raises:
        TaskError: the share of test examples (of at least ``min_words`` words) with a
            train twin exceeds ``tasks.{name}.max_split_overlap`` (names example ids and the
            fix), or every dev example has a train twin (a dev split copied from train).
    """
    leak = overlap.split_overlap(splits, min_words)
    leak["max_split_overlap"] = max_split_overlap
    dev_in_train = sum(band["near_exact"] for band in leak["by_length"]["train-dev"].values())
    if splits.get("dev") and dev_in_train == len(splits["dev"]):
        raise TaskError(f"tasks.{name}: every one of the {len(splits['dev'])} dev examples has the same text "
                        "(near-exact: NFKC, lower-case, words) as a train example: the dev split is a copy of train, "
                        "so the learning rate and threshold chosen on it would favour memorisation; give a "
                        f"held-out dev file, or let the pipeline cut one (tasks.{name}.split)")
    if leak["test_fraction"] > max_split_overlap:
        raise TaskError(f"tasks.{name}: {leak['test_overlapping']} of {leak['test_examples']} test examples "
                        f"({100 * leak['test_fraction']:.1f} %) have the same text (near-exact: NFKC, lower-case, "
                        f"words; {leak['min_words']}+ words, tasks.{name}.overlap_min_words) as a train example, "
                        f"more than tasks.{name}.max_split_overlap = {max_split_overlap}; e.g. test ids "
                        f"{leak['test_example_ids']}; train-test {leak['pairs']['train-test']}, dev-test "
                        f"{leak['pairs']['dev-test']}; {overlap_fix(name, spec, splits)}")
    return leak


def overlap_fix(name: str, spec: dict | None, splits: dict[str, list[dict]] | None = None) -> str:
    """What to change when test texts repeat train texts, for the task's source and split (the end of
    :func:`check_split_overlap`'s refusal).

    - a table file split by hash without ``doc_id_field``: rows were split one by one, so name
      ``doc_id_field`` (the field naming each row's document);
    - other tables (a hash split by ``doc_id_field``, or given split files): no key hashes the
      normalised text, and ``doc_id_field: <text field>`` hashes the text as written, so case or
      punctuation variants hash apart: hash a field holding the normalised text with ``doc_id_field``;
    - a CoNLL file split by hash that marks no documents: mark them (``-DOCSTART-``, a
      ``# doc_id = X`` comment, or ``doc_marker``);
    - otherwise: check the split files (or split by document).
    """
    key = f"tasks.{name}"
    if spec is None:
        return "check the split files (or split by document)"
    hashed = spec["split"]["policy"] == "hash"
    if spec["format"] in TABLE_FORMATS:
        if hashed and not spec.get("doc_id_field"):
            return (f"the file was split row by row (split.policy hash without {key}.doc_id_field): set "
                    f"{key}.doc_id_field to the field naming each row's document, so its rows share a split")
        how = ("put the rows in one file with split.policy: hash, and " if not hashed else "")
        return (f"{how}set {key}.doc_id_field to a field holding each text normalised (lower-case, without "
                f"punctuation), so case or punctuation variants of a text hash to one split "
                f"({key}.doc_id_field: {spec.get('text_field')!r} hashes the text as written: exact repeats only)")
    rows = [r for v in (splits or {}).values() for r in v]
    if spec["format"] == "conll" and hashed and rows and not all(r.get("doc_marked", True) for r in rows):
        return (f"the file marks no documents, so it was split sentence by sentence: mark them (-DOCSTART- lines, "
                f"'# doc_id = X' comments, or {key}.doc_marker for another comment spelling) so a document's "
                "sentences share a split")
    return "check the split files (or split by document)"


def check_conflicting_labels(name: str, splits: dict[str, list[dict]], task_type: str) -> dict:
    """Count texts that carry different labels (:func:`overlap.conflicting_labels`); warns when any.

    The task is never refused for it: label noise is the data's, and the manifest and
    the results table's notes report it.

    Returns:
        The manifest's ``conflicting_labels`` (see :func:`overlap.conflicting_labels`).
    """
    ttype = TYPE_REGISTRY[task_type]
    report = overlap.conflicting_labels(splits, ttype.label_key, ttype.example_texts)
    if report["texts"]:
        import logging

        logging.getLogger(__name__).warning(
            "task %s: %d texts (%d rows) carry different labels (same normalised text): within splits %s, "
            "across splits %s; e.g. %r (ids %s)", name, report["texts"], report["rows"], report["within"],
            report["across"], report["examples"][0]["text"], report["examples"][0]["ids"])
    return report


def merged_label_forms(name: str, splits: dict[str, list[dict]], examples: int = 3) -> dict:
    """Labels read from two or more different raw values that normalise to one (the number ``1`` and the
    string ``"1"``, ``"a "`` and ``"a"``, NFD and NFC spellings): counted per form, with where each
    form first occurs, and warned; the task keeps the merged label (labels are NFC strings, stripped).

    Reads the ``label_form`` (multiclass) or ``label_forms`` (multilabel) the task type records
    beside each parsed label; other task types record none and report ``{}``.

    Returns:
        The manifest's ``merged_label_forms``: ``{label: {"forms": {raw repr: rows}, "where": {raw repr:
        file:line}}}`` for the labels with more than one form (at most ``examples`` in the warning).
    """
    from collections import Counter, defaultdict

    forms: dict[str, Counter] = defaultdict(Counter)
    first: dict[tuple[str, str], str] = {}
    for rows in splits.values():
        for row in rows:
            if "label_form" in row:
                pairs = [(row["label"], row["label_form"])]
            else:
                pairs = list(zip(row.get("labels") or [], row.get("label_forms") or []))
            for label, form in pairs:
                forms[label][form] += 1
                first.setdefault((label, form), str(row.get("where", "")))
    merged = {label: {"forms": dict(sorted(c.items())), "where": {f: first[(label, f)] for f in sorted(c)}}
              for label, c in sorted(forms.items()) if len(c) > 1}
    if merged:
        import logging

        def forms_of(label: str, info: dict) -> str:
            return ", ".join(f"{f} ({n} rows, first at {info['where'][f]})" for f, n in info["forms"].items())

        shown = "; ".join(f"{label!r} from {forms_of(label, info)}" for label, info in list(merged.items())[:examples])
        logging.getLogger(__name__).warning("task %s: %d label(s) read from different raw values that normalise to "
                                            "one (manifest merged_label_forms): %s", name, len(merged), shown)
    return merged


def describe_ids(name: str, splits: dict[str, list[dict]], spec: dict) -> dict[str, str]:
    """Where each split's example ids come from (a field, generated, or document position); warns when generated.

    Generated ids (``id_field`` null) are ``<file stem>-<line>`` (Hub: ``<split>-<row>``); when
    the records have an ``id`` field all the same, the description says it was not read.
    """
    ids = {}
    id_field = spec.get("id_field")
    pattern = "<split>-<row>" if spec["format"] == "hub" else "<file stem>-<line>"
    for split in SPLITS:
        gen = sum(bool(r.get("id_generated")) for r in splits[split])
        unused = sum(bool(r.get("id_unused")) for r in splits[split])
        hint = (f"; {unused} rows have an 'id' field, not read: set tasks.{name}.id_field: id to use it"
                if unused else "")
        ids[split] = (f"generated: {pattern} ({gen} rows; id_field is null{hint})"
                      if gen else f"field {id_field!r}" if spec["format"] in
                      ("jsonl", "tsv", "csv", "hub") else "document / sentence position")
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
    if spec["format"] in WORD_FORMATS + ("bigbio_text",):
        return {k: len({r.get("doc") or r["id"] for r in v}) for k, v in splits.items()}
    by_sentence = spec["format"] in ("brat", "bigbio_kb") and spec["segmentation"] == "sentence"
    return {k: len({r["id"].rsplit(":", 1)[0] for r in v}) if by_sentence else len(v) for k, v in splits.items()}


def task_manifest(name: str, spec: dict, info: dict, rows: dict[str, list[dict]], labels: list[str],
                  files_read: list[str], reports: dict) -> dict:
    """The task's ``manifest.json``: source, input files with SHA-256, split, counts, documents,
    label set, unlabelled rows, split overlap, conflicting labels, repeated records, ids, policies and
    a hash of each split's rows.

    ``reports`` holds ``label_set``, ``unlabelled``, ``split_overlap``, ``conflicting_labels``,
    ``duplicates``, ``ids`` and, optionally, ``documents`` (:func:`document_counts` of the raw rows;
    else counted from ``rows``).
    """
    task_type = spec["type"]
    source = {k: spec.get(k) for k in ("source", "format", "path", "url", "sha256", "dataset", "hub_id",
                                        "hub_config", "revision", "subfolder", "licence", "description", "fetch")
              if spec.get(k) is not None}
    files = _files_with_hashes([Path(p) for p in files_read])
    manifest = {
        "task": name,
        "type": task_type,
        "source": source,
        "files": files,
        "files_sha256": sha256_json([[f["path"], f["sha256"]] for f in files]),
        "split": info["split"],
        "counts": {k: len(v) for k, v in rows.items()},
        "documents": reports.get("documents") or document_counts(spec, rows),
        "label_counts": {k: label_counts(v, task_type) for k, v in rows.items()},
        "label_set": {"policy": spec["label_set"], "labels": len(labels), **reports["label_set"]},
        "unlabelled": reports["unlabelled"],
        "split_overlap": reports["split_overlap"],
        "conflicting_labels": reports["conflicting_labels"],
        "duplicates": reports["duplicates"],
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
    """The manifest's sections of one source kind, each made beside its reader: brat's
    ``discontinuous_policies``, ``type_from_note`` and ``entity_types`` (:mod:`clmdetour.tasks.brat`),
    FRACCO's ``icdo`` (:mod:`clmdetour.tasks.fracco`), CoNLL's ``tag_scheme``
    (:mod:`clmdetour.tasks.formats`) and the relation keys' ``relation`` (:mod:`clmdetour.tasks.relation`)."""
    out = {}
    if spec["format"] in ("brat", "bigbio_kb"):
        out["discontinuous_policies"] = {"chosen": spec["discontinuous"], **info["discontinuous_policies"]}
        if isinstance(spec.get("type_from_note"), dict):
            out["type_from_note"] = brat.type_note_report(spec, info)
        if spec.get("entity_types") is not None:
            out["entity_types"] = brat.entity_types_report(spec, info)
    if spec["format"] == "fracco":
        out["icdo"] = fracco.icdo_report(spec, info)
    if spec["format"] in WORD_FORMATS:
        out["tag_scheme"] = tag_scheme_report(spec, info)
    if spec.get("label_map") or spec.get("entity_markers"):
        out["relation"] = relation.relation_report(spec, info)
    return out


def build_task(name: str, spec: dict) -> tuple[dict[str, list[dict]], dict, dict]:
    """Read, split and label-filter a task (no writing), as named steps: resolve the spec, load the
    raw splits, handle repeated records, check the splits, apply the label set, check unlabelled
    rows and split overlap, count conflicting labels, keep the output columns, then describe the
    result (``labels.json``, manifest).

    Args:
        name: task name (used in messages and outputs).
        spec: the task's config entry (resolved here with :func:`~clmdetour.tasks.spec.resolve_task_spec`).

    Returns:
        ``(rows_per_split, labels_json, manifest)``; rows have exactly the output columns.

    Raises:
        TaskError: any source, split or label-set problem (see module doc).
    """
    spec = resolve_task_spec(name, spec)
    task_type = spec["type"]
    splits, info = load_raw_splits(spec, name)
    files_read = [str(p) for p in info["files"]]
    splits, duplicates = drop_duplicate_records(name, splits, task_type, spec["duplicates"])
    check_splits(name, splits, files_read)
    merged_forms = merged_label_forms(name, splits)
    labels, splits, label_report = apply_label_set(splits, task_type, spec["label_set"],
                                                   spec["max_unlabelled_fraction"], spec)
    check_splits(name, splits, files_read, stage=" after the label-set policy")
    reports = {"label_set": label_report,
               "unlabelled": check_unlabelled(name, splits, label_report, task_type, spec),
               "split_overlap": check_split_overlap(name, splits, spec["max_split_overlap"],
                                                    spec["overlap_min_words"], spec),
               "conflicting_labels": check_conflicting_labels(name, splits, task_type),
               "duplicates": duplicates,
               "merged_label_forms": merged_forms,
               "ids": describe_ids(name, splits, spec),
               "documents": document_counts(spec, splits)}
    cols = output_columns(task_type)
    rows = {k: [{c: r[c] for c in cols} for r in v] for k, v in splits.items()}
    labels_json = labels_record(name, task_type, labels, spec.get("metric"))
    if marker_token_strings(spec):
        labels_json["marker_tokens"] = marker_token_strings(spec)
    return rows, labels_json, task_manifest(name, spec, info, rows, labels, files_read, reports)


def _policies(spec: dict) -> dict:
    pol = {"unseen_labels": spec["label_set"]["unseen"], "top_k": spec["label_set"]["top_k"]}
    if spec["format"] in ("brat", "bigbio_kb"):
        pol.update(
            segmentation=spec["segmentation"],
            sentence_splitter=spec["sentence_splitter"] if spec["segmentation"] == "sentence" else None,
            sentence_rule=(f"line breaks, then {get_language().sentence_rule}; never inside an "
                           "entity" if spec["sentence_splitter"] == "spacy" else
                           "split at line breaks and after . ! ? followed by whitespace and an upper-case letter "
                           "or digit; never inside an entity") if spec["segmentation"] == "sentence" else None,
            discontinuous=spec["discontinuous"],
            nested="flat: longest span kept, then earliest start, then type name; overlapping others dropped",
            words=f"regex {brat.WORD_RE.pattern!r}, cut at entity boundaries",
            entity_types=spec["entity_types"],
            type_map=spec.get("type_map"),
            type_from_note=spec.get("type_from_note"),
        )
    if spec["format"] == "conll":
        pol["doc_marker"] = spec["doc_marker"]
    if spec["format"] in WORD_FORMATS:
        pol["tag_column"] = spec["tag_column"]
        pol["tag_scheme"] = spec["tag_scheme"]
    if spec.get("label_map"):
        pol["label_map_unmapped"] = spec["label_map_unmapped"]
    if spec.get("entity_markers"):
        pol["marker_tokens"] = spec["marker_tokens"]
    if spec["format"] in ("brat", "fracco"):
        pol["missing_ann"] = spec["missing_ann"]
        pol["offsets"] = "the .txt as written, else without BOM, else CRLF/CR as one character: the first reading every entity fits"
    pol["max_unlabelled_fraction"] = spec["max_unlabelled_fraction"]
    pol["max_split_overlap"] = spec["max_split_overlap"]
    pol["overlap_min_words"] = spec["overlap_min_words"]
    pol["duplicates"] = spec["duplicates"]
    return pol


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
