"""Issue checkable-scores item 6: models compared across tasks (average rank, normalised mean, a paired bootstrap
win probability per pair), in eval_table.md and eval_ranking.tsv."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from clmdetour.evaluation import ranking


def _runs(table: dict[str, dict[str, list[float]]]) -> pd.DataFrame:
    rows = [{"model": m, "task": t, "seed": i, "status": "ok", "score": s}
            for t, by_model in table.items() for m, scores in by_model.items() for i, s in enumerate(scores)]
    return pd.DataFrame(rows)


def test_ranks_normalised_means_and_a_clear_winner():
    runs = _runs({"t1": {"a": [0.80, 0.82, 0.81], "b": [0.70, 0.71, 0.69], "c": [0.50, 0.52, 0.51]},
                  "t2": {"a": [0.60, 0.61, 0.62], "b": [0.60, 0.61, 0.62], "c": [0.40, 0.41, 0.39]},
                  "t3": {"a": [0.90, 0.91, 0.92], "b": [0.95, 0.96, 0.94], "c": [0.30, 0.31, 0.29]}})
    rank, wins = ranking.across_tasks(runs, ["a", "b", "c"], trivial={"t1": 0.5, "t2": 0.2, "t3": float("nan")})
    r = rank.set_index("model")
    assert r.loc["a", "average_rank"] == pytest.approx((1 + 1.5 + 2) / 3)  # t2: a and b tie, rank 1.5 each
    assert r.loc["c", "average_rank"] == 3.0 and r.loc["a", "tasks"] == 3
    # t1: floor 0.5 (trivial) and best 0.81; t2: floor 0.2; t3: trivial undefined -> the weakest model's mean
    assert r.loc["c", "normalised_mean"] == pytest.approx(np.mean([(0.51 - 0.5) / 0.31, (0.40 - 0.2) / 0.41, 0.0]))
    assert r.loc["a", "normalised_mean"] < 1.0 and r.loc["b", "normalised_mean"] < 1.0
    assert wins.loc["a", "c"] == 1.0 and wins.loc["c", "a"] == 0.0  # a beats c on every task and seed
    assert wins.loc["a", "b"] + wins.loc["b", "a"] == pytest.approx(1.0)
    assert 0.0 < wins.loc["a", "b"] < 1.0  # mixed across tasks: uncertain
    again = ranking.across_tasks(runs, ["a", "b", "c"])[1]
    assert again.loc["a", "b"] == wins.loc["a", "b"]  # a fixed seed: the same table every run


def test_equal_models_are_a_coin_toss_and_missing_tasks_are_left_out():
    runs = _runs({"t1": {"a": [0.5, 0.6], "b": [0.5, 0.6]}, "t2": {"a": [0.4, 0.4], "b": [0.4, 0.4]},
                  "t3": {"a": [0.9]}})
    rank, wins = ranking.across_tasks(runs, ["a", "b"])
    assert rank["tasks"].tolist() == [2, 2]  # t3 lacks b
    assert wins.loc["a", "b"] == pytest.approx(0.5, abs=0.05)
    md = ranking.ranking_markdown(rank, wins)
    assert "## Across tasks (2 tasks every model has)" in md and "P(row beats column)" in md
    tsv = ranking.ranking_tsv(rank, wins)
    assert tsv.splitlines()[0].split("\t") == ["model", "tasks", "average_rank", "normalised_mean", "mean_score",
                                               "p_beats_a", "p_beats_b"]
    empty = ranking.across_tasks(_runs({"t3": {"a": [0.9]}}), ["a", "b"])
    assert "nothing to rank" in ranking.ranking_markdown(*empty)
