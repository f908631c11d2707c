"""The paper's claims, tested on this run's own results: ``results/claims.tsv`` and ``results/claims.md``.

One row per claim of the CLM-detour paper (cpt-fr-base's card and the paper's abstract;
docs/fidelity.md), each with the paper's figure, this run's figure, the evidence, the test and its p
where one applies, and a verdict from a fixed vocabulary (:data:`VERDICTS`). The rules behind the
verdicts, with their thresholds, are written once in docs/claims.md and implemented here:

- **C1** the detour beats the matched MLM baseline across tasks: the table's one-sided exact sign test
  over tasks (``{detour}`` row of ``eval_table.tsv``), the mean difference and the per-task paired tests.
- **C2** CLM's phase 1 changes the low layers (the paper's layers 0-7 of 22, scaled to the model's depth:
  :func:`low_layers`) more than MLM's phase 1: relative weight change and linear CKA to the base,
  low layers against the rest, CLM against MLM (``layer_drift.tsv``).
- **C3** the change persists through the MLM decay: the CLM-MLM gap of C2's measures after the decay
  against after phase 1 (and for the long-decay ablation when it was analysed).
- **C4** freezing the low layers during CLM removes the gain, freezing middle layers keeps it: the
  freeze variants' differences to the baseline and to the detour across tasks, with sign tests and MDDs.
- **C5** the representational change grows with model size: compared with a second run's drift table
  of another depth (``claims.compare_drift``); otherwise not measured.

Every pretraining arm is one run (one pretraining seed): the fine-tuning seeds give the tests their
variance, so no verdict says anything about pretraining-seed variance, and C2, C3 and C5 (measures
of single models) carry no p-value. A run whose controls fail (``mlm-baseline`` not ahead of
``random-init``, or a task where both arms sit at the trivial score) reports C1 and C4 as
``cannot be read``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from clmdetour.evaluation.stats import sign_test
from clmdetour.io import atomic_write_text

#: The verdict vocabulary (docs/claims.md); a verdict may add a reason in parentheses.
VERDICTS = ("supported", "not supported", "inconclusive", "cannot be read", "not measured")
COLUMNS = ["claim", "statement", "paper", "this_run", "evidence", "test", "p", "verdict"]
#: The paper's low layers: 0-7 of ModernCamemBERT's 22 (cpt-fr-base card, "freeze ablations").
PAPER_LOW_LAYERS, PAPER_DEPTH = 8, 22
ALPHA = 0.05
#: C2/C3: CLM's weight change must exceed MLM's by this factor, and its CKA lie this far below MLM's.
WEIGHT_RATIO_MARGIN = 1.1
CKA_MARGIN = 0.01
#: C3: the share of phase 1's CLM-MLM gap that must remain after the decay.
PERSIST_FRACTION = 0.5
#: A task where both arms score within this of the trivial score (fraction units: 1 point) fails the control.
TRIVIAL_MARGIN = 0.01


@dataclass(frozen=True)
class ClaimsSpec:
    """Which models play which part, and the model's depth.

    Attributes:
        detour, baseline: the CLM-detour variant and the matched MLM baseline (``evaluation.baseline``).
        freeze_low, freeze_mid, long_decay: the ablation variants (None when the config has none).
        control: the untrained model of the positive control (``random-init``), or None.
        num_layers: encoder layers of the model (``base_model.num_layers``).
        tie_tolerance: ``evaluation.tie_tolerance`` (fraction units).
        compare_drift: another run's ``layer_drift.tsv`` for C5 (a model of another depth), or None.
    """

    detour: str
    baseline: str
    num_layers: int
    freeze_low: str | None = None
    freeze_mid: str | None = None
    long_decay: str | None = None
    control: str | None = None
    tie_tolerance: float = 0.0005
    compare_drift: str | None = None


def low_layers(num_layers: int) -> list[int]:
    """The paper's low layers (0-7 of 22) scaled to ``num_layers``: ``0 .. round(8 / 22 x L) - 1``, at least one.

    Raises:
        ValueError: ``num_layers`` < 2 (no layer would be left as "the rest").
    """
    if num_layers < 2:
        raise ValueError(f"num_layers must be at least 2 to split low layers from the rest, got {num_layers}")
    return list(range(max(1, min(num_layers - 1, round(PAPER_LOW_LAYERS / PAPER_DEPTH * num_layers)))))


def _rows(table: pd.DataFrame | None) -> dict[str, dict]:
    return {} if table is None else {r["model"]: r for r in table.to_dict("records")}


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:+.1f}"


def _p(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.3g}"


def control_failure(table: pd.DataFrame | None, tasks: Sequence[str], spec: ClaimsSpec) -> str | None:
    """Why the run's downstream controls fail (C1 and C4 then cannot be read), or None.

    Fails when ``spec.control`` is in the table and ``spec.baseline`` does not win more tasks than it
    loses against it (the pipeline did not detect pretraining), or when on some task both the detour
    and the baseline score within :data:`TRIVIAL_MARGIN` of the trivial score (that task measures nothing).
    """
    rows = _rows(table)
    if spec.control and spec.control in rows and spec.baseline in rows:
        res = sign_test([_num(rows[spec.baseline][f"{t}_mean"]) - _num(rows[spec.control][f"{t}_mean"])
                         for t in tasks], spec.tie_tolerance)
        if res.wins <= res.losses:
            return (f"positive control failed: {spec.baseline} vs {spec.control} {res.wins} wins / {res.ties} ties / "
                    f"{res.losses} losses")
    trivial = rows.get("trivial", {})
    flat = [t for t in tasks if spec.detour in rows and spec.baseline in rows
            and max(_num(rows[spec.detour][f"{t}_mean"]), _num(rows[spec.baseline][f"{t}_mean"]))
            <= _num(trivial.get(f"{t}_mean")) + TRIVIAL_MARGIN]
    if flat:
        return f"task(s) at the trivial score: {', '.join(flat)}"
    return None


def sign_verdict(wins: int, losses: int, n_tasks: int, p: float, mean_delta: float, mdd: float) -> str:
    """The verdict of a one-sided "beats across tasks" claim (docs/claims.md, C1 and C4).

    ``supported``: p < 0.05 and a positive mean difference; ``not supported``: no more wins than
    losses or a mean difference <= 0; ``inconclusive (too few tasks)`` when even N wins of N tasks
    could not reach p < 0.05 (N < 5); ``inconclusive (below the MDD)`` when the mean difference is
    under the mean minimum detectable difference; else ``inconclusive (p >= 0.05)``.
    """
    if n_tasks and 0.5 ** n_tasks >= ALPHA:
        return f"inconclusive (too few tasks: {n_tasks} cannot reach p < {ALPHA})"
    if not math.isnan(p) and p < ALPHA and mean_delta > 0:
        return "supported"
    if wins <= losses or not mean_delta > 0:
        return "not supported"
    if not math.isnan(mdd) and mean_delta < mdd:
        return "inconclusive (below the MDD)"
    return f"inconclusive (p >= {ALPHA})"


def _versus(rows: dict, tasks: Sequence[str], model: str, other: str, tol: float) -> dict:
    """Per-task differences ``model - other``, the sign test, mean difference and (against the baseline) mean MDD."""
    deltas = [_num(rows[model][f"{t}_mean"]) - _num(rows[other][f"{t}_mean"]) for t in tasks]
    res = sign_test(deltas, tol)
    valid = [d for d in deltas if not math.isnan(d)]
    mdds = [_num(rows[model].get(f"{t}_mdd")) for t in tasks]
    mdds = [m for m in mdds if not math.isnan(m)]
    return {"wins": res.wins, "ties": res.ties, "losses": res.losses, "p": res.p, "n": len(valid),
            "mean": sum(valid) / len(valid) if valid else math.nan, "mdd": sum(mdds) / len(mdds) if mdds else math.nan}


def claim_c1(table: pd.DataFrame | None, tasks: Sequence[str], spec: ClaimsSpec) -> dict:
    """C1: the detour beats the matched MLM baseline across tasks (sign test of the table's detour row)."""
    row = {"claim": "C1", "statement": f"{spec.detour} beats the matched MLM baseline {spec.baseline} across tasks",
           "paper": "8 / 8 tasks, sign p = 0.004, +2.9 points (60.8 vs 57.9)", "test": "one-sided exact sign test over tasks"}
    rows = _rows(table)
    if spec.detour not in rows or spec.baseline not in rows or not tasks:
        return dict(row, this_run="", evidence="", p=math.nan, verdict=(
            f"not measured ({spec.detour} and {spec.baseline} must both be in evaluation.models, with tasks in "
            "evaluation.tasks)"))
    v = _versus(rows, tasks, spec.detour, spec.baseline, spec.tie_tolerance)
    paired = ", ".join(f"{t} {_p(_num(rows[spec.detour].get(f'{t}_p_paired'))) or 'n/a'}" for t in tasks)
    this = f"{v['wins']} / {v['ties']} / {v['losses']} (wins / ties / losses) of {len(tasks)}, mean Δ {_pct(v['mean'])} points"
    evidence = f"per-task paired p: {paired}; mean MDD {_pct(v['mdd'])} points"
    failed = control_failure(table, tasks, spec)
    verdict = (f"cannot be read ({failed})" if failed else
               sign_verdict(v["wins"], v["losses"], v["n"], v["p"], v["mean"], v["mdd"]))
    return dict(row, this_run=this, evidence=evidence, p=v["p"], verdict=verdict)


def _drift_means(drift: pd.DataFrame, variant: str, phase: str, low: Sequence[int]) -> dict | None:
    """Mean relative weight change (module ``all``) and mean CKA (hidden states) over the low layers and the rest."""
    d = drift[(drift["variant"] == variant) & (drift["phase"] == phase)]
    if d.empty:
        return None
    numeric = d[d["layer"].astype(str).str.fullmatch(r"\d+")]
    layer = numeric["layer"].astype(int)
    out = {}
    for metric, module in (("rel_weight_change", "all"), ("cka", "hidden_states")):
        sel = numeric[(numeric["metric"] == metric) & (numeric["module_type"] == module)]
        is_low = layer.loc[sel.index].isin(list(low))
        lo, rest = sel[is_low]["value"].astype(float), sel[~is_low]["value"].astype(float)
        out[metric] = (lo.mean() if len(lo) else math.nan, rest.mean() if len(rest) else math.nan)
    return out


def _drift_text(name: str, m: dict) -> str:
    return (f"{name}: weight change low {m['rel_weight_change'][0]:.3f} / rest {m['rel_weight_change'][1]:.3f}, "
            f"CKA low {m['cka'][0]:.3f} / rest {m['cka'][1]:.3f}")


def c2_verdict(wc_low: float, wc_rest: float, cka_low: float, cka_rest: float) -> str:
    """C2's verdict from the CLM/MLM weight-change ratios (low layers, the rest) and the CLM-MLM CKA gaps
    (MLM's CKA minus CLM's, low layers and the rest); the rule of docs/claims.md.

    ``supported`` needs CLM to move the low layers more than MLM (ratio > :data:`WEIGHT_RATIO_MARGIN`, CKA gap
    > :data:`CKA_MARGIN`) *and* the move to concentrate there, as the paper says (its layers 0-7 "far more
    than MLM"): the low layers' ratio > :data:`WEIGHT_RATIO_MARGIN` x the rest's and their CKA gap more than
    :data:`CKA_MARGIN` above the rest's. CLM moving every layer alike is ``not supported (not specific to the
    low layers ...)``.
    """
    beyond_mlm = wc_low > WEIGHT_RATIO_MARGIN and cka_low > CKA_MARGIN
    concentrated = wc_low > WEIGHT_RATIO_MARGIN * wc_rest and cka_low > cka_rest + CKA_MARGIN
    if beyond_mlm and concentrated:
        return "supported"
    if wc_low < 1 and cka_low < 0:
        return "not supported"
    if beyond_mlm:
        return (f"not supported (not specific to the low layers: CLM moves the rest as much, weight change "
                f"{wc_low:.2f}x MLM's low vs {wc_rest:.2f}x rest, CKA gap {cka_low:+.3f} low vs {cka_rest:+.3f} rest)")
    return "inconclusive (the two measures disagree or lie within their margins)"


def claim_c2(drift: pd.DataFrame | None, spec: ClaimsSpec) -> dict:
    """C2: CLM's phase 1 changes the low layers more than MLM's phase 1, and more than it changes the rest
    (weight change and CKA; :func:`c2_verdict`)."""
    low = low_layers(spec.num_layers)
    row = {"claim": "C2", "statement": (f"CLM's phase 1 changes the low layers (0-{low[-1]} of {spec.num_layers}: the "
                                        f"paper's 0-7 of 22, scaled) more than MLM's phase 1, and more than the rest"),
           "paper": "the low layers carry the change (freezing them removes the gain)",
           "test": (f"no test: one pretraining run per arm; low layers: weight change > {WEIGHT_RATIO_MARGIN}x MLM's and "
                    f"CKA > {CKA_MARGIN} below MLM's, and both CLM-MLM gaps larger in the low layers than in the rest "
                    f"(ratio x {WEIGHT_RATIO_MARGIN}, CKA + {CKA_MARGIN})"), "p": math.nan}
    clm = _drift_means(drift, spec.detour, "phase1", low) if drift is not None else None
    mlm = _drift_means(drift, spec.baseline, "phase1", low) if drift is not None else None
    if clm is None or mlm is None:
        return dict(row, this_run="", evidence="", verdict=(
            f"not measured (the layer drift of {spec.detour} and {spec.baseline} after phase 1: rule layer_drift)"))
    wc_ratio = clm["rel_weight_change"][0] / mlm["rel_weight_change"][0] if mlm["rel_weight_change"][0] else math.inf
    rest_ratio = clm["rel_weight_change"][1] / mlm["rel_weight_change"][1] if mlm["rel_weight_change"][1] else math.inf
    cka_gap = mlm["cka"][0] - clm["cka"][0]
    cka_rest = mlm["cka"][1] - clm["cka"][1]
    this = (f"low layers: weight change {wc_ratio:.2f}x MLM's (rest {rest_ratio:.2f}x), CKA {cka_gap:+.3f} below MLM's "
            f"(rest {cka_rest:+.3f})")
    evidence = f"{_drift_text(spec.detour, clm)}; {_drift_text(spec.baseline, mlm)}"
    return dict(row, this_run=this, evidence=evidence, verdict=c2_verdict(wc_ratio, rest_ratio, cka_gap, cka_rest))


def claim_c3(drift: pd.DataFrame | None, spec: ClaimsSpec) -> dict:
    """C3: the low-layer change persists through the decay (CLM-MLM gap after the decay vs after phase 1)."""
    low = low_layers(spec.num_layers)
    row = {"claim": "C3", "statement": "the low-layer change persists through the MLM decay",
           "paper": "the representational change survives the decay",
           "test": (f"no test: one pretraining run per arm; after the decay the CLM-MLM low-layer gap keeps "
                    f">= {PERSIST_FRACTION:.0%} of its phase-1 size, in weight change and in CKA"), "p": math.nan}
    m = {} if drift is None else {(v, ph): _drift_means(drift, v, ph, low)
                                  for v in (spec.detour, spec.baseline) for ph in ("phase1", "decay")}
    if not m or any(x is None for x in m.values()):
        return dict(row, this_run="", evidence="", verdict=(
            f"not measured (the layer drift of {spec.detour} and {spec.baseline} after phase 1 and after the decay)"))

    def gap(clm: dict, mlm: dict) -> tuple[float, float]:
        return clm["rel_weight_change"][0] - mlm["rel_weight_change"][0], mlm["cka"][0] - clm["cka"][0]

    before = gap(m[(spec.detour, "phase1")], m[(spec.baseline, "phase1")])
    decays = {spec.detour: m[(spec.detour, "decay")]}
    if spec.long_decay and _drift_means(drift, spec.long_decay, "decay", low) is not None:
        decays[spec.long_decay] = _drift_means(drift, spec.long_decay, "decay", low)  # it reuses the detour's phase 1
    parts, verdicts = [], []
    for variant, after_decay in decays.items():
        after = gap(after_decay, m[(spec.baseline, "decay")])
        kept = [after[i] / before[i] if before[i] > 0 else math.nan for i in (0, 1)]
        parts.append(f"{variant}: weight-change gap {before[0]:+.3f} -> {after[0]:+.3f}, CKA gap {before[1]:+.3f} -> "
                     f"{after[1]:+.3f} (phase 1 -> decay)")
        if any(math.isnan(k) for k in kept):
            verdicts.append((variant, "inconclusive (no CLM-MLM gap after phase 1 to persist)"))
        elif all(k >= PERSIST_FRACTION for k in kept):
            verdicts.append((variant, "supported"))
        elif all(k <= 0 for k in kept):
            verdicts.append((variant, "not supported"))
        else:
            verdicts.append((variant, "inconclusive (part of the gap remains)"))
    if len({v for _, v in verdicts}) == 1:
        verdict = verdicts[0][1]
    else:  # the variants disagree: say what each shows, without nesting verdicts
        verdict = "inconclusive (" + "; ".join(f"{variant}: {v.split(' (', 1)[1].rstrip(')') if v.startswith('inconclusive') else v}"
                                               for variant, v in verdicts) + ")"
    return dict(row, this_run="; ".join(parts), evidence=f"low layers 0-{low[-1]}", verdict=verdict)


def claim_c4(table: pd.DataFrame | None, tasks: Sequence[str], spec: ClaimsSpec) -> dict:
    """C4: freezing the low layers during CLM removes the gain; freezing middle layers keeps it."""
    row = {"claim": "C4", "statement": (f"freezing the low layers during CLM ({spec.freeze_low}) removes the gain, "
                                        f"freezing middle layers ({spec.freeze_mid}) keeps it"),
           "paper": "low layers 0-7 frozen: the gain is gone; middle layers frozen: the gain stays",
           "test": "one-sided sign tests over tasks: detour > freeze-low, freeze-mid > baseline"}
    rows = _rows(table)
    need = [m for m in (spec.detour, spec.baseline, spec.freeze_low, spec.freeze_mid) if m]
    if not spec.freeze_low or not spec.freeze_mid or any(m not in rows for m in need) or not tasks:
        return dict(row, this_run="", evidence="", p=math.nan, verdict=(
            f"not measured (add {spec.freeze_low or 'a freeze-low variant'} and {spec.freeze_mid or 'a freeze-mid variant'} "
            "to evaluation.models: they are pretrained and analysed, not fine-tuned)"))
    low_vs = _versus(rows, tasks, spec.detour, spec.freeze_low, spec.tie_tolerance)
    mid_vs = _versus(rows, tasks, spec.freeze_mid, spec.baseline, spec.tie_tolerance)
    low_base = _versus(rows, tasks, spec.freeze_low, spec.baseline, spec.tie_tolerance)
    this = (f"{spec.freeze_low} - {spec.baseline} {_pct(low_base['mean'])} points; {spec.freeze_mid} - {spec.baseline} "
            f"{_pct(mid_vs['mean'])} points; {spec.detour} - {spec.freeze_low} {_pct(low_vs['mean'])} points")
    evidence = (f"{spec.detour} vs {spec.freeze_low}: {low_vs['wins']} / {low_vs['ties']} / {low_vs['losses']}, p "
                f"{_p(low_vs['p']) or 'n/a'}; {spec.freeze_mid} vs {spec.baseline}: {mid_vs['wins']} / {mid_vs['ties']} / "
                f"{mid_vs['losses']}, p {_p(mid_vs['p']) or 'n/a'}; mean MDD vs {spec.baseline} {_pct(mid_vs['mdd'])} points")
    failed = control_failure(table, tasks, spec)
    c1 = claim_c1(table, tasks, spec)["verdict"]
    p = max(low_vs["p"], mid_vs["p"]) if not (math.isnan(low_vs["p"]) or math.isnan(mid_vs["p"])) else math.nan
    if failed:
        verdict = f"cannot be read ({failed})"
    elif not c1.startswith("supported"):
        verdict = f"cannot be read (no gain to remove: C1 is {c1.split(' (', 1)[0]})"
    else:
        a = sign_verdict(low_vs["wins"], low_vs["losses"], low_vs["n"], low_vs["p"], low_vs["mean"], math.nan)
        b = sign_verdict(mid_vs["wins"], mid_vs["losses"], mid_vs["n"], mid_vs["p"], mid_vs["mean"], mid_vs["mdd"])
        verdict = a if a == b else (f"not supported (detour vs freeze-low: {a}; freeze-mid vs baseline: {b})"
                                    if "not supported" in (a, b) else f"inconclusive (detour vs freeze-low: {a}; "
                                                                      f"freeze-mid vs baseline: {b})")
    return dict(row, this_run=this, evidence=evidence, p=p, verdict=verdict)


def claim_c5(drift: pd.DataFrame | None, other: pd.DataFrame | None, spec: ClaimsSpec) -> dict:
    """C5: the CLM-MLM low-layer CKA gap grows with model size (this run against ``claims.compare_drift``)."""
    row = {"claim": "C5", "statement": "the representational change grows with model size",
           "paper": "larger in the Large model than in the Base", "p": math.nan,
           "test": "no test: one run per size; the CLM-MLM low-layer CKA gap after phase 1, deeper model vs shallower"}
    if drift is None or other is None:
        return dict(row, this_run="", evidence="", verdict=(
            "not measured (one model size in this run; set claims.compare_drift to another size's "
            "results/analysis/layer_drift.tsv)"))

    def gap(table: pd.DataFrame) -> tuple[int, float]:
        depth = int(table[table["layer"].astype(str).str.fullmatch(r"\d+")]["layer"].astype(int).max()) + 1
        low = low_layers(depth)
        clm, mlm = (_drift_means(table, v, "phase1", low) for v in (spec.detour, spec.baseline))
        return depth, (mlm["cka"][0] - clm["cka"][0]) if clm and mlm else math.nan

    (d1, g1), (d2, g2) = gap(drift), gap(other)
    if d1 == d2 or math.isnan(g1) or math.isnan(g2):
        return dict(row, this_run="", evidence=f"depths {d1} and {d2}", verdict=(
            "not measured (claims.compare_drift must hold the detour and the baseline of a model of another depth)"))
    (small, gs), (large, gl) = sorted([(d1, g1), (d2, g2)])
    this = f"CKA gap {gs:+.3f} at {small} layers, {gl:+.3f} at {large} layers"
    verdict = "supported" if gl > gs + CKA_MARGIN else ("not supported" if gl < gs - CKA_MARGIN else
                                                        "inconclusive (within the CKA margin)")
    return dict(row, this_run=this, evidence=f"low layers scaled per depth ({small}: 0-{low_layers(small)[-1]}, "
                f"{large}: 0-{low_layers(large)[-1]})", verdict=verdict)


def build_claims(table: pd.DataFrame | None, tasks: Sequence[str], drift: pd.DataFrame | None, spec: ClaimsSpec,
                 other_drift: pd.DataFrame | None = None) -> pd.DataFrame:
    """The claims table (:data:`COLUMNS`), C1 to C5, from the evaluation table (or None) and the drift table (or None)."""
    rows = [claim_c1(table, tasks, spec), claim_c2(drift, spec), claim_c3(drift, spec), claim_c4(table, tasks, spec),
            claim_c5(drift, other_drift, spec)]
    return pd.DataFrame(rows, columns=COLUMNS)


def claims_markdown(claims: pd.DataFrame, note: str = "") -> str:
    """``results/claims.md``: the claims as a Markdown table, then the rules' reference and ``note``."""
    def cell(x) -> str:
        if isinstance(x, float):
            return "" if math.isnan(x) else f"{x:.3g}"
        return str(x).replace("|", "/")

    lines = ["| claim | statement | paper | this run | evidence | test | p | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for r in claims.to_dict("records"):
        lines.append("| " + " | ".join(cell(r[c]) for c in COLUMNS) + " |")
    lines += ["", ("Verdicts follow the rules of docs/claims.md. Each pretraining arm is one run (one pretraining "
              "seed): the tests' variance is the fine-tuning seeds', and no verdict covers pretraining-seed variance.")]
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def write_claims(claims: pd.DataFrame, tsv: str, md: str, note: str = "") -> None:
    """Write ``claims.tsv`` and ``claims.md`` atomically."""
    atomic_write_text(tsv, claims.to_csv(sep="\t", index=False, na_rep=""))
    atomic_write_text(md, claims_markdown(claims, note))


def spec_from_config(config: Mapping) -> ClaimsSpec:
    """The :class:`ClaimsSpec` of a validated config (``claims`` section, ``evaluation.baseline``,
    ``base_model.num_layers``); a named ablation the config does not define becomes None."""
    c = config.get("claims") or {}
    variants = config["pretraining"]["variants"]
    refs = config.get("reference_models") or {}

    def known(name):
        return name if name and name in variants else None

    control = c.get("control")
    return ClaimsSpec(detour=c.get("detour", "clm-detour"), baseline=config["evaluation"]["baseline"],
                      num_layers=int(config["base_model"]["num_layers"]),
                      freeze_low=known(c.get("freeze_low")), freeze_mid=known(c.get("freeze_mid")),
                      long_decay=known(c.get("long_decay")), control=control if control in refs else None,
                      tie_tolerance=float(config["evaluation"]["tie_tolerance"]), compare_drift=c.get("compare_drift"))
