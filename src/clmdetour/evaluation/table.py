"""Aggregate fine-tuning runs into the results table (docs/tasks.md, "The results table").

- ``results/eval_runs.tsv``: one row per expected (model, task, seed) with its
  ``status``: ``ok``, ``failed`` (the run wrote a failed record) or
  ``missing`` (no record); only ``ok`` rows have a ``score`` (the task's
  headline metric, named in ``metric``) and ``score_other`` (the type's other
  metric of the record's test ``metrics``, named in ``metric_other``:
  :func:`other_metric`, e.g. ``f1_macro`` for a ``f1_micro`` task and vice
  versa, ``emr`` for a ``hamming`` one, ``pearson`` for a ``spearman`` one);
  a task listing metrics in ``tasks.{task}.table_metrics`` adds one
  ``score_{metric}`` column per metric listed (from the same records: no
  second fine-tune).
- ``results/eval_table.tsv``: ``model``, then per task ``{task}_mean``,
  ``{task}_std`` (sample std, ddof=1, over seeds), ``{task}_n`` (seeds with a
  score), ``{task}_delta`` (mean minus the baseline's mean),
  ``{task}_p_welch``, ``{task}_p_paired`` (paired by seed),
  ``{task}_p_wilcoxon`` (paired, from 6 non-zero differences),
  ``{task}_trivial`` (the best constant predictor's test score,
  :mod:`clmdetour.evaluation.trivial`, the same on every model row) and ``{task}_mdd``
  (minimum detectable difference, alpha 0.05, power 0.8), all from
  :mod:`clmdetour.evaluation.stats` against the baseline's seeds; then ``macro_avg``
  (mean of the task means; missing unless every task has a mean),
  ``sign_wins``, ``sign_ties``, ``sign_p`` (sign test over tasks, a tie when
  |delta| < ``evaluation.tie_tolerance``), ``sign_groups_wins``,
  ``sign_groups_ties``, ``sign_groups_p`` (the same over groups of tasks that
  share documents, :mod:`clmdetour.evaluation.task_groups`, each counted once by the mean
  of its tasks' deltas); then, only for tasks with ``table_metrics``, per task
  and metric ``{task}_{metric}_mean``, ``{task}_{metric}_std`` and
  ``{task}_{metric}_n``. A last row ``model = trivial`` holds each task's
  trivial score in ``{task}_mean`` and nothing else. Scores are fractions in
  [0, 1]; an undefined test or a missing value is an empty cell, never a number.
- ``results/eval_table.md``: the same x ``report_scale`` (100) with ±, a table
  of the per-task tests, and notes naming the document groups and the tasks
  whose data hold texts with conflicting labels (the manifests'
  ``conflicting_labels``; the sentence is absent when there are none).

Missing or failed runs make :func:`check_complete` raise, unless the caller
allows missing runs (``evaluation.allow_missing``); then the cells are
computed from the seeds that exist and ``n`` says how many.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from clmdetour.errors import InputError
from clmdetour.evaluation.stats import (
    WILCOXON_MIN_N,
    min_detectable_difference,
    paired_p,
    sign_test,
    welch_p,
    wilcoxon_p,
)
from clmdetour.io import atomic_write_text, read_json

log = logging.getLogger("clmdetour.evaluation.table")

RUN_COLUMNS = ["model", "task", "seed", "status", "metric", "score", "metric_other", "score_other", "dev_metric",
               "best_epoch", "wall_time_s", "error", "path", "rescored", "truncated_share"]
#: A test split with more than this share of its inputs cut at max_length is named in the table's notes.
TRUNCATION_NOTE_SHARE = 0.05


def _other_metrics() -> dict[str, str]:
    """Each metric a registered task type scores -> the first other metric of that type (its ``metrics``)."""
    from clmdetour.tasktypes import TASK_TYPES

    out: dict[str, str] = {}
    for ttype in TASK_TYPES.values():
        for m in ttype.metrics:
            others = [o for o in ttype.metrics if o != m]
            if others:
                out.setdefault(m, others[0])
    return out


# The other metric of a record's test metrics, from the task types (f1_micro <-> f1_macro, hamming <-> emr,
# spearman <-> pearson): every metric a type computes reaches eval_runs.tsv.
OTHER_METRIC = _other_metrics()
EXTRA_STATS = ("mean", "std", "n")  # the table's columns per task and table_metrics metric


def other_metric(metric: str | None) -> str | None:
    """The ``metric_other`` of a run reporting ``metric`` (:data:`OTHER_METRIC`); None for an unknown metric."""
    return OTHER_METRIC.get(metric) if metric else None
TRIVIAL_ROW = "trivial"
TASK_STATS = ("mean", "std", "n", "delta", "p_welch", "p_paired", "p_wilcoxon", "trivial", "mdd")
TAIL_COLUMNS = ["macro_avg", "sign_wins", "sign_ties", "sign_p", "sign_groups_wins", "sign_groups_ties", "sign_groups_p"]
MDD_ALPHA, MDD_POWER = 0.05, 0.8


class MissingRunsError(RuntimeError):
    """Expected runs are missing or failed and the table may not publish them."""


def truncated_share(rec: dict) -> float:
    """The share of a record's test inputs cut at ``max_length`` (``data.truncated.test`` over
    ``data.model_inputs.test``, the fine-tune log's warning); NaN when the record does not say."""
    data = rec.get("data") or {}
    try:
        return float(data["truncated"]["test"]) / max(float(data["model_inputs"]["test"]), 1.0)
    except (KeyError, TypeError, ValueError):
        return math.nan


def truncation_note(runs: pd.DataFrame, share: float = TRUNCATION_NOTE_SHARE) -> str:
    """The notes' line naming each (model, task) whose test inputs were cut at ``max_length`` above ``share``
    (its ``tasks.{task}.max_length`` may hide what a longer context would score), or ""."""
    ok = runs[(runs["status"] == "ok") & (runs["truncated_share"].astype(float) > share)]
    cut = ok.groupby(["task", "model"], sort=False)["truncated_share"].max()
    if cut.empty:
        return ""
    parts = [f"`{t}` with `{m}` {v:.1%}" for (t, m), v in cut.items()]
    return (f"\nTest inputs cut at max_length (over {share:.0%}: raise tasks.<task>.max_length within the model's "
            "limit to keep them whole; NER counts words cut per window): " + "; ".join(parts) + "\n")


def rescored_metrics(path: str | Path, rec: dict, task_data) -> tuple[dict, bool, str | None]:
    """The test metrics of an ``ok`` record as its saved predictions give them
    (:func:`clmdetour.evaluation.rescore.rescore_record`; the saved gold checked against ``task_data`` when given).

    Returns:
        ``(metrics, rescored, problem)``: the recomputed metrics and True; the record's own metrics and False for
        a record written before predictions were saved; or the record's metrics and a problem when the
        predictions do not give them (the run is then not counted).
    """
    from clmdetour.evaluation.rescore import rescore_record

    if rec.get("predictions") is None:
        return rec.get("metrics") or {}, False, None
    r = rescore_record(path, tasks_root=None, task_data=task_data)
    if r.problems:
        return rec.get("metrics") or {}, False, "; ".join(r.problems[:3])
    return r.recomputed["test"], True, None


def load_runs(expected: Iterable[tuple[str, str, int]], paths: Mapping[tuple[str, str, int], str | Path],
              extra_metrics: Mapping[str, Sequence[str]] | None = None,
              task_dirs: Mapping[str, str | Path] | None = None) -> pd.DataFrame:
    """One row per expected run, read from its JSON record when there is one; an ``ok`` run's scores are
    those its saved predictions give (:func:`rescored_metrics`, ``rescored`` True), and a run whose predictions
    do not give its record's scores is ``status: differs`` (left out, its error naming the file).

    Args:
        expected: every (model, task, seed) of the grid, in table order.
        paths: the record path of each run that has one (others are ``missing``).
        extra_metrics: ``{task: [metric, ...]}`` (``tasks.{task}.table_metrics``): one more
            column ``score_{metric}`` per metric named, filled for that task's ``ok`` runs from
            the record's test ``metrics`` (NaN when the record lacks it).
        task_dirs: ``{task: results/tasks/{task}}``: the saved gold is checked against the task's.

    Returns:
        A DataFrame with ``RUN_COLUMNS`` (then the ``score_{metric}`` columns); ``score`` is the
        record's ``metric``, ``score_other`` the type's other metric (:func:`other_metric`) when
        the record has it.

    Raises:
        ValueError: a record's model, task or seed differs from its path's, or
            an ``ok`` record lacks its metric (the message names the file).
    """
    from clmdetour.tasks.contract import load_task_data

    extra_cols = list(dict.fromkeys(f"score_{m}" for ms in (extra_metrics or {}).values() for m in ms))
    tasks_read: dict = {}

    def task_data(task: str):
        if task not in tasks_read:
            folder = (task_dirs or {}).get(task)
            tasks_read[task] = load_task_data(folder, task) if folder and Path(folder).exists() else None
        return tasks_read[task]

    rows = []
    for model, task, seed in expected:
        row = dict.fromkeys(RUN_COLUMNS + extra_cols, math.nan)
        row.update(dict.fromkeys(RUN_COLUMNS))
        row.update(model=model, task=task, seed=int(seed), status="missing", score=math.nan, score_other=math.nan)
        path = paths.get((model, task, seed))
        if path is not None and Path(path).exists():
            rec = read_json(path)
            for key, want in (("model", model), ("task", task), ("seed", int(seed))):
                if rec.get(key) != want:
                    raise InputError(f"{path}: {key} is {rec.get(key)!r}, expected {want!r}")
            row.update(path=str(path), status=rec.get("status", "ok"), metric=rec.get("metric"),
                       wall_time_s=rec.get("wall_time_s"), error=rec.get("error"), truncated_share=truncated_share(rec))
            if row["status"] == "ok":
                metrics, row["rescored"], problem = rescored_metrics(path, rec, task_data(task))
                if problem:
                    log.warning("%s: not counted: %s", path, problem)
                    row.update(status="differs", error=f"its saved predictions do not give its scores: {problem}")
                    rows.append(row)
                    continue
                if rec.get("metric") not in metrics:
                    raise InputError(f"{path}: metrics lack the task metric {rec.get('metric')!r}")
                row.update(score=float(metrics[rec["metric"]]), dev_metric=rec.get("dev_metric"), best_epoch=rec.get("best_epoch"))
                other = other_metric(rec["metric"])
                if other is not None:
                    row["metric_other"] = other
                    row["score_other"] = float(metrics[other]) if metrics.get(other) is not None else math.nan
                for m in (extra_metrics or {}).get(task, ()):
                    row[f"score_{m}"] = float(metrics[m]) if metrics.get(m) is not None else math.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=RUN_COLUMNS + extra_cols)


def rescore_note(runs: pd.DataFrame) -> str:
    """The table's note on where its scores come from: how many runs were recomputed from their saved
    predictions (``python -m clmdetour.evaluation.rescore``), kept from records without them, or left out
    because their predictions do not give their scores."""
    ok = runs[runs["status"] == "ok"]
    rescored = int(ok["rescored"].eq(True).sum())  # a column of True / False / None
    kept = len(ok) - rescored
    differs = runs[runs["status"] == "differs"]
    line = (f"Scores: {rescored} of {len(ok)} runs recomputed from their saved predictions and the task's gold "
            "(`python -m clmdetour.evaluation.rescore results/eval` does the same by hand)")
    if kept:
        line += f"; {kept} from records written before predictions were saved (not recomputable: rerun them)"
    if len(differs):
        line += (f"; {len(differs)} left out, their predictions not giving their recorded scores: "
                 + ", ".join(str(p) for p in differs["path"].head(3)))
    return line + "."


def diverged_note(runs: pd.DataFrame) -> str:
    """The notes' line naming the runs whose training loss diverged at every learning rate of the grid (their
    cells are empty, never the 0.0 such a run scores), or ""."""
    bad = runs[runs["status"] == "diverged"]
    if bad.empty:
        return ""
    shown = ", ".join(f"{r.model}/{r.task}/seed{r.seed}" for r in bad.head(10).itertuples())
    return (f"\nDiverged at every learning rate of the grid (training loss not finite or rising; left out, not "
            f"scored 0): {len(bad)} run(s): {shown}{' ...' if len(bad) > 10 else ''}.\n")


def check_complete(runs: pd.DataFrame, allow_missing: bool) -> None:
    """Refuse incomplete results unless ``allow_missing``.

    Raises:
        MissingRunsError: one line with the number of missing / failed runs and the first few.
    """
    bad = runs[runs["status"] != "ok"]
    if bad.empty or allow_missing:
        return
    shown = "; ".join(f"{r.model}/{r.task}/seed{r.seed} {r.status}" + (f" ({r.error})" if isinstance(r.error, str) else "")
                      for r in bad.head(5).itertuples())
    raise MissingRunsError(
        f"{len(bad)} of {len(runs)} runs are missing or failed ({shown}{' ...' if len(bad) > 5 else ''}); "
        "rerun them (delete a failed record to retry it) or set evaluation.allow_missing: true to publish a table with missing cells")


def _mean(x: Sequence[float]) -> float:
    return float(sum(x) / len(x)) if len(x) else math.nan


def _nan(x) -> bool:
    return x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x))


def group_deltas(deltas: Mapping[str, float], groups: Sequence[Sequence[str]]) -> list[float]:
    """Per group, the mean of its tasks' deltas (tasks without a delta left out; NaN when none has one)."""
    out = []
    for g in groups:
        vals = [deltas[t] for t in g if t in deltas and not _nan(deltas[t])]
        out.append(_mean(vals))
    return out


def build_table(runs: pd.DataFrame, models: Sequence[str], tasks: Sequence[str], baseline: str, *,
                tie_tolerance: float, trivial: Mapping[str, float] | None = None,
                groups: Sequence[Sequence[str]] | None = None,
                extra_metrics: Mapping[str, Sequence[str]] | None = None) -> pd.DataFrame:
    """The numeric table (columns as in the module doc), one row per model then the ``trivial`` row.

    Args:
        runs: :func:`load_runs` output.
        models: model rows, in order; ``baseline`` must be one of them.
        tasks: task columns, in order.
        baseline: the model every test compares against.
        tie_tolerance: |delta| below this is a tie in both sign tests (fraction units).
        trivial: ``{task: trivial test score}``; a task without one gets NaN.
        groups: tasks that share documents (:func:`clmdetour.evaluation.task_groups.document_groups`);
            None = every task its own group.
        extra_metrics: ``{task: [metric, ...]}`` (``tasks.{task}.table_metrics``): per task and
            metric, the mean, sample std and count over seeds of the runs' ``score_{metric}``
            (:func:`load_runs` with the same mapping), in columns after the sign tests.

    Returns:
        A DataFrame; scores are fractions, counts are ``Int64``, undefined values NaN / NA.

    Raises:
        ValueError: ``baseline`` is not one of ``models``, a model is named ``trivial``,
            or ``groups`` does not partition ``tasks``.
    """
    if baseline not in models:
        raise InputError(f"baseline {baseline!r} is not among the models {list(models)}")
    if TRIVIAL_ROW in models:
        raise InputError(f"a model may not be named {TRIVIAL_ROW!r}: the table's last row is the trivial baseline")
    groups = [list(g) for g in groups] if groups is not None else [[t] for t in tasks]
    if sorted(t for g in groups for t in g) != sorted(tasks):
        raise InputError(f"document groups {groups} do not partition the tasks {list(tasks)}")
    trivial = dict(trivial or {})
    ok = runs[runs["status"] == "ok"]
    by_seed = {(m, t): dict(zip(sub["seed"].astype(int), sub["score"].astype(float)))
               for (m, t), sub in ok.groupby(["model", "task"])}

    rows = []
    for m in models:
        row: dict = {"model": m}
        deltas: dict[str, float] = {}
        for t in tasks:
            sd, bd = by_seed.get((m, t), {}), by_seed.get((baseline, t), {})
            s, b = [sd[k] for k in sorted(sd)], [bd[k] for k in sorted(bd)]
            common = sorted(set(sd) & set(bd))
            ps, pb = [sd[k] for k in common], [bd[k] for k in common]
            row[f"{t}_mean"] = _mean(s)
            row[f"{t}_std"] = float(pd.Series(s).std(ddof=1)) if len(s) >= 2 else math.nan
            row[f"{t}_n"] = len(s)
            row[f"{t}_delta"] = _mean(s) - _mean(b) if s and b else math.nan
            other = m != baseline
            row[f"{t}_p_welch"] = welch_p(s, b) if other else math.nan
            row[f"{t}_p_paired"] = paired_p(ps, pb) if other else math.nan
            row[f"{t}_p_wilcoxon"] = wilcoxon_p(ps, pb) if other else math.nan
            row[f"{t}_trivial"] = float(trivial.get(t, math.nan))
            row[f"{t}_mdd"] = min_detectable_difference(s, b, MDD_ALPHA, MDD_POWER) if len(s) >= 2 and len(b) >= 2 else math.nan
            deltas[t] = row[f"{t}_delta"]
        means = [row[f"{t}_mean"] for t in tasks]
        row["macro_avg"] = _mean(means) if tasks and not any(math.isnan(x) for x in means) else math.nan
        if m == baseline:
            row.update(sign_wins=pd.NA, sign_ties=pd.NA, sign_p=math.nan,
                       sign_groups_wins=pd.NA, sign_groups_ties=pd.NA, sign_groups_p=math.nan)
        else:
            st = sign_test(list(deltas.values()), tie_tolerance)
            sg = sign_test(group_deltas(deltas, groups), tie_tolerance)
            row.update(sign_wins=st.wins, sign_ties=st.ties, sign_p=st.p,
                       sign_groups_wins=sg.wins, sign_groups_ties=sg.ties, sign_groups_p=sg.p)
        row.update(_extra_cells(ok, m, extra_metrics))
        rows.append(row)
    extra_n = [f"{t}_{m}_n" for t, ms in (extra_metrics or {}).items() for m in ms]
    counts = [f"{t}_n" for t in tasks] + ["sign_wins", "sign_ties", "sign_groups_wins", "sign_groups_ties"] + extra_n
    triv = {col: math.nan for col in table_columns(tasks, extra_metrics)}
    triv.update({"model": TRIVIAL_ROW, **{f"{t}_mean": float(trivial.get(t, math.nan)) for t in tasks}})
    triv.update(dict.fromkeys(counts, pd.NA))
    rows.append(triv)
    table = pd.DataFrame(rows)
    for col in counts:
        table[col] = table[col].astype("Int64")
    return table[table_columns(tasks, extra_metrics)]


def _extra_cells(ok: pd.DataFrame, model: str, extra_metrics: Mapping[str, Sequence[str]] | None) -> dict:
    """A model's ``{task}_{metric}_{mean,std,n}`` cells for the ``table_metrics`` of each task."""
    cells: dict = {}
    for t, ms in (extra_metrics or {}).items():
        sub = ok[(ok["model"] == model) & (ok["task"] == t)]
        for m in ms:
            col = f"score_{m}"
            vals = [float(v) for v in sub.get(col, []) if not _nan(v)]
            cells[f"{t}_{m}_mean"] = _mean(vals)
            cells[f"{t}_{m}_std"] = float(pd.Series(vals).std(ddof=1)) if len(vals) >= 2 else math.nan
            cells[f"{t}_{m}_n"] = len(vals)
    return cells


def table_columns(tasks: Sequence[str], extra_metrics: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """The table's columns, in the order of the module docstring (the ``table_metrics`` columns last, only
    for the tasks of ``extra_metrics``)."""
    cols = ["model"]
    for t in tasks:
        cols += [f"{t}_{k}" for k in TASK_STATS]
    extra = [f"{t}_{m}_{k}" for t, ms in (extra_metrics or {}).items() for m in ms for k in EXTRA_STATS]
    return cols + list(TAIL_COLUMNS) + extra


def _groups_note(groups: Sequence[Sequence[str]]) -> str:
    shared = [g for g in groups if len(g) > 1]
    if not shared:
        return "No tasks share documents: each task is its own group."
    names = "; ".join(" + ".join(f"`{t}`" for t in g) for g in shared)
    return (f"Tasks that share documents (read from the task manifests), counted once by their mean difference in "
            f"the group sign test: {names}; {len(groups)} groups in all.")


def conflicting_label_counts(manifests: Mapping[str, dict | None]) -> dict[str, int]:
    """``{task: texts with conflicting labels}`` from task manifests (``conflicting_labels.texts``,
    :func:`clmdetour.tasks.checks.check_conflicting_labels`), for the tasks that have any, in
    the order given; a manifest without the section (None, or written before it existed) is left out.

    Raises:
        InputError: a ``conflicting_labels.texts`` that is not a whole number >= 0 (names the task).
    """
    out = {}
    for task, man in manifests.items():
        section = (man or {}).get("conflicting_labels")
        if not isinstance(section, dict):
            continue
        n = section.get("texts")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InputError(f"task {task}: manifest conflicting_labels.texts is {n!r}, not a count")
        if n:
            out[task] = n
    return out


def conflicting_labels_note(counts: Mapping[str, int]) -> str:
    """The notes' sentence naming the tasks with conflicting-label texts and their counts; '' when none."""
    if not counts:
        return ""
    named = ", ".join(f"`{t}` {n}" for t, n in counts.items())
    return (f"Texts with conflicting labels (the same normalised text with different labels, within a split or "
            f"across splits; counted in each task's manifest, `conflicting_labels`): {named}.")


def averaging_note(task_types: Mapping[str, str], task_metrics: Mapping[str, str] | None = None) -> str:
    """One sentence per task type of the grid and metric: how its score is averaged (the type's
    ``averaging`` wording, or its ``other_averaging`` one for a task whose ``metric`` is not the type's
    default, :mod:`clmdetour.tasktypes`), naming the tasks; '' without types.

    Args:
        task_types: ``{task: type name}``.
        task_metrics: ``{task: metric}`` (``tasks.{task}.metric``); a task not named, or with metric None, reports its type's default.
    """
    from clmdetour.tasktypes import get_task_type

    by_kind: dict[tuple[str, str], list[str]] = {}
    for task, name in task_types.items():
        wording = get_task_type(name).averaging_for((task_metrics or {}).get(task))
        by_kind.setdefault((name, wording), []).append(task)
    return " ".join(f"{name} ({', '.join(f'`{t}`' for t in ts)}): {wording}."
                    for (name, wording), ts in sorted(by_kind.items()))


def trivial_note(task_types: Mapping[str, str] | None = None) -> str:
    """The trivial row's rule per task type, from each type's ``trivial_rule`` (:mod:`clmdetour.tasktypes`):
    ``"multiclass: ...; multiple_choice: ..."`` for the types of ``task_types`` (``{task: type name}``),
    in registry order; every registered type when ``task_types`` is empty or None."""
    from clmdetour.tasktypes import TASK_TYPES

    present = set((task_types or {}).values())
    names = [n for n in TASK_TYPES if n in present] or list(TASK_TYPES)
    return "; ".join(f"{n}: {TASK_TYPES[n].trivial_rule}" for n in names)


def extra_metrics_lines(table: pd.DataFrame, extra_metrics: Mapping[str, Sequence[str]], fmt_num) -> str:
    """The Markdown table of the ``table_metrics`` columns (one column per task and metric, mean ± std
    per model); '' when no task lists any."""
    cols = [(t, m) for t, ms in extra_metrics.items() for m in ms]
    if not cols:
        return ""
    lines = ["| model | " + " | ".join(f"{t} {m}" for t, m in cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for r in table.to_dict("records"):
        if r["model"] == TRIVIAL_ROW:
            continue
        cells = [fmt_num(r[f"{t}_{m}_mean"]) + ("" if _nan(r[f"{t}_{m}_std"]) else f" ± {fmt_num(r[f'{t}_{m}_std'])}")
                 for t, m in cols]
        lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    return ("\nOther metrics of the same runs (`tasks.<task>.table_metrics`; mean ± sample std over seeds):\n\n"
            + "\n".join(lines) + "\n")


class _Cells:
    """How the Markdown tables write a score (x ``scale``) and a p-value."""

    def __init__(self, scale: float):
        self.scale = scale

    def num(self, x, digits=1, empty="missing"):
        return empty if _nan(x) else f"{x * self.scale:.{digits}f}"

    @staticmethod
    def pval(x):
        return "" if _nan(x) else f"{x:.4f}" if x >= 1e-4 else f"{x:.1e}"


def _model_rows(r: dict, tasks: Sequence[str], baseline: str, expected_n: Mapping[str, int], fmt: _Cells,
                tie_tolerance: float) -> tuple[str, list[str]]:
    """One model's line of the main table and its lines of the per-task tests table (none for the
    baseline and the trivial row)."""
    num, pval, scale = fmt.num, fmt.pval, fmt.scale
    if r["model"] == TRIVIAL_ROW:
        cells = [TRIVIAL_ROW] + [num(r[f"{t}_mean"], empty="") for t in tasks] + [""] * 5
        return "| " + " | ".join(cells) + " |", []
    cells, test_lines = [r["model"]], []
    for t in tasks:
        n, k = (0 if _nan(r[f"{t}_n"]) else int(r[f"{t}_n"])), expected_n.get(t, 0)
        if n == 0:
            cells.append("missing")
            continue
        cell = num(r[f"{t}_mean"]) + ("" if _nan(r[f"{t}_std"]) else f" ± {num(r[f'{t}_std'])}")
        if r["model"] != baseline and not _nan(r[f"{t}_delta"]):
            cell += f" ({r[f'{t}_delta'] * scale:+.1f})"
        if n < k:
            cell += f" (n={n}/{k})"
        cells.append(cell)
        if r["model"] != baseline:
            d = r[f"{t}_delta"]
            d_text = "" if _nan(d) else f"{d * scale:+.2f}" + (" (tie)" if abs(d) < tie_tolerance or d == 0 else "")
            test_lines.append(f"| {r['model']} | {t} | {n} | {d_text} | {pval(r[f'{t}_p_paired'])} | "
                              f"{pval(r[f'{t}_p_wilcoxon'])} | {pval(r[f'{t}_p_welch'])} | "
                              f"{num(r[f'{t}_mdd'], 2, empty='n/a')} |")
    cells.append(num(r["macro_avg"]))
    if r["model"] == baseline:
        cells += ["baseline", "", "baseline", ""]
    else:
        cells += [f"{r['sign_wins']} / {r['sign_ties']}", pval(r["sign_p"]),
                  f"{r['sign_groups_wins']} / {r['sign_groups_ties']}", pval(r["sign_groups_p"])]
    return "| " + " | ".join(str(c) for c in cells) + " |", test_lines


def markdown_table(table: pd.DataFrame, tasks: Sequence[str], baseline: str, expected_n: Mapping[str, int],
                   scale: float = 100.0, *, groups: Sequence[Sequence[str]] | None = None,
                   tie_tolerance: float, left_out: Mapping[str, str] | None = None,
                   task_types: Mapping[str, str] | None = None,
                   task_metrics: Mapping[str, str] | None = None,
                   conflicting_labels: Mapping[str, int] | None = None,
                   extra_metrics: Mapping[str, Sequence[str]] | None = None) -> str:
    """A Markdown version for the README and model card, scores x ``scale``.

    Main table: per model and task mean ± std and, in parentheses, the
    difference to ``baseline``; a cell with fewer seeds than expected shows
    ``(n=k/K)``, an empty cell ``missing``; then the macro average and both
    sign tests; the ``trivial`` row gives each task's trivial score. Second
    table: per model and task the paired, Wilcoxon and Welch p-values (empty
    when undefined) and the MDD (``n/a`` when undefined). Notes name the
    document groups, the definitions and the tasks left out of the grid
    (``left_out``: ``{task: why}``, e.g. user-provided files missing;
    :func:`clmdetour.tasks.spec.left_out_tasks`) and, when any, the tasks whose data
    hold texts with conflicting labels (``conflicting_labels``: ``{task: texts}``,
    :func:`conflicting_label_counts`; tasks with 0 are not named). ``task_metrics`` (``{task: metric}``)
    words the averaging note of a task whose metric is not its type's default. The trivial row's rule is
    worded per type of ``task_types`` (:func:`trivial_note`); ``extra_metrics`` (``{task: [metric]}``,
    ``tasks.{task}.table_metrics``) adds :func:`extra_metrics_lines` after the notes.
    """
    groups = [list(g) for g in groups] if groups is not None else [[t] for t in tasks]
    head = ["model"] + list(tasks) + ["macro avg", "wins / ties", "sign p", "group wins / ties", "group sign p"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    test_lines = ["| model | task | seeds | Δ | p paired | p Wilcoxon | p Welch | MDD |", "|---|---|---|---|---|---|---|---|"]
    for r in table.to_dict("records"):
        row, tests_of_row = _model_rows(r, tasks, baseline, expected_n, _Cells(scale), tie_tolerance)
        lines.append(row)
        test_lines += tests_of_row
    note = (
        f"\nScores x {scale:g} (mean ± sample std over fine-tuning seeds); in parentheses the difference to "
        f"`{baseline}`. `{TRIVIAL_ROW}`: each task's best constant predictor, chosen on train and scored on test "
        f"({trivial_note(task_types)}). "
        f"Sign tests: one-sided exact binomial test against `{baseline}` over tasks, then over groups of tasks "
        f"that share documents; a difference under {tie_tolerance * scale:g} points is a tie (dropped). "
        + _groups_note(groups) + "\n"
    )
    if task_types:
        note += "\nHow each score is averaged: " + averaging_note(task_types, task_metrics) + "\n"
    conflicts = conflicting_labels_note({t: n for t, n in (conflicting_labels or {}).items() if n})
    if conflicts:
        note += "\n" + conflicts + "\n"
    note += extra_metrics_lines(table, extra_metrics or {}, _Cells(scale).num)
    if left_out:
        note += (f"\nLeft out of this table ({len(left_out)} configured task(s) not evaluated): "
                 + "; ".join(f"`{t}`: {why}" for t, why in left_out.items()) + "\n")
    tests = (
        f"\nPer-task tests against `{baseline}` (two-sided): paired t-test by seed, Wilcoxon signed-rank "
        f"(from {WILCOXON_MIN_N} non-zero differences), Welch; an empty p is an undefined test (constant "
        f"scores or differences, or too few seeds). Δ and MDD x {scale:g}; MDD = smallest difference a "
        f"two-sample t-test detects at α = {MDD_ALPHA:g} with power {MDD_POWER:g} given the pooled seed "
        "spread, n/a when the seeds show no spread.\n\n"
    )
    body = "\n".join(lines) + "\n" + note
    if len(test_lines) > 2:
        body += tests + "\n".join(test_lines) + "\n"
    return body


def task_trivial_scores(tasks: Sequence[str], task_dirs: Mapping[str, str | Path],
                        metrics: Mapping[str, str] | None = None) -> dict[str, float]:
    """Each task's trivial test score (:func:`clmdetour.evaluation.trivial.trivial_baseline`); a task whose folder is absent is left out (warned).

    Raises:
        clmdetour.tasks.contract.TaskDataError: a task folder that exists but cannot be read (names the file).
    """
    from clmdetour.evaluation.trivial import trivial_baseline

    out = {}
    for t in tasks:
        folder = task_dirs.get(t)
        if folder is None or not Path(folder).is_dir():
            log.warning("task %s: no task folder (%s); its trivial baseline is left empty", t, folder)
            continue
        res = trivial_baseline(folder, t, (metrics or {}).get(t))
        log.info("task %s: trivial baseline %s, %s %.4f on test (%.4f on train)", t, res.prediction, res.metric,
                 res.score, res.train_score)
        out[t] = res.score
    return out


def shown_metrics(runs: pd.DataFrame, tasks: Sequence[str], task_metrics: Mapping[str, str] | None,
                  extra_metrics: Mapping[str, Sequence[str]] | None) -> dict[str, list[str]]:
    """Per task, the metrics the table shows: its metric (the records', else the config's), the type's other
    metric when recorded, and ``tasks.{task}.table_metrics``; in that order, without repeats."""
    out = {}
    for t in tasks:
        mine = runs[runs["task"] == t]
        first = mine["metric"].dropna().tolist()[:1] or [m for m in [(task_metrics or {}).get(t)] if m]
        other = mine["metric_other"].dropna().tolist()[:1]
        out[t] = list(dict.fromkeys([*first, *other, *(extra_metrics or {}).get(t, [])]))
    return out


def trivial_baselines_note(tasks: Sequence[str], task_dirs: Mapping[str, str | Path],
                           metrics: Mapping[str, Sequence[str]], scale: float) -> str:
    """The notes' line of every table metric's trivial baselines, per task (``metrics``: ``{task: [metric]}``,
    the metrics its columns show): ``task: metric x (rule); ...``; tasks without a folder are left out."""
    from clmdetour.evaluation.trivial import trivial_baselines

    parts = []
    for t in tasks:
        folder = task_dirs.get(t)
        if folder is None or not Path(folder).is_dir() or not metrics.get(t):
            continue
        cells = [f"{m} {'n/a' if _nan(v) else f'{v * scale:.1f}'} ({rule})"
                 for m, rule, v in trivial_baselines(folder, t, list(metrics[t]))]
        parts.append(f"`{t}`: " + "; ".join(cells))
    if not parts:
        return ""
    return ("\nTrivial baselines of every table metric (test, x " f"{scale:g}; a model at or under one of these "
            "has not learned the task): " + " | ".join(parts) + "\n")


def positive_control(table: pd.DataFrame, tasks: Sequence[str], treated: str, control: str,
                     tolerance: float) -> tuple[int, int, int, float]:
    """Wins, ties and losses of ``treated`` over ``control`` across tasks, and the sign test's p.

    The positive control: a pipeline that can detect pretraining
    shows the pretrained ``treated`` model (``mlm-baseline``) ahead of the
    untrained ``control`` (``random-init``). Per task, ``d`` = treated mean
    minus control mean (fractions in [0, 1]); a win is ``d >= tolerance``, a
    loss ``d <= -tolerance``, anything else (or a missing mean) a tie, as in
    :func:`clmdetour.evaluation.stats.sign_test`, whose one-sided exact p (binomial, 0.5,
    ties dropped) is ``p``: 8 wins of 8 gives 0.0039, 7 of 8 with one loss
    9/256 = 0.0352; NaN when there is no win or loss.

    Raises:
        ValueError: ``treated`` or ``control`` is not a row of ``table``.
    """
    rows = {r["model"]: r for r in table.to_dict("records")}
    for m in (treated, control):
        if m not in rows:
            raise InputError(f"positive control: model {m!r} is not in the table {sorted(rows)}")
    res = sign_test([rows[treated][f"{t}_mean"] - rows[control][f"{t}_mean"] for t in tasks], tolerance)
    return res.wins, len(tasks) - res.wins - res.losses, res.losses, res.p


def positive_control_line(table: pd.DataFrame, tasks: Sequence[str], treated: str, control: str,
                          tolerance: float) -> str:
    """The last line of ``eval_table.md``: ``positive control: T vs C: W wins / T ties / L losses, sign p = ...``.

    Counts and p from :func:`positive_control`; ``p`` printed with 4 decimals (``nan`` when undefined).
    """
    w, t, l, p = positive_control(table, tasks, treated, control, tolerance)
    return f"positive control: {treated} vs {control}: {w} wins / {t} ties / {l} losses, sign p = {p:.4f}"


def write_eval_tables(*, expected: Sequence[tuple[str, str, int]], paths: Mapping[tuple[str, str, int], str | Path],
                      models: Sequence[str], tasks: Sequence[str], baseline: str, allow_missing: bool,
                      runs_tsv: str | Path, table_tsv: str | Path, table_md: str | Path, scale: float = 100.0,
                      tie_tolerance: float, task_dirs: Mapping[str, str | Path] | None = None,
                      task_metrics: Mapping[str, str] | None = None,
                      left_out: Mapping[str, str] | None = None, control: str | None = None,
                      extra_metrics: Mapping[str, Sequence[str]] | None = None,
                      ranking_tsv: str | Path | None = None) -> pd.DataFrame:
    """Read the records, check completeness, and write the outputs atomically (``eval_runs.tsv``,
    ``eval_table.tsv``, ``eval_table.md`` and, with ``ranking_tsv``, the across-task ranking:
    :mod:`clmdetour.evaluation.ranking`, also a section of the ``.md``).

    When ``control`` (the untrained ``random-init`` model) is in ``models``, the
    Markdown ends with :func:`positive_control_line` of ``baseline`` against it,
    with ties within ``tie_tolerance`` (fraction units).

    ``eval_runs.tsv`` is written first, even when the check fails, so the
    missing runs can be inspected.

    Args:
        task_dirs: ``{task: results/tasks/{task}}`` for the trivial baseline,
            the document groups and the conflicting-labels note (from the
            manifests); a task without a folder gets an empty trivial cell and its
            own group.
        task_metrics: ``{task: metric}`` of the config (``tasks.{task}.metric``)
            for the trivial baseline; default the task's ``labels.json``.
        left_out: ``{task: why}`` of configured tasks left out of the grid, named
            in the ``.md`` notes (the TSV stays purely numeric).
        extra_metrics: ``{task: [metric, ...]}`` of the config (``tasks.{task}.table_metrics``): more
            columns in all three outputs (:func:`load_runs`, :func:`build_table`); None or empty:
            none, the outputs as without the key.

    Raises:
        MissingRunsError: runs are missing or failed and ``allow_missing`` is false.
        ValueError: a record or task manifest that cannot be used (names the file).
    """
    from clmdetour.evaluation.task_groups import document_groups, read_manifests

    extra_metrics = {t: list(ms) for t, ms in (extra_metrics or {}).items() if ms and t in tasks}
    task_dirs = dict(task_dirs or {})
    runs = load_runs(expected, paths, extra_metrics, task_dirs)
    atomic_write_text(runs_tsv, runs.to_csv(sep="\t", index=False, na_rep="", float_format="%.6g"))
    check_complete(runs, allow_missing)
    trivial = task_trivial_scores(tasks, task_dirs, task_metrics)
    manifests = read_manifests({t: task_dirs[t] for t in tasks if t in task_dirs})
    groups = document_groups(list(tasks), manifests)
    for g in groups:
        if len(g) > 1:
            log.info("tasks sharing documents (one group in the group sign test): %s", ", ".join(g))
    table = build_table(runs, models, tasks, baseline, tie_tolerance=tie_tolerance, trivial=trivial, groups=groups,
                        extra_metrics=extra_metrics)
    atomic_write_text(table_tsv, table.to_csv(sep="\t", index=False, na_rep="", float_format="%.6g"))
    expected_n = {t: len({s for (m, tt, s) in expected if tt == t and m == models[0]}) for t in tasks}
    types = {t: read_json(Path(task_dirs[t]) / "labels.json")["type"] for t in tasks
             if t in task_dirs and (Path(task_dirs[t]) / "labels.json").exists()}
    md = markdown_table(table, tasks, baseline, expected_n, scale, groups=groups, tie_tolerance=tie_tolerance,
                        left_out=left_out, task_types=types, task_metrics=task_metrics,
                        conflicting_labels=conflicting_label_counts(manifests), extra_metrics=extra_metrics)
    shown = shown_metrics(runs, tasks, task_metrics, extra_metrics)
    md += trivial_baselines_note(tasks, task_dirs, shown, scale)
    md += truncation_note(runs) + diverged_note(runs)
    md += "\n" + rescore_note(runs) + "\n"
    from clmdetour.evaluation import ranking as across

    ranking, wins = across.across_tasks(runs, list(models), trivial)
    md += across.ranking_markdown(ranking, wins, scale)
    if ranking_tsv is not None:
        atomic_write_text(ranking_tsv, across.ranking_tsv(ranking, wins))
    if control is not None and control in models and control != baseline:
        md += "\n" + positive_control_line(table, tasks, baseline, control, tie_tolerance) + "\n"
    atomic_write_text(table_md, md)
    return table
