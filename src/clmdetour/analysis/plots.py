"""Figures of the run report (matplotlib, each saved as PNG and SVG).

* ``plot_layer_drift``: per layer, relative weight change and CKA to the base
  model, one column per phase (after phase 1, after the decay), one line per
  variant (CLM and MLM variants, freeze ablations dashed);
* ``plot_module_drift``: relative weight change per module type (attention,
  MLP, norms), one row per phase;
* ``plot_training_curves``: loss, learning rate and throughput (tokens/s)
  against tokens seen, for every pretraining phase, from ``train_log.jsonl``;
* ``plot_eval_scores``: per task, mean score over fine-tuning seeds per model
  with the standard deviation as error bar and each seed as a dot, from
  ``results/eval_runs.tsv``.

Figures are written atomically (temporary file, then rename), with a fixed SVG
hash salt and no date metadata so that equal data give equal files.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from clmdetour.analysis.drift import layer_sort_key
from clmdetour.io import disk_space_error
from clmdetour.objectives import get_objective

PHASE_TITLES = {"phase1": "after phase 1", "decay": "after the decay"}
TRAIN_LOG_REQUIRED = ("tokens",)
TRAIN_LOG_METRICS = (("loss", "training loss"), ("lr", "learning rate"), ("tokens_per_s", "throughput (tokens/s)"))
EVAL_RUN_COLUMNS = ("model", "task", "seed", "score")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "clmdetour"
    return plt


def save_figure(fig, paths: Sequence[str | Path], dpi: int = 150) -> None:
    """Save ``fig`` to every path (format from the suffix: ``.png``, ``.svg``, ``.pdf``) atomically, then close it.

    Args:
        fig: a matplotlib Figure.
        paths: output files; parent folders are created.
        dpi: resolution of raster formats (dots per inch).

    Raises:
        ValueError: a path has no suffix matplotlib can write.
        DiskSpaceError: the disk filled up (names the path and the bytes free; the temporary file is removed).
    """
    plt = _pyplot()
    try:
        for path in map(Path, paths):
            fmt = path.suffix.lstrip(".").lower()
            if fmt not in fig.canvas.get_supported_filetypes():
                raise ValueError(f"{path}: cannot save a figure as {fmt!r}; "
                                 f"supported: {sorted(fig.canvas.get_supported_filetypes())}")
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            os.close(fd)
            try:
                metadata = {"Date": None} if fmt == "svg" else ({"Software": None} if fmt == "png" else None)
                fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight", metadata=metadata)
                os.replace(tmp, path)
            except BaseException as e:
                Path(tmp).unlink(missing_ok=True)
                full = disk_space_error(path, e)
                if full is not None:
                    raise full from e
                raise
    finally:
        plt.close(fig)


def _variant_style(variant: str, objectives: Mapping[str, str] | None) -> dict:
    style = {"marker": "o", "markersize": 3, "linewidth": 1.4}
    if "freeze" in variant:
        style["linestyle"] = "--"
    elif (objectives or {}).get(variant) is not None:
        style.update(get_objective(objectives[variant], f"the objective of variant {variant!r}").plot_style)
    return style


def _layer_axis(ax, layers: list[str]) -> dict[str, int]:
    order = sorted(set(layers), key=layer_sort_key)
    pos = {layer: i for i, layer in enumerate(order)}
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(["emb" if l == "embeddings" else l for l in order], fontsize=7)
    ax.set_xlabel("layer")
    return pos


def _check_drift(df: pd.DataFrame) -> None:
    missing = [c for c in ("variant", "phase", "layer", "module_type", "metric", "value") if c not in df.columns]
    if missing:
        raise ValueError(f"layer-drift table lacks columns {missing}")
    if df.empty:
        raise ValueError("layer-drift table is empty: nothing to plot")


def plot_layer_drift(df: pd.DataFrame, paths: Sequence[str | Path],
                     objectives: Mapping[str, str] | None = None) -> None:
    """Per-layer drift from the base model, by phase and variant.

    Args:
        df: tidy layer-drift table (``clmdetour.analysis.drift.COLUMNS``).
        paths: output files (e.g. ``layer_drift.png``, ``layer_drift.svg``).
        objectives: phase-1 objective per variant (``clm`` / ``mlm``) for the line
            style; guessed from the name when absent.

    Top row: relative weight change of each encoder layer (all its tensors);
    bottom row: linear CKA of its hidden states with the base model's. Columns:
    after phase 1, after the decay.

    Raises:
        ValueError: the table is empty or lacks columns.
    """
    _check_drift(df)
    plt = _pyplot()
    phases = [p for p in PHASE_TITLES if p in set(df["phase"])]
    variants = list(dict.fromkeys(df["variant"]))
    fig, axes = plt.subplots(2, len(phases), figsize=(5.2 * len(phases), 7.0), squeeze=False, sharey="row")
    panels = [("rel_weight_change", "all", "relative weight change ||W-W0||/||W0||"),
              ("cka", "hidden_states", "linear CKA with the base model")]
    for row, (metric, module_type, ylabel) in enumerate(panels):
        sub = df[(df["metric"] == metric) & (df["module_type"] == module_type)
                 & df["layer"].map(lambda l, m=metric: l != "head" and (m == "cka" or l != "embeddings"))]
        for col, phase in enumerate(phases):
            ax = axes[row][col]
            part = sub[sub["phase"] == phase]
            pos = _layer_axis(ax, list(part["layer"])) if not part.empty else {}
            for variant in variants:
                v = part[part["variant"] == variant]
                if v.empty:
                    continue
                v = v.sort_values("layer", key=lambda s: s.map(layer_sort_key))
                mode = v["attention"].iloc[0] if "attention" in v.columns else ""
                label = f"{variant} ({mode})" if metric == "cka" and isinstance(mode, str) and mode else variant
                ax.plot([pos[l] for l in v["layer"]], v["value"], label=label,
                        **_variant_style(variant, objectives))
            ax.set_title(f"{PHASE_TITLES[phase]}", fontsize=10)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel(ylabel)
            ax.legend(fontsize=7)
    fig.suptitle("Layer drift from the base model")
    fig.tight_layout()
    save_figure(fig, paths)


def plot_module_drift(df: pd.DataFrame, paths: Sequence[str | Path],
                      objectives: Mapping[str, str] | None = None) -> None:
    """Relative weight change per module type (attention, mlp, norm) of each encoder layer, by phase and variant.

    Args:
        df: tidy layer-drift table.
        paths: output files (PNG, SVG).
        objectives: see ``plot_layer_drift``.

    Raises:
        ValueError: the table is empty, lacks columns or has no per-module rows.
    """
    _check_drift(df)
    plt = _pyplot()
    module_types = ["attention", "mlp", "norm"]
    sub = df[(df["metric"] == "rel_weight_change") & df["module_type"].isin(module_types)
             & ~df["layer"].isin(["embeddings", "head"])]  # encoder layers only: the same x axis in every panel
    if sub.empty:
        raise ValueError("layer-drift table has no per-module weight-change rows")
    phases = [p for p in PHASE_TITLES if p in set(sub["phase"])]
    variants = list(dict.fromkeys(sub["variant"]))
    fig, axes = plt.subplots(len(phases), len(module_types), figsize=(4.2 * len(module_types), 3.4 * len(phases)),
                             squeeze=False, sharey="col")
    for r, phase in enumerate(phases):
        for c, mtype in enumerate(module_types):
            ax = axes[r][c]
            part = sub[(sub["phase"] == phase) & (sub["module_type"] == mtype)]
            pos = _layer_axis(ax, list(part["layer"])) if not part.empty else {}
            for variant in variants:
                v = part[part["variant"] == variant].sort_values("layer", key=lambda s: s.map(layer_sort_key))
                if not v.empty:
                    ax.plot([pos[l] for l in v["layer"]], v["value"], label=variant,
                            **_variant_style(variant, objectives))
            ax.set_title(f"{mtype}, {PHASE_TITLES[phase]}", fontsize=10)
            ax.grid(alpha=0.3)
            if c == 0:
                ax.set_ylabel("||W-W0||/||W0||")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("Relative weight change per module type")
    fig.tight_layout()
    save_figure(fig, paths)


def read_train_log(path: str | Path) -> pd.DataFrame:
    """Read a ``train_log.jsonl`` (one JSON object a line: step, tokens, loss, lr, tokens_per_s).

    Args:
        path: the log file.

    Returns:
        DataFrame with one row per line; metrics a line lacks are NaN.

    Raises:
        ValueError: a line is not a JSON object or lacks ``tokens`` (names file and
            line), the file has no line, or no line has a ``loss``.
    """
    path = Path(path)
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {lineno}: invalid JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{path}: line {lineno}: expected a JSON object, got {type(rec).__name__}")  # noqa: TRY004 (a malformed file is a bad value, as its callers expect)
            for key in TRAIN_LOG_REQUIRED:
                if key not in rec:
                    raise ValueError(f"{path}: line {lineno}: key {key!r} missing")
            rows.append(rec)
    if not rows:
        raise ValueError(f"{path}: the training log is empty")
    df = pd.DataFrame(rows)
    if "loss" not in df.columns or df["loss"].isna().all():
        raise ValueError(f"{path}: no line has a 'loss'")
    for key, _ in TRAIN_LOG_METRICS:
        if key not in df.columns:
            df[key] = math.nan
    return df


def plot_training_curves(logs: Mapping[tuple[str, str], pd.DataFrame], paths: Sequence[str | Path],
                         objectives: Mapping[str, str] | None = None) -> None:
    """Loss, learning rate and throughput against tokens seen, for every (variant, phase).

    Args:
        logs: ``{(variant, phase): read_train_log(...)}``.
        paths: output files (PNG, SVG).
        objectives: see ``plot_layer_drift``.

    Rows: loss, learning rate, tokens/s; columns: phase 1, decay.

    Raises:
        ValueError: ``logs`` is empty.
    """
    if not logs:
        raise ValueError("no training logs to plot")
    plt = _pyplot()
    phases = [p for p in ("phase1", "decay") if any(ph == p for _, ph in logs)]
    fig, axes = plt.subplots(len(TRAIN_LOG_METRICS), len(phases), figsize=(5.2 * len(phases), 8.5),
                             squeeze=False, sharex="col")
    titles = {"phase1": "phase 1", "decay": "decay (MLM)"}
    for c, phase in enumerate(phases):
        for (variant, ph), log in logs.items():
            if ph != phase:
                continue
            style = _variant_style(variant, objectives)
            style.update(marker=None)
            for r, (key, _) in enumerate(TRAIN_LOG_METRICS):
                v = log[["tokens", key]].dropna()
                if not v.empty:
                    axes[r][c].plot(v["tokens"], v[key], label=variant, **style)
        for r, (_, label) in enumerate(TRAIN_LOG_METRICS):
            ax = axes[r][c]
            ax.grid(alpha=0.3)
            if c == 0:
                ax.set_ylabel(label)
            if r == 0:
                ax.set_title(titles[phase], fontsize=10)
                ax.legend(fontsize=7)
        axes[-1][c].set_xlabel("tokens seen")
    fig.suptitle("Pretraining curves")
    fig.tight_layout()
    save_figure(fig, paths)


def read_eval_runs(path: str | Path) -> pd.DataFrame:
    """Read ``results/eval_runs.tsv`` (one row per fine-tuning run).

    Raises:
        ValueError: a column of ``EVAL_RUN_COLUMNS`` is missing, the table is empty,
            or a score is outside [0, 1] (names the file and line).
    """
    df = pd.read_csv(path, sep="\t")
    missing = [c for c in EVAL_RUN_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: columns {missing} missing; expected at least {list(EVAL_RUN_COLUMNS)}")
    if df.empty:
        raise ValueError(f"{path}: no evaluation runs")
    bad = df[(df["score"] < 0) | (df["score"] > 1)]
    if not bad.empty:
        i = bad.index[0]
        raise ValueError(f"{path}: line {i + 2}: score {float(df.loc[i, 'score'])!r} is outside [0, 1] "
                         f"(scores are fractions)")
    return df


def eval_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample standard deviation (ddof=1; NaN for one seed) and seed count per (task, model)."""
    g = runs.groupby(["task", "model"], sort=False)["score"]
    return g.agg(mean="mean", std="std", n="count").reset_index()


def plot_eval_scores(runs: pd.DataFrame, paths: Sequence[str | Path], model_order: Iterable[str] | None = None,
                     task_order: Iterable[str] | None = None) -> None:
    """Per task, each model's mean score over seeds (bar), its standard deviation (error bar) and every seed (dots).

    Args:
        runs: one row per run with ``model``, ``task``, ``seed``, ``score`` (fraction in [0, 1]; shown x100).
        paths: output files (PNG, SVG).
        model_order: models in legend order (default: first appearance); others follow.
        task_order: tasks in panel order (default: first appearance).

    Raises:
        ValueError: ``runs`` is empty or lacks a column.
    """
    missing = [c for c in EVAL_RUN_COLUMNS if c not in runs.columns]
    if missing:
        raise ValueError(f"evaluation runs lack columns {missing}")
    if runs.empty:
        raise ValueError("no evaluation runs to plot")
    plt = _pyplot()
    models = list(dict.fromkeys([m for m in (model_order or []) if m in set(runs["model"])] + list(runs["model"])))
    tasks = list(dict.fromkeys([t for t in (task_order or []) if t in set(runs["task"])] + list(runs["task"])))
    summary = eval_summary(runs).set_index(["task", "model"])
    width = 0.8 / len(models)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(tasks) * max(1, len(models)) * 0.45 + 2), 4.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, model in enumerate(models):
        xs, means, stds = [], [], []
        for i, task in enumerate(tasks):
            if (task, model) in summary.index:
                s = summary.loc[(task, model)]
                xs.append(i - 0.4 + width * (j + 0.5))
                means.append(100 * s["mean"])
                stds.append(0.0 if pd.isna(s["std"]) else 100 * s["std"])
        color = colors[j % len(colors)]
        ax.bar(xs, means, width=width * 0.9, yerr=stds, capsize=2, label=model, color=color, alpha=0.75)
        for x, task in zip(xs, [t for t in tasks if (t, model) in summary.index]):
            pts = runs[(runs["task"] == task) & (runs["model"] == model)]["score"] * 100
            ax.scatter([x] * len(pts), pts, s=6, color="black", zorder=3)
    ax.set_xticks(range(len(tasks)))
    ax.set_xticklabels(tasks, rotation=20, ha="right")
    ax.set_ylabel("test score x100 (mean ± std over seeds)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, title="model", title_fontsize=7, bbox_to_anchor=(1.01, 1.0), loc="upper left")
    ax.set_title("Evaluation results per task")
    fig.tight_layout()
    save_figure(fig, paths)


def plot_claims_drift(df: pd.DataFrame, low: Sequence[int], paths: Sequence[str | Path],
                      objectives: Mapping[str, str] | None = None) -> None:
    """The claims figure (C2, C3): per variant and phase, the mean relative weight change and the mean
    CKA to the base over the low layers (``low``: the paper's 0-7 of 22, scaled) and over the rest.

    Two panels (weight change, CKA), one group of bars per variant, four bars each (low / rest x
    after phase 1 / after the decay). The paper's expectation is written on each panel: CLM's low
    layers move more (higher weight change, lower CKA) than MLM's.

    Raises:
        ValueError: ``df`` lacks the drift table's columns.
    """
    _check_drift(df)
    plt = _pyplot()
    numeric = df[df["layer"].astype(str).str.fullmatch(r"\d+")].copy()
    numeric["band"] = numeric["layer"].astype(int).isin(list(low)).map({True: "low", False: "rest"})
    variants = list(dict.fromkeys(numeric["variant"]))
    fig, axes = plt.subplots(1, 2, figsize=(max(7.0, 1.6 * len(variants) + 3), 3.8))
    bars = [(band, phase) for phase in ("phase1", "decay") for band in ("low", "rest")]
    width = 0.8 / len(bars)
    for ax, (metric, module, label, expect) in zip(axes, (
            ("rel_weight_change", "all", "relative weight change", "paper: CLM > MLM on the low layers"),
            ("cka", "hidden_states", "linear CKA to the base", "paper: CLM < MLM on the low layers"))):
        sel = numeric[(numeric["metric"] == metric) & (numeric["module_type"] == module)]
        means = sel.groupby(["variant", "band", "phase"])["value"].mean()
        for k, (band, phase) in enumerate(bars):
            xs = [i + (k - (len(bars) - 1) / 2) * width for i in range(len(variants))]
            ys = [means.get((v, band, phase), math.nan) for v in variants]
            ax.bar(xs, ys, width, label=f"{band} layers, {PHASE_TITLES[phase]}",
                   hatch="" if band == "low" else "//", alpha=1.0 if phase == "phase1" else 0.55,
                   color="tab:red" if band == "low" else "tab:gray")
        ax.set_xticks(range(len(variants)))
        ax.set_xticklabels([f"{v}\n({objectives.get(v, '?')})" if objectives else v for v in variants], fontsize=7)
        ax.set_ylabel(label)
        ax.set_title(expect, fontsize=8)
    axes[0].legend(fontsize=6, loc="upper right")
    fig.suptitle(f"what changed, low layers 0-{low[-1]} vs the rest (claims C2, C3)", fontsize=9)
    fig.tight_layout()
    save_figure(fig, paths)
