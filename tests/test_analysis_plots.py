"""Report figures: every plot function writes a non-empty PNG and SVG from small fixture data."""

import json

import pandas as pd
import pytest

from clmdetour.analysis import plots
from clmdetour.analysis.drift import COLUMNS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _check_outputs(tmp_path, stem):
    png, svg = tmp_path / f"{stem}.png", tmp_path / f"{stem}.svg"
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 5000
    text = svg.read_text(encoding="utf-8")
    assert "<svg" in text and text.count("<path") > 10
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary left behind
    return text


@pytest.fixture()
def drift_table():
    rows = []
    for variant, objective, frozen in (("clm-detour", "clm", ()), ("mlm-baseline", "mlm", ()),
                                       ("clm-freeze-low", "clm", ("0", "1"))):
        for phase in ("phase1", "decay"):
            mode = "causal" if objective == "clm" and phase == "phase1" else "bidirectional"
            for i, layer in enumerate(["embeddings", "0", "1", "2", "3", "head"]):
                for mtype in ("all", "attention", "mlp", "norm"):
                    value = 0.0 if layer in frozen else 0.01 * (6 - i) * (2 if objective == "clm" else 1)
                    rows.append({"variant": variant, "phase": phase, "layer": layer, "module_type": mtype,
                                     "metric": "rel_weight_change", "value": value, "attention": mode})
                if layer != "head":
                    rows.append({"variant": variant, "phase": phase, "layer": layer, "module_type": "hidden_states",
                                     "metric": "cka", "value": 1 - 0.05 * i, "attention": mode, "n_sequences": 8,
                                     "n_tokens": 1024, "seed": 0})
    return pd.DataFrame(rows).reindex(columns=COLUMNS)


def test_layer_drift_plots(tmp_path, drift_table):
    plots.plot_layer_drift(drift_table, [tmp_path / "layer_drift.png", tmp_path / "layer_drift.svg"],
                           objectives={"mlm-baseline": "mlm"})
    svg = _check_outputs(tmp_path, "layer_drift")
    assert "clm-freeze-low" in svg and "after the decay" in svg
    plots.plot_module_drift(drift_table, [tmp_path / "mods.png", tmp_path / "mods.svg"])
    assert "attention" in _check_outputs(tmp_path, "mods")


def test_plots_are_reproducible(tmp_path, drift_table):
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    plots.plot_layer_drift(drift_table, [a])
    plots.plot_layer_drift(drift_table, [b])
    assert a.read_bytes() == b.read_bytes()


def _write_log(path, n, lr0, loss0, with_tps=True):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for step in range(1, n + 1):
            rec = {"step": step, "tokens": step * 2048, "loss": loss0 / step ** 0.3, "lr": lr0 * min(1, step / 3)}
            if with_tps and step > 1:
                rec["tokens_per_s"] = 5000 + 10 * step
            f.write(json.dumps(rec) + "\n")


def test_training_curves(tmp_path):
    logs = {}
    for variant in ("clm-detour", "mlm-baseline"):
        for phase in ("phase1", "decay"):
            p = tmp_path / variant / phase / "train_log.jsonl"
            _write_log(p, 12, 1e-3, 8.0)
            logs[(variant, phase)] = plots.read_train_log(p)
    assert logs[("clm-detour", "phase1")]["tokens_per_s"].isna().sum() == 1  # first line has no throughput
    out = tmp_path / "plots"
    plots.plot_training_curves(logs, [out / "training_curves.png", out / "training_curves.svg"])
    svg = _check_outputs(out, "training_curves")
    assert "tokens seen" in svg and "decay (MLM)" in svg


def test_read_train_log_errors_name_file_and_line(tmp_path):
    p = tmp_path / "train_log.jsonl"
    p.write_text('{"step": 1, "tokens": 10, "loss": 2.0, "lr": 0.1}\n{"step": 2, "loss": 1.0}\n')
    with pytest.raises(ValueError, match=r"train_log.jsonl: line 2: key 'tokens' missing"):
        plots.read_train_log(p)
    p.write_text('{"step": 1, "tokens": 10, "loss": 2.0}\nnot json\n')
    with pytest.raises(ValueError, match=r"line 2: invalid JSON"):
        plots.read_train_log(p)
    p.write_text("")
    with pytest.raises(ValueError, match="empty"):
        plots.read_train_log(p)


def test_eval_scores_plot(tmp_path):
    rows = [{"model": m, "task": t, "seed": s, "score": base + 0.01 * s, "metric": "f1"}
            for m, base in (("clm-detour", 0.7), ("mlm-baseline", 0.65), ("demo-base", 0.6))
            for t in ("emea", "fracco-30") for s in (1, 2, 3)]
    rows.append({"model": "clm-detour", "task": "cantemist", "seed": 1, "score": 0.5, "metric": "f1"})  # one seed: no std
    p = tmp_path / "eval_runs.tsv"
    pd.DataFrame(rows).to_csv(p, sep="\t", index=False)
    runs = plots.read_eval_runs(p)
    summary = plots.eval_summary(runs).set_index(["task", "model"])
    assert summary.loc[("emea", "clm-detour"), "mean"] == pytest.approx(0.72)
    assert summary.loc[("emea", "clm-detour"), "std"] == pytest.approx(0.01)
    assert summary.loc[("emea", "clm-detour"), "n"] == 3
    plots.plot_eval_scores(runs, [tmp_path / "eval_scores.png", tmp_path / "eval_scores.svg"],
                           model_order=["mlm-baseline", "clm-detour"])
    svg = _check_outputs(tmp_path, "eval_scores")
    assert "fracco-30" in svg and svg.index("mlm-baseline") < svg.index("demo-base")


def test_eval_runs_validation(tmp_path):
    p = tmp_path / "eval_runs.tsv"
    pd.DataFrame([{"model": "a", "task": "t", "seed": 1, "score": 71.0}]).to_csv(p, sep="\t", index=False)
    with pytest.raises(ValueError, match=r"line 2: score 71.0 is outside \[0, 1\]"):
        plots.read_eval_runs(p)
    pd.DataFrame([{"model": "a", "task": "t", "seed": 1}]).to_csv(p, sep="\t", index=False)
    with pytest.raises(ValueError, match=r"columns \['score'\] missing"):
        plots.read_eval_runs(p)


def test_save_figure_rejects_unknown_format(tmp_path):
    plt = plots._pyplot()
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match=r"x.docx: cannot save a figure as 'docx'"):
        plots.save_figure(fig, [tmp_path / "x.docx"])
