"""The checks a task passes before it is written: non-empty splits, unique ids, repeated records,
leakage between splits, conflicting labels.

Repeated records (``duplicates``): an id may occur once across the three
splits. A record repeated under the same id with the same text and labels
(the type's :meth:`~clmdetour.tasktypes.base.TaskType.example_texts` and
:meth:`~clmdetour.tasktypes.base.TaskType.label_key`) is an error with
``duplicates: error`` (default; the message suggests ``drop_identical``), or
dropped and counted with ``drop_identical``: the first copy is kept (splits in
train, dev, test order, rows in file order), so a test copy of a train record
leaves test. A same-id record with a different text or labels is always an
error naming both places.

An empty split (0 examples) is an error naming the files read.

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
``dev``) assign whole *documents* (:mod:`clmdetour.tasks.reading`).
"""

from __future__ import annotations

from clmdetour.tasks import overlap
from clmdetour.tasks.fileformats import get_format
from clmdetour.tasks.spec import TaskError
from clmdetour.tasks.split import SPLITS
from clmdetour.tasktypes import TaskType
from clmdetour.textio import counted


def check_splits(name: str, splits: dict[str, list[dict]], files_read: list[str], stage: str = "",
                 split_files: dict[str, str | list[str]] | None = None) -> None:
    """Every split holds examples, and no id appears twice across splits.

    Args:
        name: task name (messages).
        splits: rows per split.
        files_read: every file or folder the task read (named when an empty split has no files of its own).
        stage: the words after "is empty" (e.g. " after the label-set policy"); "" = " (0 examples)".
        split_files: the split's own file(s) for given split files (the split rule's ``files``), so an
            empty split names its file alone; None, or a split not in it (a hash split, a derived dev):
            ``files_read`` is named.

    Raises:
        TaskError: an empty split (names its file, or the files read, and ``stage``), or a repeated id
            (names both places).
    """
    for split in SPLITS:
        if not splits.get(split):
            where = (split_files or {}).get(split) or files_read
            raise TaskError(f"{where}: split {split!r} of task {name!r} is empty{stage or ' (0 examples)'}")
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


def drop_duplicate_records(name: str, splits: dict[str, list[dict]], ttype: TaskType, policy: str
                           ) -> tuple[dict[str, list[dict]], dict]:
    """Handle records repeated under one id (``tasks.{name}.duplicates``; rule in the module doc).

    Rows are visited split by split (train, dev, test), each in file order; a row whose
    id was seen before is a repeat, *identical* when its texts
    (:meth:`~clmdetour.tasktypes.base.TaskType.example_texts`) and labels
    (:meth:`~clmdetour.tasktypes.base.TaskType.label_key`) equal the first copy's.

    Args:
        name: task name (messages).
        splits: raw rows per split (``id``, ``where``, text and label columns).
        ttype: the task's type (its ``example_texts`` and ``label_key``).
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

        logging.getLogger(__name__).warning("task %s: %s dropped (%s; duplicates: drop_identical), e.g. %s", name,
                                            counted(report["dropped_total"], "identical repeated record"), dropped,
                                            examples[0])
    return out, report


def check_split_overlap(name: str, splits: dict[str, list[dict]], max_split_overlap: float,
                        min_words: int = overlap.MIN_WORDS, spec: dict | None = None,
                        ttype: TaskType | None = None) -> dict:
    """Near-exact input shared between splits (:func:`overlap.split_overlap`), within the task's limit.

    The input compared is what the model sees, the type's ``compared_texts`` (a multiple-choice question
    with its options in a canonical order, both texts of a pair); ``ttype`` None compares the ``text``
    column alone.

    Args:
        name: task name (messages).
        splits: rows per split.
        max_split_overlap: largest allowed test overlap fraction, in [0, 1].
        min_words: the check's floor (``tasks.{name}.overlap_min_words``), in normalised
            words; shorter examples are counted in ``by_length`` but never fail the task.
        spec: the resolved task spec, so the refusal names the fix for its case
            (:func:`overlap_fix`); None: a general hint.
        ttype: the task's type (its ``compared_texts`` and ``input_description``), or None.

    Returns:
        The overlap report, with ``max_split_overlap`` added.

    Raises:
        TaskError: the share of test examples (of at least ``min_words`` words) with a
            train twin exceeds ``tasks.{name}.max_split_overlap`` (names example ids and the
            fix), or every dev example has a train twin (a dev split copied from train).
    """
    texts = ttype.compared_texts if ttype is not None else (lambda row: (row["text"],))
    what = ttype.input_description if ttype is not None else "text"
    leak = overlap.split_overlap(splits, min_words, texts=texts)
    leak["input"] = what
    leak["max_split_overlap"] = max_split_overlap
    dev_in_train = sum(band["near_exact"] for band in leak["by_length"]["train-dev"].values())
    if splits.get("dev") and dev_in_train == len(splits["dev"]):
        raise TaskError(f"tasks.{name}: every one of the {len(splits['dev'])} dev examples has the same {what} "
                        "(near-exact: NFKC, lower-case, words) as a train example: the dev split is a copy of train, "
                        "so the learning rate and threshold chosen on it would favour memorisation; give a "
                        f"held-out dev file, or let the pipeline cut one (tasks.{name}.split)")
    if leak["test_fraction"] > max_split_overlap:
        verb = "has" if leak["test_overlapping"] == 1 else "have"
        raise TaskError(f"tasks.{name}: {leak['test_overlapping']} of {leak['test_examples']} test examples "
                        f"({100 * leak['test_fraction']:.1f} %) {verb} the same {what} (near-exact: NFKC, lower-case, "
                        f"words; {leak['min_words']}+ words, tasks.{name}.overlap_min_words) as a train example, "
                        f"more than tasks.{name}.max_split_overlap = {max_split_overlap}; e.g. test ids "
                        f"{leak['test_example_ids']}; train-test {leak['pairs']['train-test']}, dev-test "
                        f"{leak['pairs']['dev-test']}{_shared_first_note(leak, what)}; "
                        f"{keep_split_fix(name, spec, leak)}{overlap_fix(name, spec, splits)}")
    return leak


def _shared_first_note(leak: dict, what: str) -> str:
    """The refusal's words on test inputs sharing only their first part with train (not counted)."""
    n = leak["shared_first_text"]["train-test"]
    if not n:
        return ""
    first = what.split(" and ")[0] if " and " in what else f"first text of the {what}"
    return (f" ({n} more test {'example shares' if n == 1 else 'examples share'} only their {first} with train: "
            "templates, not counted)")


def keep_split_fix(name: str, spec: dict | None, leak: dict) -> str:
    """The refusal's first fix for given split files (an official split): keep the split and raise
    ``tasks.{name}.max_split_overlap`` just above the measured fraction (the leak stays in the manifest),
    or remove the leaked test ids; '' for a split the pipeline made (hash), where re-splitting is the fix.
    The limit proposed is the measured fraction rounded up to 3 decimals."""
    if spec is not None and spec["split"]["policy"] == "hash":
        return ""
    import math

    limit = math.ceil(leak["test_fraction"] * 1000) / 1000
    ids = leak["test_overlapping_ids"]
    more = "" if len(ids) == leak["test_overlapping"] else f" (first {len(ids)})"
    return (f"to keep the official split, set tasks.{name}.max_split_overlap: {limit:g} (the leak stays reported in "
            f"the manifest, split_overlap) or remove the leaked test ids {ids}{more} from the test file; to split "
            "anew instead: ")


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
    fmt = get_format(spec["format"])
    if fmt.table:
        if hashed and not spec.get("doc_id_field"):
            return (f"the file was split row by row (split.policy hash without {key}.doc_id_field): set "
                    f"{key}.doc_id_field to the field naming each row's document, so its rows share a split; "
                    f"when no field names a document, set {key}.doc_id_field: {spec.get('text_field')!r} (the text "
                    "field) so identical texts share a split (exact repeats only)")
        how = ("put the rows in one file with split.policy: hash, and " if not hashed else "")
        return (f"{how}set {key}.doc_id_field to a field holding each text normalised (lower-case, without "
                f"punctuation), so case or punctuation variants of a text hash to one split "
                f"({key}.doc_id_field: {spec.get('text_field')!r} hashes the text as written: exact repeats only)")
    rows = [r for v in (splits or {}).values() for r in v]
    if fmt.doc_marks and hashed and rows and not all(r.get("doc_marked", True) for r in rows):
        return (f"the file marks no documents, so it was split sentence by sentence: mark them (-DOCSTART- lines, "
                f"'# doc_id = X' comments, or {key}.doc_marker for another comment spelling) so a document's "
                "sentences share a split")
    return "check the split files (or split by document)"


def check_conflicting_labels(name: str, splits: dict[str, list[dict]], ttype: TaskType) -> dict:
    """Count texts that carry different labels (:func:`overlap.conflicting_labels`); warns when any.

    Rows are compared by the type's ``compared_texts`` and ``compared_label_key`` (for multiple
    choice: options in a canonical order, the correct options' texts).

    The task is never refused for it: label noise is the data's, and the manifest and
    the results table's notes report it.

    Returns:
        The manifest's ``conflicting_labels`` (see :func:`overlap.conflicting_labels`).
    """
    report = overlap.conflicting_labels(splits, ttype.compared_label_key, ttype.compared_texts,
                                        spelling=ttype.shown_label_key)
    if report["texts"]:
        import logging

        logging.getLogger(__name__).warning(
            "task %s: %s (%s) %s different labels (same normalised text): within splits %s, "
            "across splits %s; e.g. %r (ids %s)", name, counted(report["texts"], "text"), counted(report["rows"], "row"),
            "carries" if report["texts"] == 1 else "carry", report["within"],
            report["across"], report["examples"][0]["text"], report["examples"][0]["ids"])
    return report
