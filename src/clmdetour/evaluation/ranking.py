"""Models compared across tasks: average rank, normalised mean, and a paired bootstrap win probability per pair
(docs/tasks.md, "Across tasks"; the aggregates of the DrBenchmark fork that goes with the DoctoBERT paper:
average rank and a normalised score, each pair's bootstrap win probability).

Inputs are the table's runs (``eval_runs.tsv``: one row per model, task and seed, ``status: ok`` counted), on the
tasks every compared model has at least one seed of. Scores are fractions; a model's task score is its mean
over seeds.

- **Average rank**: per task, models ranked by mean score (1 = best; ties share the average rank), averaged
  over the tasks.
- **Normalised mean**: per task ``(score - floor) / (best - floor)``, ``best`` the best model's mean on the
  task and ``floor`` its trivial baseline (:mod:`clmdetour.evaluation.trivial`; where undefined or above every
  model, the worst model's mean): 0 = the floor, 1 = the best model; averaged over tasks. It weighs tasks
  by how far above their floor the models spread, which raw means do not.
- **Win probability** ``P(A > B)``: a paired bootstrap over tasks and seeds (:data:`BOOTSTRAP_REPLICATES`
  replicates, seed :data:`BOOTSTRAP_SEED`): each replicate draws the tasks with replacement and, within each
  drawn task, each model's seeds with replacement, and compares the two models' mean over the drawn tasks of
  their mean over the drawn seeds; ``P`` counts the replicates where A's is higher (ties half). Assumptions:
  tasks are exchangeable draws from a population of tasks (the conclusion is about "a task like these"), seeds
  are independent within a task, and the models' seeds are not paired (seed ``n`` of A and of B share the
  split, not the randomness). With few tasks, ``P`` is coarse: 8 tasks give at most 8^8 task draws, and a task
  where one model always wins moves ``P`` a lot. It is a descriptive probability, not a p-value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

BOOTSTRAP_REPLICATES = 2000
BOOTSTRAP_SEED = 0


def task_scores(runs: pd.DataFrame, models: Sequence[str]) -> tuple[list[str], dict[str, dict[str, np.ndarray]]]:
    """The tasks every model of ``models`` has an ``ok`` run of, and ``{task: {model: seed scores}}``."""
    ok = runs[(runs["status"] == "ok") & runs["score"].notna()]
    scores: dict[str, dict[str, np.ndarray]] = {}
    for (task, model), g in ok.groupby(["task", "model"], sort=False):
        if model in models:
            scores.setdefault(task, {})[model] = g.sort_values("seed")["score"].to_numpy(dtype=np.float64)
    tasks = [t for t in dict.fromkeys(runs["task"]) if t in scores and all(m in scores[t] for m in models)]
    return tasks, scores


def _ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks of ``values``, 1 = highest, ties sharing their average rank."""
    return pd.Series(values).rank(ascending=False, method="average").to_numpy()


def across_tasks(runs: pd.DataFrame, models: Sequence[str], trivial: Mapping[str, float] | None = None,
                 replicates: int = BOOTSTRAP_REPLICATES, seed: int = BOOTSTRAP_SEED) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ranking (one row per model) and the pairwise win probabilities (``P[row beats column]``).

    Args:
        runs: :func:`clmdetour.evaluation.table.load_runs`'s frame.
        models: the models compared (table order).
        trivial: ``{task: trivial test score}``, the normalised mean's floor.

    Returns:
        ``(ranking, wins)``: ``ranking`` has ``model, tasks, average_rank, normalised_mean, mean_score``;
        ``wins`` is a ``models x models`` frame (NaN on the diagonal and when no task is shared).
    """
    tasks, scores = task_scores(runs, models)
    means = np.array([[scores[t][m].mean() for m in models] for t in tasks]).reshape(len(tasks), len(models))
    ranks = np.array([_ranks(row) for row in means]).reshape(len(tasks), len(models))
    normalised = np.full(means.shape, np.nan)
    for i, t in enumerate(tasks):
        best, worst = means[i].max(), means[i].min()
        floor = (trivial or {}).get(t, math.nan)
        if not (isinstance(floor, float) and math.isfinite(floor)) or floor >= best or floor > worst:
            floor = worst
        if best > floor:
            normalised[i] = (means[i] - floor) / (best - floor)
    ranking = pd.DataFrame({
        "model": list(models), "tasks": len(tasks),
        "average_rank": ranks.mean(axis=0) if tasks else np.nan,
        "normalised_mean": np.nanmean(normalised, axis=0) if tasks and not np.isnan(normalised).all() else np.nan,
        "mean_score": means.mean(axis=0) if tasks else np.nan})
    wins = pd.DataFrame(np.nan, index=list(models), columns=list(models))
    if tasks:
        boot = _bootstrap_means(tasks, scores, models, replicates, seed)  # [replicates, models]
        for a, ma in enumerate(models):
            for b, mb in enumerate(models):
                if a != b:
                    wins.loc[ma, mb] = float(np.mean((boot[:, a] > boot[:, b]) + 0.5 * (boot[:, a] == boot[:, b])))
    return ranking, wins


def _bootstrap_means(tasks: list[str], scores: dict, models: Sequence[str], replicates: int, seed: int) -> np.ndarray:
    """``[replicates, models]``: each replicate's mean over drawn tasks of each model's mean over drawn seeds."""
    rng = np.random.default_rng(seed)
    drawn_tasks = rng.integers(0, len(tasks), size=(replicates, len(tasks)))
    per_task = np.empty((replicates, len(tasks), len(models)))  # a seed-resampled mean per task and model
    for i, t in enumerate(tasks):
        for j, m in enumerate(models):
            s = scores[t][m]
            per_task[:, i, j] = s[rng.integers(0, len(s), size=(replicates, len(s)))].mean(axis=1)
    rows = np.arange(replicates)[:, None]
    return per_task[rows, drawn_tasks].mean(axis=1)


def ranking_tsv(ranking: pd.DataFrame, wins: pd.DataFrame) -> str:
    """The TSV (``results/eval_ranking.tsv``): the ranking's columns, then ``p_beats_<model>`` per model."""
    out = ranking.copy()
    for m in wins.columns:
        out[f"p_beats_{m}"] = [wins.loc[r, m] for r in out["model"]]
    return out.to_csv(sep="\t", index=False, na_rep="", float_format="%.6g")


def ranking_markdown(ranking: pd.DataFrame, wins: pd.DataFrame, scale: float = 100.0) -> str:
    """The section of ``eval_table.md``: the ranking table (best average rank first) and the win matrix."""
    if ranking.empty or not ranking["tasks"].iloc[0]:
        return "\n## Across tasks\n\nNo task has an `ok` run of every model: nothing to rank.\n"
    order = ranking.sort_values(["average_rank", "model"]).reset_index(drop=True)
    n = int(order["tasks"].iloc[0])
    lines = [f"\n## Across tasks ({n} tasks every model has)\n",
             "| model | average rank | normalised mean | mean score |", "|---|---|---|---|"]
    for r in order.itertuples():
        norm = "" if pd.isna(r.normalised_mean) else f"{r.normalised_mean:.3f}"
        lines.append(f"| {r.model} | {r.average_rank:.2f} | {norm} | {r.mean_score * scale:.1f} |")
    names = list(order["model"])
    lines += ["", f"P(row beats column), paired bootstrap over tasks and seeds ({BOOTSTRAP_REPLICATES} replicates):", "",
              "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for a in names:
        cells = ["" if a == b or pd.isna(wins.loc[a, b]) else f"{wins.loc[a, b]:.2f}" for b in names]
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    lines.append("\nAverage rank: 1 = best on every task. Normalised mean: per task 0 = the trivial baseline (or the "
                 "weakest model when that is higher), 1 = the best model. P: a descriptive probability under "
                 "resampling of tasks and seeds, not a p-value (clmdetour.evaluation.ranking).")
    return "\n".join(lines) + "\n"
