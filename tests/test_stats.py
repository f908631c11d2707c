"""Sign test p-values (the paper's 8/8 -> 0.004), ties, Welch / paired / Wilcoxon tests, the MDD."""
import math
import statistics

import pytest

from clmdetour.evaluation.stats import (
    is_constant,
    min_detectable_difference,
    paired_p,
    pooled_std,
    sign_test,
    welch_p,
    wilcoxon_p,
)


def test_sign_test_eight_of_eight():
    st = sign_test([0.01] * 8)
    assert (st.wins, st.losses, st.ties) == (8, 0, 0)
    assert st.p == pytest.approx(0.5 ** 8) and round(st.p, 4) == 0.0039


def test_sign_test_seven_of_eight():
    st = sign_test([0.01] * 7 + [-0.02])
    assert st.p == pytest.approx(9 / 256) and round(st.p, 3) == 0.035


def test_sign_test_drops_and_counts_ties_and_missing():
    st = sign_test([0.01] * 7 + [0.0, math.nan])
    assert (st.wins, st.losses, st.ties) == (7, 0, 1)
    assert st.p == pytest.approx(0.5 ** 7)
    assert math.isnan(sign_test([0.0, 0.0]).p)


def test_welch_matches_the_welch_satterthwaite_formula():
    from scipy.stats import t as student_t

    a, b = [0.61, 0.64, 0.60, 0.66], [0.58, 0.59, 0.57, 0.62, 0.55]
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1)
    se2 = va / len(a) + vb / len(b)
    t = (ma - mb) / math.sqrt(se2)
    df = se2 ** 2 / ((va / len(a)) ** 2 / (len(a) - 1) + (vb / len(b)) ** 2 / (len(b) - 1))
    assert welch_p(a, b) == pytest.approx(2 * student_t.sf(abs(t), df), rel=1e-9)


def test_welch_undefined_cases_are_nan():
    assert math.isnan(welch_p([0.5], [0.4, 0.6]))
    assert math.isnan(welch_p([0.5, 0.5], [0.5, 0.5]))


# --- ties, undefined tests, paired tests, MDD ------------------------------------------------------

def test_sign_test_ties_within_tolerance():
    # 1.1e-16: the same three seed scores summed in another order; 0.0004 < 0.0005: a tie at the default tolerance
    st = sign_test([1.1e-16, 0.0004, -0.0004, 0.0005, 0.01, -0.02, math.nan], tie_tolerance=0.0005)
    assert (st.wins, st.losses, st.ties) == (2, 1, 3)
    assert st.p == pytest.approx(0.5)  # P(X >= 2), X ~ Bin(3, 0.5)
    assert sign_test([1.1e-16], tie_tolerance=0.0).wins == 1  # no tolerance: any non-zero difference counts
    assert math.isnan(sign_test([0.0001, -0.0002], tie_tolerance=0.0005).p)
    with pytest.raises(ValueError, match="tie_tolerance"):
        sign_test([0.1], tie_tolerance=-1)


def test_welch_is_nan_on_samples_constant_within_tolerance():
    assert math.isnan(welch_p([0.4] * 3, [0.5] * 3))  # float variance of three 0.4s is 9.2e-33, not 0
    assert math.isnan(welch_p([0.4, 0.4 + 1e-13, 0.4], [0.5, 0.5, 0.5 - 1e-13]))
    assert not math.isnan(welch_p([0.4] * 3, [0.5, 0.51, 0.49]))  # one sample varies: defined


def test_paired_matches_scipy_and_is_nan_on_constant_differences():
    from scipy.stats import ttest_rel

    a, b = [0.61, 0.64, 0.60, 0.66, 0.63], [0.58, 0.63, 0.57, 0.62, 0.61]
    assert paired_p(a, b) == pytest.approx(ttest_rel(a, b).pvalue, rel=1e-12)
    d = [x - y for x, y in zip(a, b)]
    t = statistics.mean(d) / (statistics.stdev(d) / math.sqrt(len(d)))
    from scipy.stats import t as student_t
    assert paired_p(a, b) == pytest.approx(2 * student_t.sf(abs(t), len(d) - 1), rel=1e-9)
    assert math.isnan(paired_p([0.5, 0.6, 0.7], [0.4, 0.5, 0.6]))  # every seed +0.1: zero standard error
    assert math.isnan(paired_p([0.4, 0.4, 0.4], [0.4, 0.4, 0.4]))
    assert math.isnan(paired_p([0.5], [0.4]))
    with pytest.raises(ValueError, match="differ in length"):
        paired_p([0.5, 0.6], [0.4])


def test_wilcoxon_matches_scipy_from_six_nonzero_differences():
    from scipy.stats import wilcoxon

    a = [0.61, 0.64, 0.60, 0.66, 0.63, 0.65, 0.59]
    b = [0.58, 0.63, 0.62, 0.62, 0.61, 0.60, 0.585]
    d = [x - y for x, y in zip(a, b)]
    assert wilcoxon_p(a, b) == pytest.approx(wilcoxon(d).pvalue, rel=1e-12)
    assert wilcoxon_p(a[:6], b[:6]) == pytest.approx(wilcoxon(d[:6]).pvalue, rel=1e-12)
    assert math.isnan(wilcoxon_p(a[:5], b[:5]))  # n = 5: the smallest two-sided p is 0.0625
    assert math.isnan(wilcoxon_p(a[:3], b[:3]))
    # a zero difference does not count towards the 6: five non-zero ones give NaN
    assert math.isnan(wilcoxon_p(a[:5] + [0.7], b[:5] + [0.7]))
    # six positive differences: exact p = 2 / 2**6
    assert wilcoxon_p([0.6 + 0.01 * k for k in range(6)], [0.5] * 6) == pytest.approx(2 / 64)


def test_mdd_against_a_hand_computation():
    # n = 3 per model, df = 4: t(0.975, 4) = 2.7764451, t(0.8, 4) = 0.9409646
    a, b = [0.70, 0.72, 0.71], [0.66, 0.67, 0.65]  # sample std 0.01 each, so s_p = 0.01
    expected = (2.7764451 + 0.9409646) * 0.01 * math.sqrt(2 / 3)
    assert min_detectable_difference(a, b) == pytest.approx(expected, rel=1e-6)
    assert pooled_std(a, b) == pytest.approx(0.01)
    # unequal spreads: s_p^2 = (2 * 0.01^2 + 2 * 0.03^2) / 4
    c = [0.60, 0.63, 0.66]
    assert pooled_std(a, c) == pytest.approx(math.sqrt((2 * 0.01 ** 2 + 2 * 0.03 ** 2) / 4))
    # 9 seeds per model, df = 16: t(0.975, 16) = 2.1199053, t(0.8, 16) = 0.8646670
    nine_a = [0.70 + 0.01 * ((k % 3) - 1) for k in range(9)]
    nine_b = [0.66 + 0.01 * ((k % 3) - 1) for k in range(9)]
    sp = statistics.stdev(nine_a)
    assert min_detectable_difference(nine_a, nine_b) == pytest.approx((2.1199053 + 0.8646670) * sp * math.sqrt(2 / 9),
                                                                      rel=1e-6)


def test_mdd_is_nan_without_spread_never_zero():
    assert math.isnan(min_detectable_difference([0.389] * 3, [0.389] * 3))
    assert math.isnan(min_detectable_difference([0.4] * 3, [0.5] * 3))
    assert math.isnan(min_detectable_difference([0.4], [0.5, 0.6]))
    with pytest.raises(ValueError, match="alpha"):
        min_detectable_difference([0.4, 0.5], [0.5, 0.6], alpha=1.5)


def test_is_constant_tolerance():
    assert is_constant([0.4] * 3) and is_constant([0.4, 0.4 + 1e-13]) and is_constant([0.4])
    assert not is_constant([0.4, 0.4 + 1e-9])
