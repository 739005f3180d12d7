"""The peak sweep: best fit computed by sweeping time, equal to best fit through the index."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.plan.planners import Buffer, PlannerParams, Problem, plan_buffers
from tensorplan.plan.planners.greedy.occupancy import OccupancyIndex, best_fit
from tensorplan.plan.planners.greedy.portfolio import best_greedy, portfolio
from tensorplan.plan.planners.greedy.sweep import STACK_ORDERS, FreeSpace, sweep_order, sweep_steps
from tensorplan.plan.planners.problem.instance import Instance, peak_of, section_loads, to_instance
from tensorplan.plan.validate import find_violations

PARAMS = PlannerParams()  # the defaults
INDEXED = PARAMS.classic_order_limit  # up to it greedy runs the classic orders too

# place(size) or free(k): give back the k-th oldest live range
operations = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.integers(1, 9)),
        st.tuples(st.just("free"), st.integers(0, 30)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_free_space_places_where_best_fit_over_the_live_ranges_does(ops):
    space, live = FreeSpace(), []
    for op, arg in ops:
        if op == "free":
            if live:
                lo, hi = live.pop(arg % len(live))
                space.free(lo, hi)
            continue
        taken = sorted(live)
        flat = [bound for lo_hi in taken for bound in lo_hi]
        expected = best_fit([flat], arg) if flat else 0
        lo = space.place(arg)
        assert lo == expected
        assert all(hi <= lo or lo + arg <= other for other, hi in taken)
        live.append((lo, lo + arg))


def test_free_space_joins_the_gaps_around_a_freed_range():
    space = FreeSpace()
    assert [space.place(size) for size in (2, 3, 4)] == [0, 2, 5]
    space.free(0, 2)
    space.free(5, 9)  # the top range goes: the top comes down to 5
    space.free(2, 5)  # nothing is live: the whole arena is free again
    assert space.place(7) == 0


instances = st.lists(
    st.tuples(st.integers(1, 40), st.integers(0, 25), st.integers(1, 10)), min_size=1, max_size=40
).map(
    lambda rows: to_instance(
        Problem(tuple(Buffer(size, start, start + length) for size, start, length in rows))
    )
)


@settings(max_examples=200, deadline=None)
@given(instances, st.sampled_from(sorted(STACK_ORDERS)))
def test_peak_sweep_equals_best_fit_through_the_index_in_its_order(inst, stack_order):
    sides = sweep_order(inst, STACK_ORDERS[stack_order])
    offsets = [0] * len(inst.sizes)
    *_, (peak, finished) = sweep_steps(inst, sides, offsets, chunk=4)
    index = OccupancyIndex(inst.sections)
    expected = [0] * len(inst.sizes)
    for i in sides[0] + sides[1] + sides[2]:
        expected[i] = index.place(inst.starts[i], inst.ends[i], inst.sizes[i])
    assert finished and offsets == expected and peak == peak_of(inst, offsets)
    assert find_violations(list(inst.sizes), list(inst.starts), list(inst.ends), offsets) == []


def test_the_stack_holds_exactly_the_buffers_live_at_the_peak():
    # loads per section: 3, 9, 7; the peak is section 1, where buffers 0, 1 and 2 are live
    inst = Instance((3, 2, 4, 4), (0, 1, 1, 2), (3, 2, 2, 3), 3, (0, 1, 2, 3))
    stack, left, right = sweep_order(inst, STACK_ORDERS["longest"])
    assert (stack, left, right) == ([0, 2, 1], [], [3])
    offsets = [0] * 4
    *_, (peak, _) = sweep_steps(inst, (stack, left, right), offsets, chunk=512)
    # stacked bottom up: 0 at 0, 2 at 3, 1 at 7; at section 2 only buffer 0 is still live, so
    # buffer 3 goes on top of it where 2 and 1 were
    assert offsets == [0, 7, 3, 3]
    assert peak == 9 == max(section_loads(inst))


def test_greedy_portfolio_runs_only_sweeps_above_the_indexed_size():
    assert portfolio(INDEXED, PARAMS) == [f"sweep:{name}" for name in STACK_ORDERS] + [
        "size",
        "area",
        "length",
        "load",
    ]
    assert portfolio(INDEXED + 1, PARAMS) == [f"sweep:{name}" for name in STACK_ORDERS]
    assert portfolio(INDEXED + 1, PARAMS, wide=True)[-2:] == ["length", "load"]


def _random_buffers(n: int, seed: int) -> list[Buffer]:
    rng = random.Random(seed)
    buffers = []
    for _ in range(n):
        start = rng.randrange(n // 2)
        buffers.append(Buffer(rng.randint(1, 1 << 20), start, start + rng.randint(1, 200)))
    return buffers


def test_large_random_set_plans_verified_and_close_to_its_bound():
    buffers = _random_buffers(10_000, seed=0)
    placement = plan_buffers(buffers, algorithm="greedy")
    # the peak sweep with the longest lifetimes stacked lowest wins here: 7.9 % above the bound
    assert placement.lower_bound == 124_839_533
    assert placement.peak == 134_699_012
    sizes = [b.size for b in buffers]
    starts, ends = [b.start for b in buffers], [b.end for b in buffers]
    assert find_violations(sizes, starts, ends, placement.offsets) == []


def test_wide_portfolio_is_never_worse_than_the_fast_one():
    inst = to_instance(Problem(tuple(_random_buffers(INDEXED + 500, seed=3))))
    bound = max(section_loads(inst))
    fast, _ = best_greedy(inst, bound, PARAMS)
    wide, order = best_greedy(inst, bound, PARAMS, wide=True)
    assert peak_of(inst, wide) <= peak_of(inst, fast)
    index = OccupancyIndex(inst.sections)
    assert [index.place(inst.starts[i], inst.ends[i], inst.sizes[i]) for i in order] == [
        wide[i] for i in order
    ]
