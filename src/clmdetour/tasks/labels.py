"""The label-set policy of a task: the labels chosen on train and applied to every split.

Label-set policy (``label_set`` in the task config):

- the label set is taken from **train** only: every label (entity type,
  class, code) seen in train, or with ``top_k`` the ``k`` most frequent by
  document frequency on train (rows containing the label; ties broken by
  label name);
- a label seen in train but outside the top ``k`` is removed everywhere (an
  entity becomes ``O``, a multiclass row is dropped, a multilabel code is
  removed from the row's list), counted in the manifest;
- a label in dev or test **never seen in train**: ``unseen: error`` raises
  :class:`~clmdetour.tasks.spec.TaskError` naming the file, line and label; ``unseen: drop``
  removes it as above and counts it. Default: the type's ``unseen_default`` (``error`` for ``ner``
  and ``multiclass``, ``drop`` for ``multilabel``: code sets have long tails:
  a hash split of 1,300 FRACCO documents always leaves codes seen only in test).
- a dev/test label unseen in train with ``unseen: error``: when few rows are
  affected (at most ``max_unlabelled_fraction`` of the split) the error names
  the first file, line and label and suggests ``unseen: drop``; otherwise it
  says how many labels and rows are affected and suggests checking the label
  field, the entity type or ``label_separator``;
- ``max_unlabelled_fraction`` (default 0.05): a multilabel task whose test rows
  have no label seen in train (after ``unseen`` handling, before ``top_k``), or
  a multiclass task whose test rows are dropped as unseen, above this fraction
  is refused; the error names the separator and shows one raw label value.

Which labels a row carries, and how one is removed, is the task type's
(:meth:`~clmdetour.tasktypes.base.TaskType.row_labels`,
:meth:`~clmdetour.tasktypes.base.TaskType.remove_labels`): the functions here take the
:class:`~clmdetour.tasktypes.base.TaskType` object.
"""

from __future__ import annotations

from collections import Counter

from clmdetour.tasks.fileformats import get_format
from clmdetour.tasks.spec import TaskError
from clmdetour.tasktypes import TaskType


def _where_label(row: dict, label: str) -> str:
    return (row.get("type_where") or {}).get(label) or row["where"]


def filter_split_labels(rows: list[dict], ttype: TaskType, keep: set[str], train_df: Counter
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
        labels = ttype.row_labels(row)
        bad = {x for x in labels if x not in keep}
        for x in bad:
            if x in train_df:
                outside[x] += 1
            else:
                unseen[x] += 1
                first_unseen.setdefault(x, row)
        if not any(x in train_df for x in labels):
            without_seen += 1
        new = ttype.remove_labels(row, bad) if bad else row
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
        "rows_without_labels": sum(not ttype.row_labels(r) for r in new_rows),
        "rows_without_seen_labels": without_seen,
        "distinct_labels": len({x for r in new_rows for x in ttype.row_labels(r)}),
    }
    return new_rows, counts, unseen, first_unseen


def unseen_label_error(split: str, rows: list[dict], ttype: TaskType, train_df: Counter, unseen: Counter,
                       first_unseen: dict[str, dict], max_unlabelled_fraction: float, fields: dict) -> TaskError:
    """The error for labels of ``split`` unseen in train under ``unseen: error``: names the file,
    line and label; suggests ``unseen: drop`` when few rows are affected, else says what to check."""
    label, row = next(iter(first_unseen.items()))
    affected = sum(any(x not in train_df for x in ttype.row_labels(r)) for r in rows)
    head = f"{_where_label(row, label)}: label {label!r} in {split} is not in train"
    if affected <= max(1, max_unlabelled_fraction * len(rows)):
        return TaskError(f"{head} (train labels: {sorted(train_df)[:20]}{' ...' if len(train_df) > 20 else ''}); "
                         "set label_set.unseen: drop to drop it")
    what = ttype.label_source(fields)
    return TaskError(f"{head}; {len(unseen)} distinct {split} labels in {affected} of {len(rows)} rows "
                     f"are unseen in train ({sorted(unseen)[:5]}{' ...' if len(unseen) > 5 else ''}; "
                     f"train has {len(train_df)}: {sorted(train_df)[:5]}{' ...' if len(train_df) > 5 else ''}): too many "
                     f"to drop; check {what}")


def apply_label_set(splits: dict[str, list[dict]], ttype: TaskType, label_set: dict,
                    max_unlabelled_fraction: float = 0.05, fields: dict | None = None
                    ) -> tuple[list[str], dict, dict]:
    """Choose the label set on train and apply it to every split (policy in the module doc).

    Args:
        splits: raw rows per split.
        ttype: the task's type (its ``row_labels`` and ``remove_labels`` read and cut the labels).
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
    df = Counter(label for row in splits["train"] for label in ttype.row_labels(row))
    ranked = sorted(df, key=lambda x: (-df[x], x))
    top_k = label_set.get("top_k")
    keep = set(ranked[:top_k] if top_k else ranked)
    if not keep:
        raise TaskError(f"{splits['train'][0]['where'] if splits['train'] else 'train'}: no labels in train")
    report: dict = {"train_document_frequency": dict(sorted(df.items(), key=lambda x: (-x[1], x[0])))}
    out = {}
    for split, rows in splits.items():
        new_rows, counts, unseen, first_unseen = filter_split_labels(rows, ttype, keep, df)
        if unseen and label_set["unseen"] == "error":
            raise unseen_label_error(split, rows, ttype, df, unseen, first_unseen, max_unlabelled_fraction, fields)
        out[split] = new_rows
        report[split] = counts
    return sorted(keep), out, report


def check_unlabelled(name: str, splits: dict[str, list[dict]], report: dict, ttype: TaskType, spec: dict) -> dict:
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
    key = ttype.unlabelled_key
    bad = test[key] if key else 0
    frac = bad / n if n else 0.0
    out = {"test_rows": n, "unlabelled": bad, "fraction": round(frac, 6), "max_unlabelled_fraction": limit,
           "checked": key is not None}
    if key is not None and frac > limit:
        raw = next((r for r in splits["test"] if "raw_label" in r), None) or next(
            (r for r in splits["train"] if "raw_label" in r), None)
        shown = f"; a raw label value: {raw['raw_label']!r} ({raw['where']})" if raw else ""
        sep = (f"label_separator is {spec['label_separator']!r}"
               if ttype.label_separator and get_format(spec["format"]).string_fields
               else f"label_field is {spec['label_field']!r}")
        raise TaskError(f"tasks.{name}: {bad} of {n} test rows ({100 * frac:.1f} %) have no label seen in train "
                        f"after label_set.unseen: {spec['label_set']['unseen']} (max_unlabelled_fraction {limit}); "
                        f"{len(report['train_document_frequency'])} distinct labels in train; {sep}{shown}; check label_separator / label_field, or raise "
                        f"tasks.{name}.max_unlabelled_fraction")
    return out


def _label_forms(splits: dict[str, list[dict]]):
    """``(label, raw form, where)`` of every label of every row, in order: the ``label_form`` (multiclass) or
    ``label_forms`` (multilabel) the task type records beside each parsed label (other types record none)."""
    for rows in splits.values():
        for row in rows:
            if "label_form" in row:
                pairs = [(row["label"], row["label_form"])]
            else:
                pairs = list(zip(row.get("labels") or [], row.get("label_forms") or []))
            for label, form in pairs:
                yield label, form, str(row.get("where", ""))


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
    for label, form, where in _label_forms(splits):
        forms[label][form] += 1
        first.setdefault((label, form), where)
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


def check_label_kinds(name: str, splits: dict[str, list[dict]], labels: list[str], ttype: TaskType) -> None:
    """Refuse labels that cannot make a classification task: a number among text labels that becomes a class of
    its own (``1`` among ``"positive"``/``"negative"``: a typo or a column shifted; ``1`` beside ``"1"`` merges and
    is only reported, :func:`merged_label_forms`), and fewer labels than the type needs
    (:attr:`clmdetour.tasktypes.TaskType.min_labels`: a multiclass task with a single class, which every model
    scores 1.0 on).

    Reads the ``label_form`` / ``label_forms`` (the raw value's ``repr``) that multiclass and multilabel record.

    Raises:
        TaskError: naming the task, the label and the file and line where it first occurs.
    """
    text_labels, number_at = set(), {}
    for label, form, where in _label_forms(splits):
        if form[:1] in ("'", '"'):
            text_labels.add(label)
        else:
            number_at.setdefault(label, (form, where))
    alone = {label: at for label, at in number_at.items() if label not in text_labels}
    if text_labels and alone:
        label, (form, where) = next(iter(sorted(alone.items())))
        shown = ", ".join(repr(t) for t in sorted(text_labels)[:3])
        raise TaskError(f"{where}: task {name!r} has the number {form} as a label among text labels ({shown}"
                        f"{', ...' if len(text_labels) > 3 else ''}): it would become a class of its own; write it "
                        "as the text label it stands for, or drop the row")
    if len(labels) < ttype.min_labels:
        kind = "a single class" if len(labels) == 1 else f"{len(labels)} classes"
        raise TaskError(f"task {name!r} has {kind} ({', '.join(map(repr, labels)) or 'none'}) after the label set, "
                        f"fewer than a {ttype.name} task needs ({ttype.min_labels}): every model would score 1.0 on "
                        f"it; check the label field (tasks.{name}.label_field), the label-set policy "
                        f"(tasks.{name}.label_set) or the data")
