"""Sign test p-values (the paper's 8/8 -> 0.004) and Welch's t-test."""
import math

import pytest

from clmdetour.stats import sign_test, welch_p


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
