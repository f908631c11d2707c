"""The memory planner's probe counts only what its own step allocates (docs/performance.md, GPU path)."""

from clmdetour.runtime.memory import GIB, plan_micro_batch
from clmdetour.training.memory import step_footprint_bytes


def _readings(foreign: float, cached: float, step_alloc: float, step_reserved: float, weights: float) -> dict:
    """Allocator readings around a step in a process that holds ``foreign`` bytes (live) and ``cached`` bytes
    (reserved, free) from earlier work, plus the model's ``weights``."""
    allocated_before = foreign + weights
    reserved_before = foreign + weights + cached
    return {"allocated_before": allocated_before, "reserved_before": reserved_before,
            "peak_allocated": allocated_before + step_alloc,
            "peak_reserved": reserved_before + max(0.0, step_reserved - cached),
            "resident_bytes": weights}


def test_a_second_phase_in_one_process_is_planned_as_in_a_fresh_one():
    weights = 0.6 * GIB
    fresh = step_footprint_bytes(**_readings(0.0, 0.0, 20 * GIB, 21 * GIB, weights))
    after = step_footprint_bytes(**_readings(40 * GIB, 0.0, 20 * GIB, 21 * GIB, weights))
    assert fresh == after == 21 * GIB + weights
    # the absolute peak (what the probe used to return) counts the earlier phase's 40 GiB
    old = _readings(40 * GIB, 0.0, 20 * GIB, 21 * GIB, weights)["peak_reserved"]
    assert old - fresh > 39 * GIB

    def plan(footprint_of_step):
        return plan_micro_batch(24, 72 * GIB, lambda mb: mb * 4.7 * GIB,
                                check=lambda mb: footprint_of_step(mb))[0]

    def probe(foreign):
        return lambda mb: step_footprint_bytes(**_readings(foreign, 0.0, mb * 4.5 * GIB, mb * 4.7 * GIB, weights))

    assert plan(probe(0.0)) == plan(probe(40 * GIB)) == 12
    # the old absolute reading moves the plan down to a smaller micro-batch, as seen on the H200
    assert plan(lambda mb: _readings(40 * GIB, 0.0, mb * 4.5 * GIB, mb * 4.7 * GIB, weights)["peak_reserved"]) < 12


def test_reserved_growth_counts_fragmentation():
    weights = GIB
    # the caching allocator reserved more than was allocated (rounding): the larger growth is the footprint
    r = _readings(0.0, 0.0, 10 * GIB, 12 * GIB, weights)
    assert step_footprint_bytes(**r) == 12 * GIB + weights
    # free cached blocks from earlier work that the step reuses are not counted twice
    r = _readings(0.0, 5 * GIB, 10 * GIB, 12 * GIB, weights)
    assert step_footprint_bytes(**r) == 10 * GIB + weights
