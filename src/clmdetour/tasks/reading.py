"""Read a resolved task spec's source files into raw rows per split (the ``prepare_task`` job's first step).

:func:`load_raw_splits` picks the reader of the spec's ``format`` (BRAT and FRACCO folders,
CoNLL / IOB TSV, JSONL / TSV / CSV tables, a local Hub snapshot, a BigBIO parquet export) and the
split policy (the source's own split files, a hash split by document, a dev set derived from
train), and gathers what the manifest reports about the reading (policy counts, the first
examples of each kind). Rows keep ``where`` (``file:line``) and ``doc`` for the later steps'
messages and splits; the label-set policy (:mod:`clmdetour.tasks.labels`), the checks
(:mod:`clmdetour.tasks.checks`) and the manifest (:mod:`clmdetour.tasks.manifest`) come after.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from clmdetour.tasks import brat, fracco, relation
from clmdetour.tasks.fileformats import FOLDERS, HUB, get_format
from clmdetour.tasks.segment import SegmentationError
from clmdetour.tasks.spec import (
    TaskError,
    expected_files,
    files_hint,
    subfolders,
)
from clmdetour.tasks.split import SPLITS, hash_split, hash_split_rule, hash_unit
from clmdetour.tasks.traps import warn_sentence_unit
from clmdetour.tasktypes import TaskType, get_task_type
from clmdetour.tasktypes.records import FormatError


def _brat_rows(docs: list[brat.BratDocument], spec: dict, counts: Counter, policies: dict,
               note_rule: str | brat.NoteTypeRule | None = None, note_examples: dict | None = None,
               filtered_examples: list[str] | None = None, type_origins: dict | None = None,
               note_key: str = "type_from_note") -> list[dict]:
    rows = []
    for doc in docs:
        brat.map_entity_types(doc, spec.get("type_map"), note_rule, counts, note_examples, note_key)
        first_line = {}
        for e in doc.entities:
            first_line.setdefault(e.type, f"{doc.ann_path}:{e.line}")
        kept = doc.entities if spec["entity_types"] is None else [e for e in doc.entities
                                                                  if e.type in set(spec["entity_types"])]
        if note_rule and type_origins is not None:
            brat.tally_type_origins(doc, kept, type_origins)
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
    fmt = get_format(spec["format"])
    if fmt.layout == FOLDERS:
        return "document"
    if fmt.word_lines:
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


def relation_rows(rows: list[dict], spec: dict, name: str | None, counts: Counter, ttype: TaskType) -> list[dict]:
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
        rows = relation.map_labels(rows, ttype, spec["label_map"], spec["label_map_unmapped"],
                                   f"{key}.label_map", counts)
    return rows


@dataclass
class SourceReader:
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
        type_origins: brat with ``type_from_note``: the kept entities' types by origin
            (:func:`brat.tally_type_origins`).
    """

    spec: dict
    name: str | None
    ttype: TaskType
    note_rule: str | brat.NoteTypeRule | None = None
    counts: Counter = field(default_factory=Counter)
    policies: dict = field(default_factory=dict)
    junk: dict = field(default_factory=dict)
    note_examples: dict = field(default_factory=dict)
    filtered_examples: list = field(default_factory=list)
    type_origins: dict = field(default_factory=dict)

    def key(self, key: str) -> str:
        """The config key named in messages: ``tasks.<name>.<key>``, or the bare key without a name."""
        return f"tasks.{self.name}.{key}" if self.name else key

    @property
    def subs(self) -> list[str | None]:
        """The ``subfolder`` values read in each split folder (``[None]``: the split itself, or not a folder format)."""
        return subfolders(self.spec) if get_format(self.spec["format"]).layout == FOLDERS else [None]

    def brat_rows(self, docs: list[brat.BratDocument]) -> list[dict]:
        """Rows of BRAT documents (entity keys applied; policies, note and type tallies gathered)."""
        return _brat_rows(docs, self.spec, self.counts, self.policies, self.note_rule, self.note_examples,
                          self.filtered_examples, self.type_origins, self.key("type_from_note"))

    def fracco_rows(self, docs: list[brat.BratDocument]) -> list[dict]:
        """One row of ICD-O codes per FRACCO document (junk note pieces gathered)."""
        return _fracco_rows(docs, self.spec, self.counts, self.junk)

    def relation_rows(self, rows: list[dict]) -> list[dict]:
        """A table reader's rows after the relation keys (:func:`relation_rows`)."""
        return relation_rows(rows, self.spec, self.name, self.counts, self.ttype)

    def unit(self, p: Path, sub: str | None = None) -> list[dict]:
        """The raw rows of one file or folder (one split's, or the whole source's for a hash split), read by the
        format's :attr:`clmdetour.tasks.fileformats.TaskFormat.read_unit`."""
        return get_format(self.spec["format"]).read_unit(self, p, sub)

    def units(self, paths: list[Path]) -> list[dict]:
        return [row for p, sub in zip(paths, self.subs) for row in self.unit(p, sub)]

    def info(self, roots: list, split_rule: dict) -> dict:
        """What :func:`load_raw_splits` returns beside the rows."""
        return {"files": roots, "annotations": dict(sorted(self.counts.items())), "icdo_junk_examples": self.junk,
                "type_note_examples": self.note_examples, "type_filtered_examples": self.filtered_examples,
                "type_origins": self.type_origins,
                "split": split_rule, "discontinuous_policies": {k: dict(v) for k, v in self.policies.items()}}


def _read_hashed(reader: SourceReader, roots: list[Path]) -> tuple[dict[str, list[dict]], dict]:
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


def _read_given(reader: SourceReader, roots: list[Path]) -> tuple[dict[str, list[dict]], dict]:
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


def load_raw_splits(spec: dict, name: str | None = None, ttype: TaskType | None = None) -> tuple[dict[str, list[dict]], dict]:
    """Read a resolved task spec's source into raw rows per split.

    Args:
        spec: a task spec resolved by :func:`~clmdetour.tasks.spec.resolve_task_spec`.
        name: the task name, for the config keys named in messages (``tasks.<name>.type_from_note``).
        ttype: the task type :func:`~clmdetour.tasks.spec.resolve_task` gave (None: the spec's, looked up here).

    Returns:
        ``(splits, info)``: ``splits`` maps ``train``/``dev``/``test`` to raw rows
        (``id``, ``text``, ``where``, ``doc`` and the type's label columns); ``info``
        holds ``files`` (paths read), ``annotations`` (policy counts),
        ``discontinuous_policies`` (brat: what each policy keeps), ``icdo_junk_examples``,
        ``type_note_examples`` (brat with a ``type_from_note`` rule: the first unmatched and
        multi-group note), ``type_filtered_examples`` (brat: the first entities ``entity_types``
        dropped), ``type_origins`` (brat with ``type_from_note``: the kept entities' types read from
        notes and kept as written, :func:`brat.tally_type_origins`) and ``split`` (the split rule, with
        its unit).

    Raises:
        TaskError: missing files or folders, or any reader error (file and line named).
    """
    fmt = get_format(spec["format"])
    roots = [Path(p) for p in expected_files(spec)]
    absent = [str(p) for p in roots if not p.exists()]
    if absent:
        raise TaskError(f"{absent[0]}: not found (task source files: {[str(r) for r in roots]}); "
                        f"{files_hint(name or '<task>', spec)}")
    reader = SourceReader(spec, name, ttype or get_task_type(spec["type"], f"tasks.{name}.type"))
    try:
        reader.note_rule = brat.note_type_rule(spec.get("type_from_note"), reader.key("type_from_note"))
    except brat.BratError as e:
        raise TaskError(str(e)) from None
    try:
        if fmt.layout == HUB:
            splits, read, split_rule = fmt.read_splits(reader)
            roots = roots if read is None else read
        elif spec["split"]["policy"] == "hash":
            splits, split_rule = _read_hashed(reader, roots)
        else:
            splits, split_rule = _read_given(reader, roots)
        if "dev" not in splits:
            _derive_dev(spec, splits, split_rule)
        warn_sentence_unit(name, split_rule)
    except (brat.BratError, FormatError, SegmentationError, relation.RelationError) as e:
        raise TaskError(str(e)) from None
    return splits, reader.info(roots, split_rule)
