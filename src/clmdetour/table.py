"""Aggregate fine-tuning runs into the results table (DESIGN.md Contracts).

- ``results/eval_runs.tsv``: one row per expected (model, task, seed) with its
  ``status``: ``ok``, ``failed`` (the run wrote a failed record) or
  ``missing`` (no record); only ``ok`` rows have a score.
- ``results/eval_table.tsv``: ``model``, then per task ``{task}_mean``,
  ``{task}_std`` (sample std, ddof=1, over seeds), ``{task}_n`` (seeds with a
  score), ``{task}_delta`` (mean minus the baseline's mean), ``{task}_p_welch``
  (:func:`clmdetour.stats.welch_p` against the baseline's seeds), then
  ``macro_avg`` (mean of the task means; missing unless every task has a
  mean), ``sign_wins``, ``sign_ties``, ``sign_p`` (:func:`clmdetour.stats.sign_test`
  over tasks). Scores are fractions in [0, 1]; an undefined or missing value
  is an empty cell, never a number.
- ``results/eval_table.md``: the same x ``report_scale`` (100) with ±.

Missing or failed runs make :func:`check_complete` raise, unless the caller
allows missing runs (``evaluation.allow_missing``); then the cells are
computed from the seeds that exist and ``n`` says how many.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import pandas as pd

from clmdetour.io import atomic_write_text, read_json
from clmdetour.stats import sign_test, welch_p

RUN_COLUMNS = ["model", "task", "seed", "status", "metric", "score", "dev_metric", "best_epoch", "wall_time_s", "error", "path"]


class MissingRunsError(RuntimeError):
    """Expected runs are missing or failed and the table may not publish them."""


def load_runs(expected: Iterable[tuple[str, str, int]], paths: Mapping[tuple[str, str, int], str | Path]) -> pd.DataFrame:
    """One row per expected run, read from its JSON record when there is one.

    Args:
        expected: every (model, task, seed) of the grid, in table order.
        paths: the record path of each run that has one (others are ``missing``).

    Returns:
        A DataFrame with ``RUN_COLUMNS``.

    Raises:
        ValueError: a record's model, task or seed differs from its path's, or
            an ``ok`` record lacks its metric (the message names the file).
    """
    rows = []
    for model, task, seed in expected:
        row = dict.fromkeys(RUN_COLUMNS)
        row.update(model=model, task=task, seed=int(seed), status="missing", score=math.nan)
        path = paths.get((model, task, seed))
        if path is not None and Path(path).exists():
            rec = read_json(path)
            for key, want in (("model", model), ("task", task), ("seed", int(seed))):
                if rec.get(key) != want:
                    raise ValueError(f"{path}: {key} is {rec.get(key)!r}, expected {want!r}")
            row.update(path=str(path), status=rec.get("status", "ok"), metric=rec.get("metric"),
                       wall_time_s=rec.get("wall_time_s"), error=rec.get("error"))
            if row["status"] == "ok":
                metrics = rec.get("metrics") or {}
                if rec.get("metric") not in metrics:
                    raise ValueError(f"{path}: metrics lack the task metric {rec.get('metric')!r}")
                row.update(score=float(metrics[rec["metric"]]), dev_metric=rec.get("dev_metric"), best_epoch=rec.get("best_epoch"))
        rows.append(row)
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


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


def build_table(runs: pd.DataFrame, models: Sequence[str], tasks: Sequence[str], baseline: str) -> pd.DataFrame:
    """The numeric table (columns as in DESIGN.md), one row per model, fractions in [0, 1].

    Raises:
        ValueError: ``baseline`` is not one of ``models``.
    """
    if baseline not in models:
        raise ValueError(f"baseline {baseline!r} is not among the models {list(models)}")
    ok = runs[runs["status"] == "ok"]
    scores = {(m, t): ok[(ok["model"] == m) & (ok["task"] == t)].sort_values("seed")["score"].tolist()
              for m in models for t in tasks}

    def mean(x):
        return float(sum(x) / len(x)) if x else math.nan

    rows = []
    for m in models:
        row: dict = {"model": m}
        deltas = []
        for t in tasks:
            s, b = scores[(m, t)], scores[(baseline, t)]
            row[f"{t}_mean"] = mean(s)
            row[f"{t}_std"] = float(pd.Series(s).std(ddof=1)) if len(s) >= 2 else math.nan
            row[f"{t}_n"] = len(s)
            row[f"{t}_delta"] = mean(s) - mean(b) if s and b else math.nan
            row[f"{t}_p_welch"] = welch_p(s, b) if m != baseline else math.nan
            deltas.append(row[f"{t}_delta"])
        means = [row[f"{t}_mean"] for t in tasks]
        row["macro_avg"] = mean(means) if tasks and not any(math.isnan(x) for x in means) else math.nan
        if m == baseline:
            row.update(sign_wins=pd.NA, sign_ties=pd.NA, sign_p=math.nan)
        else:
            st = sign_test(deltas)
            row.update(sign_wins=st.wins, sign_ties=st.ties, sign_p=st.p)
        rows.append(row)
    table = pd.DataFrame(rows)
    for col in [f"{t}_n" for t in tasks] + ["sign_wins", "sign_ties"]:
        table[col] = table[col].astype("Int64")
    return table


def table_columns(tasks: Sequence[str]) -> list[str]:
    """The table's columns, in DESIGN.md order."""
    cols = ["model"]
    for t in tasks:
        cols += [f"{t}_mean", f"{t}_std", f"{t}_n", f"{t}_delta", f"{t}_p_welch"]
    return cols + ["macro_avg", "sign_wins", "sign_ties", "sign_p"]


def markdown_table(table: pd.DataFrame, tasks: Sequence[str], baseline: str, expected_n: Mapping[str, int],
                   scale: float = 100.0) -> str:
    """A Markdown version for the README and model card: mean ± std x ``scale``.

    A cell with fewer seeds than expected shows ``(n=k/K)``; an empty cell
    shows ``missing``. The last columns give the sign test against ``baseline``.
    """
    def num(x, digits=1):
        return "missing" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * scale:.{digits}f}"

    head = ["model"] + list(tasks) + ["macro avg", "wins / ties", "sign p"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.to_dict("records"):
        cells = [r["model"]]
        for t in tasks:
            n, k = int(r[f"{t}_n"]), expected_n.get(t, 0)
            if n == 0:
                cells.append("missing")
                continue
            cell = num(r[f"{t}_mean"]) + ("" if math.isnan(r[f"{t}_std"]) else f" ± {num(r[f'{t}_std'])}")
            if r["model"] != baseline and not math.isnan(r[f"{t}_delta"]):
                cell += f" ({r[f'{t}_delta'] * scale:+.1f})"
            if n < k:
                cell += f" (n={n}/{k})"
            cells.append(cell)
        cells.append(num(r["macro_avg"]))
        if r["model"] == baseline:
            cells += ["baseline", ""]
        else:
            wins, ties = r["sign_wins"], r["sign_ties"]
            cells.append(f"{wins} / {ties}")
            cells.append("" if math.isnan(r["sign_p"]) else f"{r['sign_p']:.4f}")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    note = (f"\nScores x {scale:g} (mean ± sample std over fine-tuning seeds); in parentheses the difference to "
            f"`{baseline}`. Sign test: one-sided exact binomial test over tasks against `{baseline}` (ties dropped).\n")
    return "\n".join(lines) + "\n" + note


def positive_control(table: pd.DataFrame, tasks: Sequence[str], treated: str, control: str,
                     tolerance: float) -> tuple[int, int, int, float]:
    """Wins, ties and losses of ``treated`` over ``control`` across tasks, and the sign test's p.

    The positive control of issue 16: a pipeline that can detect pretraining
    shows the pretrained ``treated`` model (``mlm-baseline``) ahead of the
    untrained ``control`` (``random-init``). Per task, ``d`` = treated mean
    minus control mean (fractions in [0, 1]); a win is ``d > tolerance``, a
    loss ``d < -tolerance``, anything else (or a missing mean) a tie.
    ``p`` is the one-sided exact sign test (binomial, 0.5) of the wins among
    wins + losses, ties dropped (Dixon & Mood 1946); 8 wins of 8 gives
    0.0039, 7 of 8 with one loss 9/256 = 0.0352; NaN when there is no win or loss.

    Raises:
        ValueError: ``treated`` or ``control`` is not a row of ``table``.
    """
    from scipy.stats import binomtest

    rows = {r["model"]: r for r in table.to_dict("records")}
    for m in (treated, control):
        if m not in rows:
            raise ValueError(f"positive control: model {m!r} is not in the table {sorted(rows)}")
    wins = losses = 0
    for t in tasks:
        d = rows[treated][f"{t}_mean"] - rows[control][f"{t}_mean"]
        if math.isnan(d):
            continue
        wins += d > tolerance
        losses += d < -tolerance
    ties = len(tasks) - wins - losses
    n = wins + losses
    p = float(binomtest(wins, n, 0.5, alternative="greater").pvalue) if n else math.nan
    return wins, ties, losses, p


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
                      control: str | None = None, tie_tolerance: float = 0.0005) -> pd.DataFrame:
    """Read the records, check completeness, and write the three outputs atomically.

    When ``control`` (the untrained ``random-init`` model) is in ``models``, the
    Markdown ends with :func:`positive_control_line` of ``baseline`` against it,
    with ties within ``tie_tolerance`` (fraction units).

    ``eval_runs.tsv`` is written first, even when the check fails, so the
    missing runs can be inspected.

    Raises:
        MissingRunsError: runs are missing or failed and ``allow_missing`` is false.
    """
    runs = load_runs(expected, paths)
    atomic_write_text(runs_tsv, runs.to_csv(sep="\t", index=False, na_rep="", float_format="%.6g"))
    check_complete(runs, allow_missing)
    table = build_table(runs, models, tasks, baseline)[table_columns(tasks)]
    atomic_write_text(table_tsv, table.to_csv(sep="\t", index=False, na_rep="", float_format="%.6g"))
    expected_n = {t: len({s for (m, tt, s) in expected if tt == t and m == models[0]}) for t in tasks}
    md = markdown_table(table, tasks, baseline, expected_n, scale)
    if control is not None and control in models and control != baseline:
        md += "\n" + positive_control_line(table, tasks, baseline, control, tie_tolerance) + "\n"
    atomic_write_text(table_md, md)
    return table
