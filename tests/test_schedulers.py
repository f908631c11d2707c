import itertools
import math

import pytest

from clmdetour.training.schedulers import OneMinusSqrtDecayScheduler, WarmupConstantScheduler


def test_warmup_then_constant():
    s = WarmupConstantScheduler(warmup_tokens=1000)
    assert s.multiplier_at(0) == 0.0
    assert s.multiplier_at(500) == pytest.approx(0.5)
    assert s.multiplier_at(1000) == 1.0  # warm-up end
    assert s.multiplier_at(10**9) == 1.0  # constant phase
    assert WarmupConstantScheduler(0).multiplier_at(0) == 1.0


def test_one_minus_sqrt_decay_values():
    s = OneMinusSqrtDecayScheduler(total_tokens=1_000_000, final_fraction=0.1)
    assert s.multiplier_at(0) == pytest.approx(1.0)
    assert s.multiplier_at(500_000) == pytest.approx(0.1 + 0.9 * (1 - math.sqrt(0.5)))
    assert s.multiplier_at(500_000) == pytest.approx(0.364, abs=5e-4)
    assert s.multiplier_at(1_000_000) == pytest.approx(0.1)
    assert s.multiplier_at(2_000_000) == pytest.approx(0.1)  # clamped past T
    values = [s.multiplier_at(t) for t in range(0, 1_000_001, 50_000)]
    assert all(a > b for a, b in itertools.pairwise(values))


def test_scheduler_reads_composer_token_time():
    from composer.core import Time, Timestamp

    class FakeState:
        timestamp = Timestamp(token=Time(250_000, "tok"))

    assert OneMinusSqrtDecayScheduler(1_000_000)(FakeState()) == pytest.approx(0.1 + 0.9 * 0.5)


def test_bad_arguments():
    with pytest.raises(ValueError):
        OneMinusSqrtDecayScheduler(0)
    with pytest.raises(ValueError):
        WarmupConstantScheduler(-1)
