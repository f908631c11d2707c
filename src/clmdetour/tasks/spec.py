"""Planning-time task specs: resolve a ``tasks.<name>`` config entry, and say what files it reads.

What the Snakefile and :mod:`clmdetour.pipeline` need while planning, before any task file is
read: :func:`resolve_task_spec` (a config entry with its derived values and defaults filled in
and its key combinations checked; the resolved spec is the ``prepare_task`` rule's params),
:func:`expected_files` / :func:`missing_files` (the inputs of that rule), the messages for a
user-provided task whose files are missing (:func:`user_task_message`,
:func:`left_out_tasks`, :func:`left_out_warning`) and :func:`marker_token_strings`.

Every default of a task key lives once, in ``workflow/schemas/tasks.schema.yaml``
(:func:`_schema_default`); the keys filled only where they apply (``tag_column``,
``tag_scheme``, ``label_map_unmapped``, ``marker_tokens``) and the per-format ``splits`` maps
have no schema default and are filled here. Reading and preparing a task at run time is
:mod:`clmdetour.tasks.prepare`.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

from clmdetour.errors import ExpectedError
from clmdetour.tasks import brat, relation
from clmdetour.tasks.fileformats import FILES, FOLDERS, FORMATS, HUB, get_format, hub_formats, local_formats
from clmdetour.tasks.formats import TAG_SCHEMES
from clmdetour.tasks.split import SPLITS
from clmdetour.tasktypes import TASK_TYPES, TaskType
from clmdetour.textio import one_group_regex

TASK_TYPE_NAMES = tuple(TASK_TYPES)  # the names of the registered task types (clmdetour.tasktypes), in registry order
#: Where a task's data comes from (``tasks.{task}.source``) besides a local format's name: the Hub (fetched, or
#: ``path``), an archive URL, or files the user provides (both with ``format``).
HUB_SOURCE, URL_SOURCE, USER_SOURCE = "hub", "url", "user"


def sources() -> tuple[str, ...]:
    """Every ``tasks.{task}.source`` value: the local formats, then hub, url and user."""
    return (*local_formats(), HUB_SOURCE, URL_SOURCE, USER_SOURCE)


def format_types(fmt: str) -> tuple[str, ...]:
    """The task types a format can hold (:meth:`clmdetour.tasks.fileformats.TaskFormat.gives`)."""
    return get_format(fmt).gives(TASK_TYPES)
DUPLICATE_POLICIES = ("error", "drop_identical")  # tasks.{task}.duplicates
# the keys resolve_task_spec fills with the schema's default when unset or null, in this order (the order of
# the resolved spec's keys, which Snakemake's params are made of)
READER_KEYS = ("text_field", "label_field", "id_field", "doc_id_field", "text_separator", "quoting", "words_field",
               "tags_field", "label_separator", "segmentation", "sentence_splitter", "discontinuous", "type_map",
               "type_from_note", "missing_ann", "subfolder", "entity_types", "max_unlabelled_fraction",
               "max_split_overlap", "overlap_min_words", "duplicates")


class TaskError(ExpectedError, ValueError):
    """A task cannot be prepared; the message names the task, file, line or config key."""


@functools.cache
def _task_schema() -> dict:
    """The properties of one task entry in ``workflow/schemas/tasks.schema.yaml`` (the one place for defaults)."""
    import yaml

    from clmdetour.config import SCHEMA_DIR

    schema = yaml.safe_load((SCHEMA_DIR / "tasks.schema.yaml").read_text(encoding="utf-8"))
    return schema["$defs"]["tasks"]["additionalProperties"]["properties"]


def _schema_default(*keys: str):
    """The schema's default of a task key (``"doc_marker"``) or of a key inside one (``"type_from_note", "note"``)."""
    node = _task_schema()[keys[0]]
    for k in keys[1:]:
        node = node["properties"][k]
    return copy.deepcopy(node["default"])


def _schema_defaults(key: str) -> dict:
    """The schema's defaults of every key inside a mapping key (``split``, ``label_set``), in schema order."""
    return {k: _schema_default(key, k) for k in _task_schema()[key]["properties"]}


def _resolve_type_from_note(where: str, value):
    """``type_from_note`` with a mapping's missing keys filled from the schema, checked (:func:`brat.note_type_rule`).

    Raises:
        TaskError: the value cannot be a rule (one line naming ``<where>.type_from_note``).
    """
    if isinstance(value, dict):
        value = {**{k: _schema_default("type_from_note", k) for k in brat.NOTE_RULE_KEYS}, **value}
    try:
        brat.note_type_rule(value, f"{where}.type_from_note")
    except brat.BratError as e:
        raise TaskError(str(e)) from None
    return value


def resolve_task_spec(name: str, spec: dict) -> dict:
    """A copy of a task entry with derived values filled in and combinations checked.

    Fills: ``format`` (= ``source`` for file formats, ``hub`` for hub), ``dataset``
    (fetch folder name, default the task name), ``path`` (default
    ``resources/datasets/{dataset}`` for ``url`` and ``hub``), ``fetch`` (whether
    a fetch rule must download the data: ``url`` tasks, and ``hub`` tasks without
    a local ``path``), ``splits`` (per-format defaults; a map without ``dev``
    derives dev from train), ``label_set.unseen`` (per-type default), and the
    reader keys' defaults; ``type_from_note`` given as a mapping gets its missing keys and
    ``doc_marker`` its value from the schema's defaults. Resolving a resolved spec gives it back.

    The steps, in order (each fills keys, so the resolved spec's key order is theirs):
    :func:`_resolve_source`, :func:`_resolve_splits`, :func:`_resolve_label_set`,
    :func:`_resolve_defaults`, :func:`_resolve_reader_keys`, :func:`_check_policies`.

    Raises:
        TaskError: an unknown type/source/format, a format that cannot give this task
            type, a ``url`` task without ``url``, a ``hub`` task without ``hub_id``,
            a missing ``path``, a ``splits`` map without ``train`` or ``test``, or with an
            empty name or two splits naming the same file, a
            ``type_from_note`` mapping that is not a rule (unknown key, ``field`` and
            ``regex`` both, a bad regex or one without exactly one capture group), a
            ``doc_marker`` that is not a regex with exactly one capture group, a
            ``duplicates`` value not in :data:`DUPLICATE_POLICIES`, or an
            ``overlap_min_words`` that is not a whole number >= 0; the message names
            ``tasks.<name>.<key>``.
    """
    return resolve_task(name, spec)[0]


def resolve_task(name: str, spec: dict) -> tuple[dict, TaskType]:
    """:func:`resolve_task_spec`, with the task type it resolved (the one place a task's type name is turned into
    its :class:`clmdetour.tasktypes.TaskType`; the preparation passes the object on).

    Raises:
        TaskError: as :func:`resolve_task_spec`.
    """
    s = copy.deepcopy(spec)
    where = f"tasks.{name}"
    ttype = _resolve_source(where, name, s)
    _resolve_splits(where, name, s)
    _resolve_label_set(where, s, ttype)
    _resolve_defaults(where, s)
    _resolve_reader_keys(where, s, ttype)
    _check_policies(where, s, ttype)
    return s, ttype


def _resolve_source(where: str, name: str, s: dict) -> TaskType:
    """Check ``type`` and ``source``; fill ``format``, ``dataset``, ``fetch`` and ``path`` (in place); returns the
    task type (resolved here, the one place the spec's type name is)."""
    if s.get("type") not in TASK_TYPE_NAMES:
        raise TaskError(f"{where}.type: {s.get('type')!r} is not one of {TASK_TYPE_NAMES}")
    ttype = TASK_TYPES[s["type"]]
    source = s.get("source")
    if source not in sources():
        raise TaskError(f"{where}.source: {source!r} is not one of {sources()}")
    if source in local_formats():
        s["format"] = source
    elif source == HUB_SOURCE:
        layouts = hub_formats()
        if s.get("format") not in (None, *layouts):
            raise TaskError(f"{where}.format: a hub task reads the dataset with datasets (format null) or a BigBIO "
                            f"parquet export ({', '.join(f for f in layouts if FORMATS[f].local)}); "
                            f"got {s.get('format')!r}")
        s["format"] = s.get("format") or layouts[0]
    elif s.get("format") not in local_formats():
        raise TaskError(f"{where}.format: a {source!r} task needs format, one of {local_formats()}; "
                        f"got {s.get('format')!r}")
    fmt = s["format"]
    if ttype.name not in format_types(fmt):
        raise TaskError(f"{where}: format {fmt!r} gives {format_types(fmt)} tasks, not {s['type']!r}")
    s["dataset"] = s.get("dataset") or name
    if source == URL_SOURCE and not s.get("url"):
        raise TaskError(f"{where}.url: a url task needs the archive's URL")
    if source == HUB_SOURCE and not s.get("hub_id"):
        raise TaskError(f"{where}.hub_id: a hub task needs a Hub dataset id")
    s["fetch"] = source == URL_SOURCE or (source == HUB_SOURCE and not s.get("path"))
    if not s.get("path"):
        if source in (URL_SOURCE, HUB_SOURCE):
            s["path"] = f"resources/datasets/{s['dataset']}"
        else:
            raise TaskError(f"{where}.path: a {source!r} task needs the path of its files")
    return ttype


def _resolve_splits(where: str, name: str, s: dict) -> None:
    """Fill ``split`` (schema defaults) and ``splits`` (the format's default map); check they fit the path."""
    split = _schema_defaults("split")
    split.update(s.get("split") or {})
    s["split"] = split
    fmt = s["format"]
    default_splits = get_format(fmt).default_splits()
    # (a resolved spec, as the prepare_task job receives it, carries the default map: resolving is idempotent)
    if split["policy"] == "hash" and s.get("splits") and s["splits"] != default_splits:
        raise TaskError(f"{where}.splits: split.policy is hash, which reads the whole source and splits it by "
                        f"document hash, so a splits map would be ignored; remove splits, or set split.policy: given "
                        f"to use the source's own split files ({s['splits']})")
    _check_table_path(where, name, s)
    if not s.get("splits"):
        s["splits"] = default_splits
    elif split["policy"] == "given":
        for key in ("train", "test"):
            if not s["splits"].get(key):
                raise TaskError(f"{where}.splits.{key}: the splits map needs {key!r} (only dev may be left out: "
                                f"it is then derived from train by hash, split.dev_fraction); got {s['splits']}")
        _check_split_names(where, s["splits"])


def _check_split_names(where: str, splits: dict) -> None:
    """Each split of a given ``splits`` map names its own, non-empty file (folder, or Hub split).

    Raises:
        TaskError: an empty (or blank) name, or two splits naming the same file (compared after
            path normalisation, ``./train.json`` = ``train.json``); the message names the keys.
    """
    seen: dict[str, str] = {}
    for key in SPLITS:
        if key not in splits:
            continue
        value = splits[key]
        if isinstance(value, str) and not value.strip():
            leave = " or leave dev out to derive it from train (split.dev_fraction)" if key == "dev" else ""
            raise TaskError(f"{where}.splits.{key}: an empty file name ({value!r}); name the {key} split's file"
                            f"{leave}")
        norm = os.path.normpath(str(value))
        if norm in seen:
            raise TaskError(f"{where}.splits.{key} and {where}.splits.{seen[norm]} name the same file {value!r}: "
                            f"each split must be read from its own file (a split read twice repeats every id)"
                            + ("; leave dev out to derive it from train (split.dev_fraction)" if key == "dev" else ""))
        seen[norm] = key


def _check_table_path(where: str, name: str, s: dict) -> None:
    """A user's own table task (path already there): a hash split reads one file, a given split a folder."""
    fmt, policy = s["format"], s["split"]["policy"]
    layout = get_format(fmt)
    if layout.layout != FILES or s["source"] not in (USER_SOURCE, *local_formats()) or not Path(s["path"]).exists():
        return
    is_dir = Path(s["path"]).is_dir()
    if policy == "hash" and is_dir:
        raise TaskError(f"{where}.path: {s['path']} is a folder, but split.policy hash reads one {fmt} file "
                        f"(all rows, split by document hash); give the file, or set split.policy: given for a "
                        f"folder of train/dev/test files")
    if policy == "given" and not is_dir:
        raise TaskError(f"{where}.path: {s['path']} is a file, but split.policy given reads a folder of split "
                        f"files (tasks.{name}.splits, default train/dev/test.{layout.extension}); give the folder, or set "
                        f"split.policy: hash to split this one file")


def _resolve_label_set(where: str, s: dict, ttype: TaskType) -> None:
    """Check ``subfolder``; fill ``label_set`` (schema defaults, ``unseen`` by the task type)."""
    subs = s.get("subfolder")
    if isinstance(subs, list) and not subs:
        raise TaskError(f"{where}.subfolder: an empty list; give a folder name, a list of them, or null")
    label_set = _schema_defaults("label_set")
    label_set.update(s.get("label_set") or {})
    if label_set["unseen"] is None:
        label_set["unseen"] = ttype.unseen_default
    s["label_set"] = label_set


def _resolve_defaults(where: str, s: dict) -> None:
    """Fill ``comment_prefix`` (null kept: no comments), ``type_from_note``, ``doc_marker`` (checked) and
    every key of :data:`READER_KEYS` left unset or null, from the schema's defaults."""
    s.setdefault("comment_prefix", _schema_default("comment_prefix"))  # null turns comments off
    s["type_from_note"] = _resolve_type_from_note(where, s.get("type_from_note"))
    s.setdefault("doc_marker", _schema_default("doc_marker"))
    if s["doc_marker"] is not None:
        one_group_regex(s["doc_marker"], f"{where}.doc_marker", "the document id", TaskError)
    for key in READER_KEYS:
        default = _schema_default(key)
        s.setdefault(key, default)
        if s[key] is None and default is not None:
            s[key] = default


def _check_policies(where: str, s: dict, ttype: TaskType) -> None:
    """``duplicates`` is a known policy, ``overlap_min_words`` a whole number >= 0, ``metric`` and each of
    ``table_metrics`` one the type scores, and the type's own reader keys hold together (:meth:`clmdetour.tasktypes.TaskType.check_reader_keys`)."""
    if s.get("metric") is not None and s["metric"] not in ttype.metrics:
        raise TaskError(f"{where}.metric: {s['metric']!r} is not a metric of a {s['type']} task; one of {ttype.metrics} "
                        f"(null: {ttype.default_metric})")
    extra = s.get("table_metrics")
    if extra is not None and (not isinstance(extra, list) or any(m not in ttype.metrics for m in extra)
                              or len(set(extra)) != len(extra)):
        raise TaskError(f"{where}.table_metrics: {extra!r} is not a list of distinct metrics of a {s['type']} task "
                        f"(one or more of {ttype.metrics}); each becomes a column of the results table, read from "
                        "the same fine-tuning records")
    try:
        ttype.check_reader_keys(s, where)
    except ValueError as e:
        raise TaskError(str(e)) from None
    if s["duplicates"] not in DUPLICATE_POLICIES:
        raise TaskError(f"{where}.duplicates: {s['duplicates']!r} is not one of {DUPLICATE_POLICIES}")
    floor = s["overlap_min_words"]
    if isinstance(floor, bool) or not isinstance(floor, int) or floor < 0:
        raise TaskError(f"{where}.overlap_min_words: {floor!r} is not a whole number of words >= 0")


def _resolve_reader_keys(where: str, s: dict, ttype: TaskType) -> None:
    """Fill and check the keys of the word-per-line and relation readers (in place).

    They get values only where they apply, so the resolved spec (prepare_task's params) of a
    task that does not use them is unchanged: ``tag_column`` (default -1) and ``tag_scheme``
    (default ``iob2``) for conll / iob_tsv; ``label_map_unmapped`` (default ``error``) when
    ``label_map`` is set; ``marker_tokens`` (default false) when ``entity_markers`` is set.

    Raises:
        TaskError: a key given to a format or type it does not apply to, a ``tag_column`` that
            is not an integer (or, for iob_tsv, not the last column), an unknown ``tag_scheme``
            or ``label_map_unmapped``, a malformed ``label_map`` or ``entity_markers``, or
            ``marker_tokens: true`` without ``entity_markers`` (names ``tasks.<t>.<key>``).
    """
    _resolve_tag_keys(where, s)
    _resolve_relation_keys(where, s, ttype)


def _resolve_tag_keys(where: str, s: dict) -> None:
    """``tag_column`` and ``tag_scheme``: filled and checked for conll / iob_tsv, refused elsewhere."""
    fmt = get_format(s["format"])
    word_formats = tuple(n for n, f in FORMATS.items() if f.word_lines)
    for key in ("tag_column", "tag_scheme"):
        if s.get(key) is not None and not fmt.word_lines:
            raise TaskError(f"{where}.{key}: applies to formats {word_formats}, not {fmt.name!r}")
    if not fmt.word_lines:
        return
    s["tag_column"] = -1 if s.get("tag_column") is None else s["tag_column"]
    s["tag_scheme"] = s.get("tag_scheme") or "iob2"
    col = s["tag_column"]
    if isinstance(col, bool) or not isinstance(col, int) or col == 0:
        raise TaskError(f"{where}.tag_column: {col!r} is not a column index of the tag (an integer, 0-based; "
                        "-1 = the last column; column 0 holds the word)")
    if fmt.tag_columns is not None and col not in fmt.tag_columns:
        raise TaskError(f"{where}.tag_column: {fmt.name} files have two columns (word, tag); the tag is -1 (or 1), "
                        f"got {col}")
    if s["tag_scheme"] not in TAG_SCHEMES:
        raise TaskError(f"{where}.tag_scheme: {s['tag_scheme']!r} is not one of {TAG_SCHEMES}")


def _resolve_relation_keys(where: str, s: dict, ttype: TaskType) -> None:
    """``label_map`` (+ ``label_map_unmapped``) and ``entity_markers`` (+ ``marker_tokens``), for class labels."""
    relation_keys = [k for k in ("label_map", "label_map_unmapped", "entity_markers", "marker_tokens")
                     if s.get(k) is not None]
    if relation_keys and not ttype.class_labels:
        named = [n for n, t in TASK_TYPES.items() if t.class_labels]
        raise TaskError(f"{where}.{relation_keys[0]}: applies to tasks of types {named}, not {s['type']!r}")
    try:
        if s.get("label_map") is not None:
            s["label_map"] = relation.check_label_map(s["label_map"], f"{where}.label_map")
            s["label_map_unmapped"] = s.get("label_map_unmapped") or "error"
        if s.get("label_map_unmapped") is not None and s["label_map_unmapped"] not in relation.UNMAPPED_POLICIES:
            raise TaskError(f"{where}.label_map_unmapped: {s['label_map_unmapped']!r} is not one of "
                            f"{relation.UNMAPPED_POLICIES}")
        if s.get("entity_markers") is not None:
            s["entity_markers"] = [list(p) for p in relation.check_marker_pairs(s["entity_markers"],
                                                                                 f"{where}.entity_markers")]
            s["marker_tokens"] = bool(s.get("marker_tokens") or False)
    except relation.RelationError as e:
        raise TaskError(str(e)) from None
    if s.get("marker_tokens") is not None and not isinstance(s["marker_tokens"], bool):
        raise TaskError(f"{where}.marker_tokens: {s['marker_tokens']!r} is not true or false")
    if s.get("marker_tokens") and not s.get("entity_markers"):
        raise TaskError(f"{where}.marker_tokens: true needs entity_markers (the strings to add to the tokenizer)")


def marker_token_strings(spec: dict) -> list[str]:
    """The strings a resolved spec adds to the tokenizer at fine-tuning (``marker_tokens: true``), else ``[]``."""
    if not spec.get("marker_tokens"):
        return []
    return [m for pair in spec["entity_markers"] for m in pair]


def subfolders(spec: dict) -> list[str | None]:
    """The ``subfolder`` values of a resolved spec as a list (``[None]``: the split folder itself)."""
    sub = spec.get("subfolder")
    return [None] if not sub else ([sub] if isinstance(sub, str) else list(sub))


def expected_files(spec: dict) -> list[str]:
    """The files or folders a resolved task spec reads (for messages and input checks)."""
    layout, path = get_format(spec["format"]).layout, Path(spec["path"])
    if layout == HUB:
        return [str(path)]
    subs = subfolders(spec) if layout == FOLDERS else [None]
    if spec["split"]["policy"] == "hash":
        return [str(path / sub) if sub else str(path) for sub in subs]
    out = []
    for split in SPLITS:
        if split not in spec["splits"]:
            continue  # dev derived from train
        p = path / spec["splits"][split]
        out += [str(p / sub) if sub else str(p) for sub in subs]
    return out


def format_description(spec: dict) -> str:
    """One-line description of the files a task expects (used in user-task errors;
    :attr:`clmdetour.tasks.fileformats.TaskFormat.describe`)."""
    return get_format(spec["format"]).describe(spec)


def files_hint(name: str, spec: dict) -> str:
    """Which config key names the files a task reads, for missing-files messages.

    A given split reads ``tasks.<name>.path`` joined with each entry of ``tasks.<name>.splits``:
    the message names ``splits`` with its current map and the one-line fix for files named
    otherwise; a hash split reads ``path`` alone; a Hub layout reads ``path`` as a folder.
    """
    key = f"tasks.{name}"
    fmt = get_format(spec["format"])
    if fmt.layout == HUB:
        return f"the folder read is {key}.path ({spec['path']})"
    if spec["split"]["policy"] == "hash":
        return (f"split.policy hash reads {key}.path as one source ({spec['path']}); for separate train/dev/test "
                f"files set {key}.split.policy: given and {key}.splits")
    splits = spec.get("splits") or {}
    ext = fmt.hint_extension()
    example = ("{" + ", ".join(f"{s}: {s}.{ext}" for s in SPLITS) + "}") if ext else "{train: ..., dev: ..., test: ...}"
    return (f"the files read are {key}.path ({spec['path']}) joined with {key}.splits ({dict(splits)}); if yours "
            f"are named otherwise, set {key}.splits to their names, e.g. splits: {example} (dev may be left out: "
            f"it is then derived from train)")


def missing_files(spec: dict) -> list[str]:
    """Those :func:`expected_files` that do not exist."""
    return [p for p in expected_files(spec) if not Path(p).exists()]


def user_task_message(name: str, spec: dict, missing: list[str]) -> str:
    """The error text for a user-provided task whose files are missing."""
    hint = f" ({spec['instructions']})" if spec.get("instructions") else ""
    return (f"task {name!r} needs files you must provide{hint}: missing {missing}; "
            f"expected format: {format_description(spec)}; {files_hint(name, spec)}; see docs/tasks.md")


def left_out_tasks(config: dict) -> dict[str, str]:
    """User-provided tasks that are left out of the grid because their files are missing.

    A task with ``source: user`` whose files (:func:`expected_files`, relative
    to the working directory) do not all exist is left out of the evaluation
    grid and the release when ``evaluation.missing_user_tasks`` is ``skip``
    (the default). With ``error`` nothing is left out and
    a target that needs the task fails at planning, naming what to provide.

    Returns:
        ``{task: message}`` in config order, the message saying what is
        missing and what to provide (the task's ``instructions``); empty when
        nothing is left out.

    Raises:
        TaskError: a task entry that cannot be resolved (names ``tasks.<name>.<key>``).
    """
    if ((config.get("evaluation") or {}).get("missing_user_tasks") or "skip") == "error":
        return {}
    out = {}
    for name, raw in (config.get("tasks") or {}).items():
        if raw.get("source") != "user":
            continue
        spec = resolve_task_spec(name, raw)
        missing = missing_files(spec)
        if missing:
            out[name] = user_task_message(name, spec, missing)
    return out


def left_out_warning(left_out: dict[str, str]) -> str:
    """The one planning warning for :func:`left_out_tasks` (empty string when none is left out)."""
    if not left_out:
        return ""
    lines = [(f"{len(left_out)} user-provided task(s) left out of the evaluation grid and the release "
              f"(evaluation.missing_user_tasks: skip; set it to error to stop instead):")]
    lines += [f"  - {msg}" for msg in left_out.values()]
    return "\n".join(lines)
