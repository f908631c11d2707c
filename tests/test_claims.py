"""The claims table: each claim fed synthetic evaluation and drift tables where it holds, fails and cannot be decided."""
import math

import pandas as pd
import pytest

from clmdetour.evaluation.claims import (
    ClaimsSpec,
    build_claims,
    claim_c1,
    claim_c2,
    claim_c3,
    claim_c4,
    claim_c5,
    claims_markdown,
    low_layers,
    sign_verdict,
)

TASKS = [f"t{i}" for i in range(8)]
SPEC = ClaimsSpec(detour="clm-detour", baseline="mlm-baseline", num_layers=22, freeze_low="clm-freeze-low",
                  freeze_mid="clm-freeze-mid", control="random-init")


def table(means: dict[str, list[float]], trivial: float = 0.1, mdd: float = 0.005) -> pd.DataFrame:
    """An eval table with the columns the claims read: per model and task a mean, an MDD and a paired p."""
    rows = []
    for model, values in means.items():
        row = {"model": model}
        for t, v in zip(TASKS, values):
            row.update({f"{t}_mean": v, f"{t}_mdd": mdd, f"{t}_p_paired": 0.04})
        rows.append(row)
    rows.append({"model": "trivial", **{f"{t}_mean": trivial for t in TASKS}})
    return pd.DataFrame(rows)


BASE = [0.50, 0.55, 0.60, 0.45, 0.70, 0.52, 0.58, 0.61]


def plus(values, d):
    return [v + d for v in values]


def test_low_layers_scale_the_papers_0_to_7_of_22():
    assert low_layers(22) == list(range(8)) and low_layers(6) == [0, 1] and low_layers(28) == list(range(10))
    assert low_layers(2) == [0]
    with pytest.raises(ValueError, match="at least 2"):
        low_layers(1)


def test_c1_supported_not_supported_too_few_tasks_and_failed_controls():
    good = table({"clm-detour": plus(BASE, 0.03), "mlm-baseline": BASE, "random-init": plus(BASE, -0.2)})
    c1 = claim_c1(good, TASKS, SPEC)
    assert c1["verdict"] == "supported" and c1["p"] == pytest.approx(0.5 ** 8)
    assert c1["this_run"].startswith("8 / 0 / 0 (wins / ties / losses) of 8, mean Δ +3.0 points")
    worse = table({"clm-detour": [v + (0.01 if i < 3 else -0.01) for i, v in enumerate(BASE)], "mlm-baseline": BASE,
                   "random-init": plus(BASE, -0.2)})
    assert claim_c1(worse, TASKS, SPEC)["verdict"] == "not supported"
    assert claim_c1(good, TASKS[:4], SPEC)["verdict"].startswith("inconclusive (too few tasks: 4 cannot reach p < 0.05)")
    # the positive control fails: random-init ahead of the baseline
    no_control = table({"clm-detour": plus(BASE, 0.03), "mlm-baseline": BASE, "random-init": plus(BASE, 0.1)})
    assert claim_c1(no_control, TASKS, SPEC)["verdict"].startswith("cannot be read (positive control failed: mlm-baseline "
                                                                   "vs random-init 0 wins / 0 ties / 8 losses")
    at_prior = table({"clm-detour": plus(BASE, 0.03), "mlm-baseline": BASE, "random-init": plus(BASE, -0.2)}, trivial=0.9)
    assert claim_c1(at_prior, TASKS, SPEC)["verdict"].startswith("cannot be read (task(s) at the trivial score")
    assert claim_c1(None, TASKS, SPEC)["verdict"].startswith("not measured")


def test_sign_verdict_reads_the_mdd():
    assert sign_verdict(5, 3, 8, 0.36, 0.002, 0.01) == "inconclusive (below the MDD)"
    assert sign_verdict(5, 3, 8, 0.36, 0.02, 0.01) == "inconclusive (p >= 0.05)"
    assert sign_verdict(6, 0, 8, 0.016, 0.02, math.nan) == "supported"


def drift(values: dict[tuple[str, str], tuple[float, float, float, float]], layers: int = 22) -> pd.DataFrame:
    """A drift table: per (variant, phase) the weight change of low / other layers and the CKA of low / other layers."""
    low = set(low_layers(layers))
    rows = []
    for (variant, phase), (wc_low, wc_rest, cka_low, cka_rest) in values.items():
        for i in range(layers):
            rows.append({"variant": variant, "phase": phase, "layer": str(i), "module_type": "all",
                         "metric": "rel_weight_change", "value": wc_low if i in low else wc_rest})
            rows.append({"variant": variant, "phase": phase, "layer": str(i), "module_type": "hidden_states",
                         "metric": "cka", "value": cka_low if i in low else cka_rest})
        rows.append({"variant": variant, "phase": phase, "layer": "embeddings", "module_type": "hidden_states",
                     "metric": "cka", "value": 0.0})  # not a layer: never averaged in
    return pd.DataFrame(rows)


def test_c2_and_c3_hold_fail_and_cannot_be_decided():
    holds = drift({("clm-detour", "phase1"): (0.21, 0.19, 0.70, 0.80), ("mlm-baseline", "phase1"): (0.09, 0.09, 0.98, 0.97),
                   ("clm-detour", "decay"): (0.22, 0.20, 0.80, 0.85), ("mlm-baseline", "decay"): (0.10, 0.10, 0.97, 0.96)})
    c2 = claim_c2(holds, SPEC)
    assert c2["verdict"] == "supported" and "low layers (0-7 of 22" in c2["statement"]
    assert c2["this_run"] == "low layers: weight change 2.33x MLM's (rest 2.11x), CKA +0.280 below MLM's (rest +0.170)"
    c3 = claim_c3(holds, SPEC)
    assert c3["verdict"] == "supported" and "CKA gap +0.280 -> +0.170" in c3["this_run"]
    fails = drift({("clm-detour", "phase1"): (0.05, 0.05, 0.99, 0.99), ("mlm-baseline", "phase1"): (0.09, 0.09, 0.97, 0.97),
                   ("clm-detour", "decay"): (0.05, 0.05, 0.99, 0.99), ("mlm-baseline", "decay"): (0.09, 0.09, 0.97, 0.97)})
    assert claim_c2(fails, SPEC)["verdict"] == "not supported"
    assert claim_c3(fails, SPEC)["verdict"].startswith("inconclusive (no CLM-MLM gap after phase 1")
    mixed = drift({("clm-detour", "phase1"): (0.20, 0.20, 0.975, 0.97), ("mlm-baseline", "phase1"): (0.10, 0.10, 0.98, 0.98),
                   ("clm-detour", "decay"): (0.09, 0.09, 0.99, 0.99), ("mlm-baseline", "decay"): (0.10, 0.10, 0.98, 0.98)})
    assert claim_c2(mixed, SPEC)["verdict"].startswith("inconclusive")
    assert claim_c3(mixed, SPEC)["verdict"] == "not supported"  # the decay undid the gap
    assert claim_c2(None, SPEC)["verdict"].startswith("not measured")


def test_c2_is_not_supported_when_clm_moves_every_layer_alike():
    """The demo's pattern: CLM moves every layer about 2x as much as MLM, the rest's CKA even more: C2 is the
    concentration in the low layers, so that is no support (the verdict says why)."""
    alike = drift({("clm-detour", "phase1"): (0.226, 0.219, 0.816, 0.62), ("mlm-baseline", "phase1"): (0.10, 0.10, 0.90, 0.90)})
    c2 = claim_c2(alike, SPEC)
    assert c2["verdict"].startswith("not supported (not specific to the low layers")
    assert "2.26x MLM's low vs 2.19x rest" in c2["verdict"] and "+0.084 low vs +0.280 rest" in c2["verdict"]
    # the same low-layer change with a quiet rest is supported
    quiet_rest = drift({("clm-detour", "phase1"): (0.226, 0.11, 0.816, 0.89), ("mlm-baseline", "phase1"): (0.10, 0.10, 0.90, 0.90)})
    assert claim_c2(quiet_rest, SPEC)["verdict"] == "supported"
    # concentrated in one measure only (weight change) is not enough
    half = drift({("clm-detour", "phase1"): (0.226, 0.11, 0.816, 0.816), ("mlm-baseline", "phase1"): (0.10, 0.10, 0.90, 0.90)})
    assert claim_c2(half, SPEC)["verdict"].startswith("not supported (not specific")


def test_c4_reads_both_dissociations_and_needs_c1():
    base = {"mlm-baseline": BASE, "random-init": plus(BASE, -0.2)}
    holds = table({"clm-detour": plus(BASE, 0.03), "clm-freeze-low": plus(BASE, 0.0), "clm-freeze-mid": plus(BASE, 0.03),
                   **base})
    c4 = claim_c4(holds, TASKS, SPEC)
    assert c4["verdict"] == "supported" and "clm-freeze-low - mlm-baseline +0.0 points" in c4["this_run"]
    kept_gain = table({"clm-detour": plus(BASE, 0.03), "clm-freeze-low": plus(BASE, 0.04), "clm-freeze-mid": plus(BASE, 0.03),
                       **base})
    assert claim_c4(kept_gain, TASKS, SPEC)["verdict"].startswith("not supported (detour vs freeze-low: not supported")
    no_gain = table({"clm-detour": plus(BASE, -0.01), "clm-freeze-low": BASE, "clm-freeze-mid": BASE, **base})
    assert claim_c4(no_gain, TASKS, SPEC)["verdict"] == "cannot be read (no gain to remove: C1 is not supported)"
    absent = table({"clm-detour": plus(BASE, 0.03), **base})
    assert claim_c4(absent, TASKS, SPEC)["verdict"].startswith("not measured (add clm-freeze-low and clm-freeze-mid to "
                                                               "evaluation.models")


def test_c5_compares_two_depths():
    def gap_table(layers, cka_gap):
        return drift({("clm-detour", "phase1"): (0.2, 0.2, 0.9 - cka_gap, 0.9), ("mlm-baseline", "phase1"): (0.1, 0.1, 0.9, 0.9)},
                     layers)

    assert claim_c5(gap_table(22, 0.1), None, SPEC)["verdict"].startswith("not measured (one model size")
    assert claim_c5(gap_table(22, 0.1), gap_table(28, 0.2), SPEC)["verdict"] == "supported"
    assert claim_c5(gap_table(22, 0.2), gap_table(28, 0.1), SPEC)["verdict"] == "not supported"
    assert claim_c5(gap_table(22, 0.1), gap_table(22, 0.2), SPEC)["verdict"].startswith("not measured")


def test_the_table_has_one_row_per_claim_and_a_markdown_form():
    claims = build_claims(None, TASKS, None, SPEC)
    assert list(claims["claim"]) == ["C1", "C2", "C3", "C4", "C5"]
    assert all(v.startswith("not measured") for v in claims["verdict"])
    md = claims_markdown(claims)
    assert md.count("\n| C") == 5 and "docs/claims.md" in md and "one pretraining seed" in md


def test_c3_says_what_each_decay_shows_when_they_disagree_and_c4_names_c1s_verdict():
    import dataclasses

    spec = dataclasses.replace(SPEC, long_decay="clm-long-decay")
    runs = drift({("clm-detour", "phase1"): (0.20, 0.20, 0.80, 0.90), ("mlm-baseline", "phase1"): (0.10, 0.10, 0.98, 0.98),
                  ("clm-detour", "decay"): (0.20, 0.20, 0.85, 0.90), ("mlm-baseline", "decay"): (0.10, 0.10, 0.98, 0.98),
                  ("clm-long-decay", "decay"): (0.20, 0.20, 0.95, 0.95)})
    assert claim_c3(runs, spec)["verdict"] == ("inconclusive (clm-detour: supported; clm-long-decay: part of the gap "
                                               "remains)")
    three = TASKS[:3]  # 3 tasks: C1 cannot reach p < 0.05, so it is inconclusive, not "not supported"
    few = table({"clm-detour": plus(BASE, 0.03), "clm-freeze-low": BASE, "clm-freeze-mid": plus(BASE, 0.03),
                 "mlm-baseline": BASE, "random-init": plus(BASE, -0.2)})
    assert claim_c1(few, three, SPEC)["verdict"].startswith("inconclusive (too few tasks")
    assert claim_c4(few, three, SPEC)["verdict"] == "cannot be read (no gain to remove: C1 is inconclusive)"
