"""Aggregation into eval_table.tsv: columns, statistics, and missing runs."""
import math

import pandas as pd
import pytest

from clmdetour.io import atomic_write_json
from clmdetour.table import MissingRunsError, table_columns, write_eval_tables

MODELS = ["clm-detour", "mlm-baseline"]
TASKS = ["emea", "diamed"]
SEEDS = [0, 1, 2]
SCORES = {("clm-detour", "emea"): [0.70, 0.72, 0.71], ("mlm-baseline", "emea"): [0.66, 0.67, 0.65],
          ("clm-detour", "diamed"): [0.50, 0.52, 0.54], ("mlm-baseline", "diamed"): [0.51, 0.49, 0.50]}


def _grid(tmp_path, skip=(), failed=()):
    expected, paths = [], {}
    for m in MODELS:
        for t in TASKS:
            for s in SEEDS:
                expected.append((m, t, s))
                if (m, t, s) in skip:
                    continue
                p = tmp_path / "eval" / m / t / f"seed{s}.json"
                rec = {"model": m, "task": t, "seed": s, "metric": "f1_macro", "status": "ok",
                       "metrics": {"f1_macro": SCORES[(m, t)][s]}, "dev_metric": 0.5, "wall_time_s": 1.0}
                if (m, t, s) in failed:
                    rec.update(status="failed", metrics=None, error="RuntimeError: boom")
                atomic_write_json(p, rec)
                paths[(m, t, s)] = p
    return expected, paths


def _write(tmp_path, expected, paths, allow_missing=False):
    out = {k: tmp_path / f"{k}.out" for k in ("runs", "table", "md")}
    write_eval_tables(expected=expected, paths=paths, models=MODELS, tasks=TASKS, baseline="mlm-baseline",
                      allow_missing=allow_missing, runs_tsv=out["runs"], table_tsv=out["table"], table_md=out["md"])
    return out


def test_complete_grid(tmp_path):
    out = _write(tmp_path, *_grid(tmp_path))
    table = pd.read_csv(out["table"], sep="\t")
    assert list(table.columns) == table_columns(TASKS)
    assert list(table.columns)[:6] == ["model", "emea_mean", "emea_std", "emea_n", "emea_delta", "emea_p_welch"]
    assert list(table.columns)[-4:] == ["macro_avg", "sign_wins", "sign_ties", "sign_p"]
    clm = table.set_index("model").loc["clm-detour"]
    assert clm["emea_mean"] == pytest.approx(0.71) and clm["emea_std"] == pytest.approx(0.01)
    assert clm["emea_delta"] == pytest.approx(0.05) and clm["emea_n"] == 3
    assert clm["diamed_delta"] == pytest.approx(0.02)
    assert clm["macro_avg"] == pytest.approx((0.71 + 0.52) / 2)
    assert (clm["sign_wins"], clm["sign_ties"]) == (2, 0) and clm["sign_p"] == pytest.approx(0.25)
    assert 0 < clm["emea_p_welch"] < 0.01
    base = table.set_index("model").loc["mlm-baseline"]
    assert base["emea_delta"] == 0 and math.isnan(base["emea_p_welch"]) and math.isnan(base["sign_p"])
    assert "71.0 ± 1.0 (+5.0)" in out["md"].read_text()
    runs = pd.read_csv(out["runs"], sep="\t")
    assert len(runs) == 12 and set(runs["status"]) == {"ok"}


def test_missing_run_is_refused_unless_allowed(tmp_path):
    expected, paths = _grid(tmp_path, skip={("clm-detour", "emea", 2)}, failed={("clm-detour", "diamed", 0)})
    with pytest.raises(MissingRunsError, match=r"2 of 12 runs .*clm-detour/emea/seed2 missing.*boom"):
        _write(tmp_path, expected, paths)
    out = _write(tmp_path, expected, paths, allow_missing=True)
    table = pd.read_csv(out["table"], sep="\t").set_index("model")
    assert table.loc["clm-detour", "emea_n"] == 2
    assert table.loc["clm-detour", "emea_mean"] == pytest.approx(0.71)  # mean of 0.70, 0.72
    runs = pd.read_csv(out["runs"], sep="\t")
    bad = runs[runs["status"] != "ok"]
    assert set(bad["status"]) == {"missing", "failed"} and bad["score"].isna().all()
    assert "(n=2/3)" in out["md"].read_text()


def test_whole_cell_missing_shows_empty_never_a_number(tmp_path):
    skip = {("clm-detour", "diamed", s) for s in SEEDS}
    out = _write(tmp_path, *_grid(tmp_path, skip=skip), allow_missing=True)
    row = [l for l in out["table"].read_text().splitlines() if l.startswith("clm-detour")][0].split("\t")
    cols = table_columns(TASKS)
    cell = dict(zip(cols, row))
    assert cell["diamed_mean"] == "" and cell["diamed_std"] == "" and cell["diamed_n"] == "0"
    assert cell["diamed_delta"] == "" and cell["macro_avg"] == ""
    assert (cell["sign_wins"], cell["sign_ties"]) == ("1", "0")  # only emea compared
    assert "| clm-detour | 71.0 ± 1.0 (+5.0) | missing | missing |" in out["md"].read_text()


def test_record_for_another_run_is_an_error(tmp_path):
    expected, paths = _grid(tmp_path)
    paths[("clm-detour", "emea", 0)] = paths[("clm-detour", "emea", 1)]
    with pytest.raises(ValueError, match="seed is 1, expected 0"):
        _write(tmp_path, expected, paths)


def test_positive_control_line_counts_wins_ties_losses_with_tolerance(tmp_path):
    from clmdetour.table import build_table, load_runs, positive_control, positive_control_line

    tasks = [f"t{i}" for i in range(8)]
    # mlm-baseline minus random-init per task: 6 clear wins, one within the tolerance (tie), one loss
    deltas = [0.05, 0.02, 0.01, 0.003, 0.0006, 0.10, 0.0004, -0.02]
    expected, paths = [], {}
    for m in ("mlm-baseline", "random-init"):
        for t, d in zip(tasks, deltas):
            for s in (0, 1):
                expected.append((m, t, s))
                p = tmp_path / m / t / f"seed{s}.json"
                score = 0.5 + (d if m == "mlm-baseline" else 0.0)
                atomic_write_json(p, {"model": m, "task": t, "seed": s, "metric": "f1_macro", "status": "ok",
                                      "metrics": {"f1_macro": score}})
                paths[(m, t, s)] = p
    table = build_table(load_runs(expected, paths), ["mlm-baseline", "random-init"], tasks, "mlm-baseline")
    w, ti, l, p = positive_control(table, tasks, "mlm-baseline", "random-init", 0.0005)
    assert (w, ti, l) == (6, 1, 1)
    assert p == pytest.approx(8 / 128)  # P(X >= 6 | n = 7, 0.5) = (7 + 1) / 2^7: ties dropped
    assert positive_control(table, tasks, "mlm-baseline", "random-init", 0.0)[:3] == (7, 0, 1)
    line = positive_control_line(table, tasks, "mlm-baseline", "random-init", 0.0005)
    assert line == "positive control: mlm-baseline vs random-init: 6 wins / 1 ties / 1 losses, sign p = 0.0625"
    # the Markdown table ends with the line when the control model is in the grid
    out = {k: tmp_path / f"{k}.out" for k in ("runs", "table", "md")}
    write_eval_tables(expected=expected, paths=paths, models=["mlm-baseline", "random-init"], tasks=tasks,
                      baseline="mlm-baseline", allow_missing=False, runs_tsv=out["runs"], table_tsv=out["table"],
                      table_md=out["md"], control="random-init", tie_tolerance=0.0005)
    assert out["md"].read_text().rstrip("\n").splitlines()[-1] == line
    with pytest.raises(ValueError, match="not in the table"):
        positive_control(table, tasks, "mlm-baseline", "nope", 0.0005)


def test_no_control_line_without_the_control_model(tmp_path):
    out = _write(tmp_path, *_grid(tmp_path))
    assert "positive control" not in out["md"].read_text()
