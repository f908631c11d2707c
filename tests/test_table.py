"""Aggregation into eval_table.tsv: columns, statistics, the trivial row, document groups, and missing runs."""
import math

import pandas as pd
import pytest

from clmdetour.evaluation.table import MissingRunsError, build_table, load_runs, table_columns, write_eval_tables
from clmdetour.io import atomic_write_json
from clmdetour.tasks.contract import write_task

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
                       "metrics": {"f1_macro": SCORES[(m, t)][s], "f1_micro": SCORES[(m, t)][s] + 0.1},
                       "dev_metric": 0.5, "wall_time_s": 1.0}
                if (m, t, s) in failed:
                    rec.update(status="failed", metrics=None, error="RuntimeError: boom")
                atomic_write_json(p, rec)
                paths[(m, t, s)] = p
    return expected, paths


def _write(tmp_path, expected, paths, allow_missing=False):
    out = {k: tmp_path / f"{k}.out" for k in ("runs", "table", "md")}
    write_eval_tables(expected=expected, paths=paths, models=MODELS, tasks=TASKS, baseline="mlm-baseline",
                      allow_missing=allow_missing, runs_tsv=out["runs"], table_tsv=out["table"], table_md=out["md"],
                      tie_tolerance=0.0005)
    return out


def test_complete_grid(tmp_path):
    out = _write(tmp_path, *_grid(tmp_path))
    table = pd.read_csv(out["table"], sep="\t")
    assert list(table.columns) == table_columns(TASKS)
    assert list(table.columns)[:10] == ["model", "emea_mean", "emea_std", "emea_n", "emea_delta", "emea_p_welch",
                                        "emea_p_paired", "emea_p_wilcoxon", "emea_trivial", "emea_mdd"]
    assert list(table.columns)[-7:] == ["macro_avg", "sign_wins", "sign_ties", "sign_p",
                                        "sign_groups_wins", "sign_groups_ties", "sign_groups_p"]
    assert list(table["model"]) == MODELS + ["trivial"]
    clm = table.set_index("model").loc["clm-detour"]
    assert clm["emea_mean"] == pytest.approx(0.71) and clm["emea_std"] == pytest.approx(0.01)
    assert clm["emea_delta"] == pytest.approx(0.05) and clm["emea_n"] == 3
    assert clm["diamed_delta"] == pytest.approx(0.02)
    assert clm["macro_avg"] == pytest.approx((0.71 + 0.52) / 2)
    assert (clm["sign_wins"], clm["sign_ties"]) == (2, 0) and clm["sign_p"] == pytest.approx(0.25)
    assert 0 < clm["emea_p_welch"] < 0.01
    from scipy.stats import ttest_rel
    assert clm["emea_p_paired"] == pytest.approx(ttest_rel(SCORES[("clm-detour", "emea")],
                                                           SCORES[("mlm-baseline", "emea")]).pvalue, rel=1e-5)
    assert math.isnan(clm["emea_p_wilcoxon"])  # 3 seeds: below 6
    assert clm["emea_mdd"] == pytest.approx((2.7764451 + 0.9409646) * 0.01 * math.sqrt(2 / 3), rel=1e-5)
    assert (clm["sign_groups_wins"], clm["sign_groups_ties"]) == (2, 0)  # no task folders: each task its own group
    base = table.set_index("model").loc["mlm-baseline"]
    assert base["emea_delta"] == 0 and math.isnan(base["emea_p_welch"]) and math.isnan(base["sign_p"])
    assert "71.0 ± 1.0 (+5.0)" in out["md"].read_text()
    runs = pd.read_csv(out["runs"], sep="\t")
    assert len(runs) == 12 and set(runs["status"]) == {"ok"}
    assert set(runs["metric_other"]) == {"f1_micro"}
    assert (runs["score_other"] - runs["score"]).round(9).eq(0.1).all()


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
    row = next(l for l in out["table"].read_text().splitlines() if l.startswith("clm-detour")).split("\t")
    cols = table_columns(TASKS)
    cell = dict(zip(cols, row))
    assert cell["diamed_mean"] == "" and cell["diamed_std"] == "" and cell["diamed_n"] == "0"
    assert cell["diamed_delta"] == "" and cell["macro_avg"] == ""
    assert cell["diamed_p_paired"] == "" and cell["diamed_mdd"] == ""
    assert (cell["sign_wins"], cell["sign_ties"]) == ("1", "0")  # only emea compared
    assert "| clm-detour | 71.0 ± 1.0 (+5.0) | missing | missing |" in out["md"].read_text()


def test_record_for_another_run_is_an_error(tmp_path):
    expected, paths = _grid(tmp_path)
    paths[("clm-detour", "emea", 0)] = paths[("clm-detour", "emea", 1)]
    with pytest.raises(ValueError, match="seed is 1, expected 0"):
        _write(tmp_path, expected, paths)


# --- ties, undefined tests, the paired tests, the trivial row, document groups ---------------------------

def _runs(scores: dict) -> pd.DataFrame:
    """eval_runs rows (all ok) from {(model, task): [score per seed 0, 1, ...]}."""
    rows = [{"model": m, "task": t, "seed": s, "status": "ok", "metric": "f1_macro", "score": x}
            for (m, t), xs in scores.items() for s, x in enumerate(xs)]
    return pd.DataFrame(rows)


def test_float_noise_is_a_tie_and_undefined_tests_are_nan(tmp_path):
    scores = {("clm", "noise"): [0.1, 0.2, 0.3], ("base", "noise"): [0.3, 0.2, 0.1],    # delta 5.6e-17
              ("clm", "floor"): [0.389] * 3, ("base", "floor"): [0.389] * 3,             # every seed at the prior
              ("clm", "shift"): [0.5, 0.6, 0.7], ("base", "shift"): [0.4, 0.5, 0.6],     # +0.1 on every seed
              ("clm", "small"): [0.5004, 0.5003, 0.5002], ("base", "small"): [0.5, 0.49, 0.51]}  # +0.0003
    tasks = ["noise", "floor", "shift", "small"]
    table = build_table(_runs(scores), ["clm", "base"], tasks, "base", tie_tolerance=0.0005).set_index("model")
    clm = table.loc["clm"]
    assert 0 < abs(clm["noise_delta"]) < 1e-15
    assert (clm["sign_wins"], clm["sign_ties"], clm["sign_p"]) == (1, 3, 0.5)   # only "shift" is a win
    assert pd.isna(clm["floor_p_welch"]) and pd.isna(clm["floor_p_paired"]) and pd.isna(clm["floor_mdd"])
    assert pd.isna(clm["shift_p_paired"])            # constant differences: the paired test is undefined
    assert 0 < clm["shift_p_welch"] < 1                 # Welch is not (0.29)
    assert not pd.isna(clm["noise_p_paired"])
    with_zero = build_table(_runs(scores), ["clm", "base"], tasks, "base", tie_tolerance=0.0).set_index("model")
    assert with_zero.loc["clm", "sign_ties"] == 1       # only the exact 0 of "floor"
    assert with_zero.loc["clm", "sign_wins"] >= 2       # "shift" and "small" (and "noise" when its float is > 0)
    md_rows = {}
    from clmdetour.evaluation.table import markdown_table
    md = markdown_table(table.reset_index(), tasks, "base", {t: 3 for t in tasks}, tie_tolerance=0.0005)
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 8 and cells[0] == "clm":
            md_rows[cells[1]] = cells
    assert md_rows["floor"][4:] == ["", "", "", "n/a"]    # p paired, p Wilcoxon, p Welch empty; MDD n/a
    assert md_rows["noise"][3] == "+0.00 (tie)" and md_rows["shift"][3] == "+10.00"
    assert "a difference under 0.05 points is a tie" in md
    assert "Left out" not in md
    why = "task 'diamed' needs files you must provide: missing ['d/train.jsonl']"
    md = markdown_table(table.reset_index(), tasks, "base", {t: 3 for t in tasks}, left_out={"diamed": why}, tie_tolerance=0.0005)
    assert f"Left out of this table (1 configured task(s) not evaluated): `diamed`: {why}" in md


def test_paired_tests_pair_by_seed_and_match_scipy():
    from scipy.stats import ttest_rel, wilcoxon

    a = [0.61, 0.64, 0.60, 0.66, 0.63, 0.65, 0.59]
    b = [0.58, 0.63, 0.62, 0.62, 0.61, 0.60, 0.585]
    runs = _runs({("clm", "t"): a, ("base", "t"): b})
    clm = build_table(runs, ["clm", "base"], ["t"], "base", tie_tolerance=0.0005).set_index("model").loc["clm"]
    assert clm["t_p_paired"] == pytest.approx(ttest_rel(a, b).pvalue, rel=1e-12)
    assert clm["t_p_wilcoxon"] == pytest.approx(wilcoxon([x - y for x, y in zip(a, b)]).pvalue, rel=1e-12)
    # seed 2 missing for clm: the pairs are the 6 common seeds, never shifted
    runs = runs[~((runs["model"] == "clm") & (runs["seed"] == 2))]
    clm = build_table(runs, ["clm", "base"], ["t"], "base", tie_tolerance=0.0005).set_index("model").loc["clm"]
    keep = [0, 1, 3, 4, 5, 6]
    assert clm["t_n"] == 6
    assert clm["t_p_paired"] == pytest.approx(ttest_rel([a[i] for i in keep], [b[i] for i in keep]).pvalue, rel=1e-12)


def _task_folder(root, name, task_type, train, test, labels, files):
    key = "label" if task_type == "multiclass" else "labels"
    rows = {split: [{"id": f"{split}{i}", "text": "t", key: x} for i, x in enumerate(vals)]
            for split, vals in (("train", train), ("dev", train[:1]), ("test", test))}
    manifest = {"task": name, "files": [{"path": f, "sha256": f"sha-{f}", "bytes": 10} for f in files]}
    write_task(root / name, rows, {"task": name, "type": task_type, "labels": labels, "metric": "f1_macro"}, manifest)
    return root / name


def test_trivial_row_and_document_groups_in_tsv_and_md(tmp_path):
    tasks = ["fa", "fb", "mc"]
    dirs = {"fa": _task_folder(tmp_path / "tasks", "fa", "multilabel", [["x", "y"], ["x"], ["x", "z"], ["y"], ["x", "y"]],
                               [["y"], ["x", "z"], []], ["x", "y", "z"], ["d1", "d2", "d3"]),
            "fb": _task_folder(tmp_path / "tasks", "fb", "multilabel", [["x"], ["x"], ["x", "y"], ["x"]], [["y"], ["y"]],
                               ["x", "y"], ["d1", "d2", "d3", "other"]),
            "mc": _task_folder(tmp_path / "tasks", "mc", "multiclass", ["a", "a", "a", "b", "c"], ["a", "b", "b", "c"],
                               ["a", "b", "c"], ["m1"])}
    scores = {("clm", "fa"): [0.70, 0.72, 0.71], ("base", "fa"): [0.60, 0.61, 0.62],
              ("clm", "fb"): [0.50, 0.52, 0.51], ("base", "fb"): [0.40, 0.41, 0.42],
              ("clm", "mc"): [0.30, 0.31, 0.32], ("base", "mc"): [0.40, 0.41, 0.39]}
    expected, paths = [], {}
    for (m, t), xs in scores.items():
        for s, x in enumerate(xs):
            expected.append((m, t, s))
            paths[(m, t, s)] = tmp_path / "eval" / m / t / f"seed{s}.json"
            atomic_write_json(paths[(m, t, s)], {"model": m, "task": t, "seed": s, "metric": "f1_macro", "status": "ok",
                                                 "metrics": {"f1_macro": x, "f1_micro": x}})
    out = {k: tmp_path / f"{k}.out" for k in ("runs", "table", "md")}
    write_eval_tables(expected=expected, paths=paths, models=["clm", "base"], tasks=tasks, baseline="base",
                      allow_missing=False, runs_tsv=out["runs"], table_tsv=out["table"], table_md=out["md"],
                      task_dirs={t: str(d) for t, d in dirs.items()}, tie_tolerance=0.0005)
    table = pd.read_csv(out["table"], sep="\t").set_index("model")
    assert list(table.index) == ["clm", "base", "trivial"]
    # fa, mc: hand computations of tests/test_trivial.py; fb (macro F1): train k=1 (1 + 0)/2, k=2 (1 + 2/5)/2
    # -> {x, y}; test: x 0 (2 false positives), y 1 -> 0.5
    trivial = {"fa": 0.5, "fb": 0.5, "mc": 0.4 / 3}
    for t, v in trivial.items():
        assert table.loc["trivial", f"{t}_mean"] == pytest.approx(v, abs=1e-6)
        assert table[f"{t}_trivial"].iloc[:2].tolist() == pytest.approx([v, v], abs=1e-6)
    others = [c for c in table.columns if not c.endswith("_mean")]
    assert table.loc["trivial", others].isna().all()   # every other cell of the trivial row is empty
    clm = table.loc["clm"]
    assert (clm["sign_wins"], clm["sign_ties"], clm["sign_p"]) == (2, 0, 0.5)
    # groups {fa, fb} (3 of fa's 3 files are fb's) and {mc}: group deltas +0.10, -0.09 -> 1 win of 2
    assert (clm["sign_groups_wins"], clm["sign_groups_ties"], clm["sign_groups_p"]) == (1, 0, 0.75)
    md = out["md"].read_text()
    assert "| trivial | 50.0 | 50.0 | 13.3 |  |  |  |  |  |" in md
    # each type's averaging convention, naming its tasks (read from the task folders' labels.json)
    assert ("How each score is averaged: multiclass (`mc`): macro F1 averages the per-class F1 over the classes "
            "present in gold or predictions") in md
    assert "multilabel (`fa`, `fb`): macro F1 averages the per-label F1 at one threshold chosen on dev; a label " \
           "absent from both the gold and the predictions of a split is left out of the average" in md
    assert "`fa` + `fb`" in md and "2 groups in all" in md
    assert "| clm | 71.0 ± 1.0 (+10.0) |" in md and "| 1 / 0 | 0.7500 |" in md


def test_a_model_named_trivial_is_refused():
    with pytest.raises(ValueError, match="may not be named 'trivial'"):
        build_table(_runs({("trivial", "t"): [0.5]}), ["trivial"], ["t"], "trivial", tie_tolerance=0.0005)


def test_positive_control_line_counts_wins_ties_losses_with_tolerance(tmp_path):
    from clmdetour.evaluation.table import build_table, positive_control, positive_control_line

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
    table = build_table(load_runs(expected, paths), ["mlm-baseline", "random-init"], tasks, "mlm-baseline", tie_tolerance=0.0005)
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


def test_conflicting_labels_note_names_tasks_from_their_manifests(tmp_path):
    """A task whose prepared data hold one text under two labels is named with its count; a clean one is not."""
    import json

    from clmdetour.tasks.prepare import prepare_task

    def source(root, train, test):
        for split, rows in (("train", train), ("dev", [("un cas de développement sans rapport", "a")]), ("test", test)):
            (root / f"{split}.jsonl").parent.mkdir(parents=True, exist_ok=True)
            (root / f"{split}.jsonl").write_text("".join(json.dumps({"id": f"{split}{i}", "text": t, "label": y}) + "\n"
                                                         for i, (t, y) in enumerate(rows)), encoding="utf-8")
        return {"type": "multiclass", "source": "jsonl", "path": str(root), "id_field": "id"}

    clean = [(f"cas clinique numéro {i} sans rapport", "ab"[i % 2]) for i in range(4)]
    # "Douleur thoracique." twice in train (a, then b: within train), "fièvre" a in train and b in test (across)
    noisy = clean + [("Douleur thoracique.", "a"), ("douleur  thoracique", "b"), ("fièvre", "a")]
    dirs = {"noisy": tmp_path / "tasks" / "noisy", "clean": tmp_path / "tasks" / "clean"}
    man = prepare_task("noisy", source(tmp_path / "src" / "noisy", noisy, [("Fièvre !", "b"), ("un test", "a")]),
                       dirs["noisy"])
    assert (man["conflicting_labels"]["texts"], man["conflicting_labels"]["rows"]) == (2, 4)
    assert man["conflicting_labels"]["within"] == {"train": 1, "dev": 0, "test": 0}
    assert man["conflicting_labels"]["across"] == {"train-dev": 0, "train-test": 1, "dev-test": 0}
    prepare_task("clean", source(tmp_path / "src" / "clean", clean, [("un test", "a"), ("autre test", "b")]),
                 dirs["clean"])
    expected, paths = [], {}
    for m in ("clm", "base"):
        for t in dirs:
            for s in (0, 1):
                expected.append((m, t, s))
                paths[(m, t, s)] = tmp_path / "eval" / m / t / f"seed{s}.json"
                atomic_write_json(paths[(m, t, s)], {"model": m, "task": t, "seed": s, "metric": "f1_macro",
                                                     "status": "ok", "metrics": {"f1_macro": 0.5 + 0.1 * s}})

    def md(tasks):
        out = {k: tmp_path / f"{k}.out" for k in ("runs", "table", "md")}
        write_eval_tables(expected=[e for e in expected if e[1] in tasks], paths=paths, models=["clm", "base"],
                          tasks=tasks, baseline="base", allow_missing=False, runs_tsv=out["runs"],
                          table_tsv=out["table"], table_md=out["md"], task_dirs={t: str(d) for t, d in dirs.items()},
                          tie_tolerance=0.0005)
        return out["md"].read_text()

    text = md(["clean", "noisy"])
    assert ("Texts with conflicting labels (the same normalised text with different labels, within a split or "
            "across splits; counted in each task's manifest, `conflicting_labels`): `noisy` 2.") in text
    assert "`clean` 0" not in text
    assert "conflicting labels" not in md(["clean"])  # absent when no task has any


def test_averaging_note_states_a_task_metric_other_than_its_types_default():
    # ChemProt (config/english.yaml) is a multiclass task scored by micro-F1: the note must not call it macro F1
    from clmdetour.evaluation.table import averaging_note

    note = averaging_note({"chemprot": "multiclass", "diamed": "multiclass", "emea": "ner"},
                          {"chemprot": "f1_micro", "diamed": "f1_macro", "emea": "f1_micro"})
    assert "multiclass (`chemprot`): micro F1 pools the decisions over every class" in note
    assert "multiclass (`diamed`): macro F1 averages the per-class F1" in note
    assert "`chemprot`, `diamed`" not in note and "ner (`emea`): entity F1" in note
    # without metrics every task reports its type's default wording, as before
    assert "multiclass (`chemprot`, `diamed`): macro F1" in averaging_note({"chemprot": "multiclass",
                                                                             "diamed": "multiclass"})
    # a task whose config leaves metric null reports the default too
    assert "multiclass (`chemprot`): macro F1" in averaging_note({"chemprot": "multiclass"}, {"chemprot": None})
