"""The planner core: naive, greedy, the lower bound, alignment and the public API."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.errors import PlanError
from tensorplan.plan.planners import (
    Buffer,
    Placement,
    PlannerParams,
    Problem,
    lower_bound,
    plan_buffers,
)
from tensorplan.plan.planners.budget import Budget
from tensorplan.plan.planners.exact.branch_and_bound import Probe, settle
from tensorplan.plan.planners.exact.optimal import plan_optimal
from tensorplan.plan.planners.exact.search_instance import to_search_instance
from tensorplan.plan.planners.exact.windows import Windows, largest_live, tight_span
from tensorplan.plan.planners.greedy.occupancy import OccupancyIndex, add_range, best_fit
from tensorplan.plan.planners.greedy.portfolio import best_greedy
from tensorplan.plan.planners.greedy.repair import squeaky_wheel
from tensorplan.plan.planners.problem.instance import peak_of, section_loads, to_instance
from tensorplan.plan.validate import find_violations


def _verified(buffers: list[Buffer], placement: Placement, alignment: int = 1) -> bool:
    """True when the independent checker finds nothing wrong with the placement."""
    sizes = [-(-b.size // alignment) * alignment for b in buffers]
    starts = [b.start for b in buffers]
    ends = [b.end for b in buffers]
    return find_violations(sizes, starts, ends, placement.offsets, alignment) == []


PARAMS = PlannerParams()  # the defaults

# A staircase: three buffers that each overlap the next; optimum stacks pairs, peak 12.
STAIRS = [Buffer(4, 0, 2), Buffer(4, 1, 3), Buffer(8, 2, 4)]


def test_lower_bound_is_largest_live_total():
    assert lower_bound(STAIRS) == 12
    assert lower_bound([]) == 0
    assert lower_bound([Buffer(3, 0, 1), Buffer(5, 0, 1)], alignment=4) == 12


def test_naive_stacks_every_buffer():
    placement = plan_buffers(STAIRS, algorithm="naive")
    assert placement.offsets == (0, 4, 8)
    assert placement.peak == 16
    assert placement.optimal is False
    assert placement.algorithm == "naive"


def test_greedy_reaches_known_optimum():
    placement = plan_buffers(STAIRS, algorithm="greedy")
    assert placement.peak == 12 == placement.lower_bound
    assert placement.optimal is True
    assert _verified(STAIRS, placement)


def test_best_fit_takes_the_smallest_gap_that_fits():
    # taken [0, 4), [7, 10), [12, 20): gaps of 3 at 4 and of 2 at 10; a 2 goes to 10, a 3 to 4
    assert best_fit([[0, 4, 7, 10, 12, 20]], 2) == 10
    assert best_fit([[0, 4, 7, 10, 12, 20]], 3) == 4
    assert best_fit([[0, 4, 7, 10], [12, 20]], 4) == 20
    assert best_fit([[3, 5]], 3) == 0


def test_add_range_merges_touching_and_overlapping_ranges():
    bounds = [0, 4, 10, 12]
    add_range(bounds, 4, 6)
    add_range(bounds, 11, 15)
    add_range(bounds, 20, 21)
    assert bounds == [0, 6, 10, 15, 20, 21]
    add_range(bounds, 5, 20)
    assert bounds == [0, 21]


rectangles = st.lists(
    st.tuples(st.integers(0, 50), st.integers(1, 9), st.integers(0, 15), st.integers(1, 6)),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(rectangles, st.integers(0, 15), st.integers(1, 6))
def test_occupancy_index_reports_exactly_the_taken_bytes(rects, start, length):
    index = OccupancyIndex(21)
    for lo, size, first, span in rects:
        index.add(lo, lo + size, first, first + span)
    end = start + length
    expected = {
        byte
        for lo, size, first, span in rects
        if first < end and start < first + span
        for byte in range(lo, lo + size)
    }
    lists = index.taken(start, end)
    found = {
        byte
        for flat in lists
        for lo, hi in zip(flat[::2], flat[1::2], strict=True)
        for byte in range(lo, hi)
    }
    assert found == expected


def test_disjoint_lifetimes_share_offset_zero():
    buffers = [Buffer(100, t, t + 1) for t in range(5)]
    placement = plan_buffers(buffers, algorithm="greedy")
    assert placement.offsets == (0, 0, 0, 0, 0)
    assert placement.peak == 100


def test_alignment_rounds_sizes_and_offsets():
    buffers = [Buffer(10, 0, 3), Buffer(1, 1, 4), Buffer(70, 2, 5)]
    for alignment in (16, 64):
        placement = plan_buffers(buffers, algorithm="greedy", alignment=alignment)
        assert all(offset % alignment == 0 for offset in placement.offsets)
        assert placement.lower_bound == lower_bound(buffers, alignment)
        assert _verified(buffers, placement, alignment)
    placement = plan_buffers(buffers, algorithm="naive", alignment=64)
    assert placement.offsets == (0, 64, 128)
    assert placement.peak == 256
    assert placement.lower_bound == 256


def test_planners_count_in_the_common_divisor_of_the_sizes():
    # sizes 3 KiB, 1 KiB and 2 KiB: planned in units of 1 KiB, reported in bytes
    buffers = [Buffer(3072, 0, 2), Buffer(1024, 1, 3), Buffer(2048, 2, 4)]
    problem = Problem(tuple(buffers), alignment=16)
    assert to_instance(problem).sizes == (3, 1, 2) and to_instance(problem).unit == 1024
    for algorithm in ("naive", "greedy", "optimal"):
        placement = plan_buffers(buffers, algorithm=algorithm, alignment=16)
        assert _verified(buffers, placement, 16)
        assert placement.lower_bound == lower_bound(buffers, 16) == 4096
    assert plan_buffers(buffers, algorithm="naive", alignment=16).offsets == (0, 3072, 4096)
    assert plan_buffers(buffers, algorithm="greedy", alignment=16).peak == 4096


def test_zero_size_buffers_sit_at_zero_and_cost_nothing():
    buffers = [Buffer(0, 0, 5), Buffer(8, 0, 5), Buffer(0, 2, 3)]
    placement = plan_buffers(buffers, alignment=16)
    assert placement.offsets == (0, 0, 0)
    assert placement.peak == 16 == placement.lower_bound


def test_empty_problem():
    placement = plan_buffers([])
    assert (placement.offsets, placement.peak, placement.lower_bound) == ((), 0, 0)
    assert placement.optimal is True
    assert placement.algorithm == "greedy"


def test_unknown_algorithm_names_the_valid_ones():
    with pytest.raises(PlanError, match="unknown planning algorithm 'best'.*greedy.*naive"):
        plan_buffers(STAIRS, algorithm="best")


@pytest.mark.parametrize(
    ("size", "start", "end", "message"),
    [(-1, 0, 1, "negative"), (4, 3, 3, r"\[3, 3\) is empty"), (4, 5, 2, "start must be < end")],
)
def test_bad_buffers_are_rejected(size, start, end, message):
    with pytest.raises(PlanError, match=message):
        Buffer(size, start, end)


def test_bad_alignment_is_rejected():
    with pytest.raises(PlanError, match="alignment must be a positive int"):
        Problem((Buffer(1, 0, 1),), alignment=0)


def test_non_buffer_is_rejected():
    with pytest.raises(PlanError, match=r"buffers\[0\] is tuple"):
        plan_buffers([(1, 0, 1)])


def buffer_lists(sizes: tuple[int, int], starts: int, length: int, count: tuple[int, int]):
    """Hypothesis lists of ``count`` (min, max) buffers with sizes in ``sizes``, starts up to
    ``starts`` and lifetimes of 1 to ``length`` steps."""
    return st.lists(
        st.builds(
            lambda size, first, span: Buffer(size, first, first + span),
            st.integers(*sizes),
            st.integers(0, starts),
            st.integers(1, length),
        ),
        min_size=count[0],
        max_size=count[1],
    )


buffer_sets = buffer_lists(sizes=(0, 64), starts=30, length=12, count=(0, 40))


@settings(max_examples=200, deadline=None)
@given(buffer_sets, st.sampled_from([1, 8]))
def test_random_sets_give_verified_plans(buffers, alignment):
    naive = plan_buffers(buffers, algorithm="naive", alignment=alignment)
    greedy = plan_buffers(buffers, algorithm="greedy", alignment=alignment)
    bound = lower_bound(buffers, alignment)
    assert _verified(buffers, naive, alignment) and _verified(buffers, greedy, alignment)
    assert naive.peak >= greedy.peak >= bound == greedy.lower_bound
    assert greedy.optimal == (greedy.peak == bound)


def _brute_force_peak(buffers: list[Buffer]) -> int:
    """Smallest peak over every order of placing each buffer on its floor (canonical plans)."""
    best = sum(b.size for b in buffers)
    for order in itertools.permutations(range(len(buffers))):
        tops: dict[int, int] = {}
        for i in order:
            floor = max(
                (
                    top
                    for j, top in tops.items()
                    if buffers[j].start < buffers[i].end and buffers[i].start < buffers[j].end
                ),
                default=0,
            )
            tops[i] = floor + buffers[i].size
        best = min(best, max(tops.values(), default=0))
    return best


# greedy stacks this one to 6; the optimum (and the lower bound) is 5
GREEDY_MISSES = [Buffer(3, 0, 1), Buffer(3, 3, 5), Buffer(1, 0, 2), Buffer(2, 1, 4)]


def test_optimal_beats_greedy_where_greedy_misses():
    greedy = plan_buffers(GREEDY_MISSES, algorithm="greedy")
    optimal = plan_buffers(GREEDY_MISSES, algorithm="optimal")
    assert (greedy.peak, greedy.optimal) == (6, False)
    assert (optimal.peak, optimal.optimal, optimal.algorithm) == (5, True, "optimal")
    assert optimal.offsets == (0, 2, 3, 0)
    auto = plan_buffers(GREEDY_MISSES)
    assert (auto.peak, auto.optimal) == (5, True)


def test_optimal_proves_a_peak_above_the_lower_bound():
    # three buffers pairwise overlapping in a cycle of sections: bound 4, optimum 6
    buffers = [Buffer(2, 0, 2), Buffer(2, 1, 3), Buffer(2, 0, 3), Buffer(2, 2, 4)]
    placement = plan_buffers(buffers, algorithm="optimal")
    assert placement.lower_bound == 6
    assert (placement.peak, placement.optimal) == (6, True)


small_sets = buffer_lists(sizes=(1, 9), starts=6, length=5, count=(1, 7))


@settings(max_examples=60, deadline=None)
@given(small_sets)
def test_optimal_matches_brute_force(buffers):
    placement = plan_buffers(buffers, algorithm="optimal", time_limit=30)
    assert placement.optimal is True
    assert placement.peak == _brute_force_peak(buffers)
    assert _verified(buffers, placement)


@settings(max_examples=100, deadline=None)
@given(buffer_lists(sizes=(1, 9), starts=12, length=6, count=(1, 14)), st.integers(0, 4))
def test_window_probes_are_exact_with_an_unlimited_budget(buffers, extra):
    # a window's buffers clipped to it are a relaxation, and the window grows up to the whole
    # instance: with no budget limit a window probe finds a plan exactly when one fits
    inst = to_instance(Problem(tuple(buffers)))
    cap = max(section_loads(inst)) + extra
    whole = settle(Probe(to_search_instance(inst), cap, Budget(None), PARAMS))
    _, order = best_greedy(inst, cap, PARAMS)
    windowed = settle(Windows(inst, order, PlannerParams(max_pairs=10**6)).probe(cap, Budget(None)))
    assert (windowed.offsets is None) == (whole.offsets is None)
    if windowed.offsets is None:
        assert windowed.exhausted is True
    else:
        assert peak_of(inst, windowed.offsets) <= cap
        starts, ends = list(inst.starts), list(inst.ends)
        assert find_violations(list(inst.sizes), starts, ends, windowed.offsets) == []


@settings(max_examples=60, deadline=None)
@given(buffer_lists(sizes=(1, 9), starts=12, length=6, count=(1, 14)), st.integers(0, 3))
def test_a_probe_advanced_in_small_turns_ends_as_if_run_at_once(buffers, extra):
    # the orders race in turns of a fixed number of steps, whatever the caller's turns are:
    # pausing and resuming changes nothing
    inst = to_instance(Problem(tuple(buffers)))
    tables = to_search_instance(inst)
    cap = max(section_loads(inst)) + extra
    at_once = settle(Probe(tables, cap, Budget(None), PARAMS))
    probe, verdict = Probe(tables, cap, Budget(None), PARAMS), None
    while verdict is None:
        verdict = probe.advance(1)
    assert verdict == at_once


def test_a_paused_probe_can_be_dropped_and_its_tables_reused():
    # 300 buffers: the first turn (1,024 steps) ends long before the first order's dive does
    rng = random.Random(7)
    starts = [rng.randrange(100) for _ in range(300)]
    inst = to_instance(Problem(tuple(
        Buffer(rng.randint(1, 64), s, s + rng.randint(1, 20)) for s in starts)))
    tables = to_search_instance(inst)
    cap = peak_of(inst, best_greedy(inst, 0, PARAMS)[0])  # greedy fits: a plan exists
    paused = Probe(tables, cap, Budget(None), PARAMS)
    assert paused.advance(1) is None
    paused.close()
    fresh = settle(Probe(tables, cap, Budget(None), PARAMS))
    assert fresh == settle(Probe(to_search_instance(inst), cap, Budget(None), PARAMS))
    assert fresh.offsets is not None and peak_of(inst, fresh.offsets) <= cap
    sizes, starts_, ends = list(inst.sizes), list(inst.starts), list(inst.ends)
    assert find_violations(sizes, starts_, ends, fresh.offsets) == []


def test_probes_that_cannot_search_end_the_capacity_search():
    # every window holds more pairs than allowed: the probes give up at once without spending
    # the budget; the capacity search must stop (it once spun until killed) and leave the
    # budget to squeaky-wheel repair, which reaches the bound here
    inst = to_instance(Problem(tuple(GREEDY_MISSES)))
    params = PlannerParams(repair_min_buffers=1, repair_share=0.0, max_pairs=0)
    found = plan_optimal(inst, 5, 60.0, params)
    assert peak_of(inst, found.offsets) == 5 and found.proven is True


def test_a_window_probe_searches_only_around_the_tight_sections():
    # sections 0-1 are full at capacity 6; the buffer live in section 3 has room to spare
    inst = to_instance(Problem((Buffer(3, 0, 2), Buffer(3, 0, 1), Buffer(2, 1, 2),
                                Buffer(1, 1, 3), Buffer(2, 3, 5))))
    assert largest_live(inst) == [3, 3, 1, 2]
    loads, largest = section_loads(inst), largest_live(inst)
    assert tight_span(loads, largest, 6) == (0, 2)
    assert tight_span(loads, largest, 9) == (0, 1)  # nothing tight: the (first) fullest section
    windows = Windows(inst, [4, 0, 1, 2, 3], PlannerParams(max_pairs=100))
    verdict = settle(windows.probe(6, Budget(None)))
    assert verdict.offsets is not None and peak_of(inst, verdict.offsets) == 6


@settings(max_examples=60, deadline=None)
@given(buffer_sets)
def test_auto_is_never_worse_than_greedy(buffers):
    greedy = plan_buffers(buffers, algorithm="greedy")
    auto = plan_buffers(buffers, time_limit=0.5)
    assert _verified(buffers, auto)
    assert auto.lower_bound <= auto.peak <= greedy.peak
    if auto.peak == auto.lower_bound:
        assert auto.optimal is True


@settings(max_examples=60, deadline=None)
@given(buffer_sets)
def test_squeaky_wheel_repair_never_makes_a_plan_worse(buffers):
    inst = to_instance(Problem(tuple(buffers)))
    bound = max(section_loads(inst), default=0)
    greedy = best_greedy(inst, bound, PARAMS)
    offsets = greedy.offsets
    repaired = squeaky_wheel(inst, greedy, bound, Budget(None, steps=20_000), PARAMS)
    assert bound <= peak_of(inst, repaired) <= peak_of(inst, offsets)
    sizes = list(inst.sizes)
    assert find_violations(sizes, list(inst.starts), list(inst.ends), repaired) == []


def test_zero_time_limit_returns_the_greedy_plan():
    placement = plan_buffers(GREEDY_MISSES, algorithm="optimal", time_limit=0)
    assert (placement.peak, placement.optimal, placement.algorithm) == (6, False, "greedy")


def test_negative_time_limit_is_rejected():
    with pytest.raises(PlanError, match="time_limit must be >= 0"):
        plan_buffers(STAIRS, algorithm="optimal", time_limit=-1)


@pytest.mark.parametrize("time_limit", [float("inf"), float("nan"), "5", True])
def test_time_limit_must_be_a_finite_number(time_limit):
    with pytest.raises(PlanError, match="time_limit must be >= 0 seconds"):
        plan_buffers(STAIRS, algorithm="optimal", time_limit=time_limit)


def test_bool_alignment_is_rejected():
    with pytest.raises(PlanError, match="alignment must be a positive int"):
        plan_buffers(STAIRS, alignment=True)


PRUNING_RULES = ("canonical_order", "dominance", "section_bounds", "decomposition")
NO_PRUNING = PlannerParams(**{rule: False for rule in PRUNING_RULES})


@settings(max_examples=40, deadline=None)
@given(buffer_lists(sizes=(1, 9), starts=6, length=5, count=(1, 7)))
def test_every_pruning_switch_off_still_proves_the_same_optimum(buffers):
    best = plan_buffers(buffers, algorithm="optimal", time_limit=30)
    for params in [NO_PRUNING, *(PlannerParams(**{rule: False}) for rule in PRUNING_RULES)]:
        placement = plan_buffers(buffers, algorithm="optimal", time_limit=30, params=params)
        assert (placement.peak, placement.optimal) == (best.peak, True)
        assert placement.peak == _brute_force_peak(buffers)
        assert _verified(buffers, placement)


def _probe_steps(buffers: list[tuple[int, int, int]], params: PlannerParams):
    """Budget steps and verdict of a probe at the lower bound of ``buffers`` (size, start, end)."""
    inst = to_instance(Problem(tuple(Buffer(*b) for b in buffers)))
    budget = Budget(None)
    verdict = settle(Probe(to_search_instance(inst), max(section_loads(inst)), budget, params))
    return budget.steps, verdict


# no plan fits at its lower bound (21): the probe must refute it
REFUTED_AT_BOUND = [(1, 5, 7), (7, 2, 6), (9, 9, 14), (5, 5, 10), (6, 3, 9), (4, 6, 11),
                    (5, 6, 7), (6, 10, 11), (4, 7, 10), (8, 0, 5)]
# a plan fits at the bound, found only after some backtracking
FOUND_AFTER_BACKTRACKING = [(7, 10, 14), (1, 1, 4), (8, 0, 4), (6, 7, 11), (3, 7, 12), (1, 5, 9),
                            (1, 1, 4), (8, 11, 15), (5, 11, 14), (2, 8, 11), (8, 5, 9), (3, 3, 9),
                            (5, 0, 4), (4, 3, 7)]
SPLITS_INTO_PARTS = [(8, 0, 6), (5, 8, 13), (4, 6, 7), (2, 5, 8), (5, 10, 15), (1, 3, 8),
                     (1, 3, 8), (3, 8, 12), (1, 10, 12), (4, 6, 8), (4, 1, 6), (8, 3, 5),
                     (7, 11, 13), (2, 10, 12), (3, 8, 10), (3, 2, 7)]


@pytest.mark.parametrize(("rule", "buffers"), [
    ("canonical_order", REFUTED_AT_BOUND),
    ("section_bounds", REFUTED_AT_BOUND),
    ("dominance", FOUND_AFTER_BACKTRACKING),
    ("decomposition", SPLITS_INTO_PARTS),
])
def test_each_pruning_rule_saves_search_steps(rule, buffers):
    steps, verdict = _probe_steps(buffers, PARAMS)
    steps_off, verdict_off = _probe_steps(buffers, PlannerParams(**{rule: False}))
    assert verdict_off.exhausted and (verdict_off.offsets is None) == (verdict.offsets is None)
    assert steps_off > steps
    assert (verdict.offsets is None) == (buffers is REFUTED_AT_BOUND)


def test_planner_params_reach_the_search_from_plan_buffers():
    # no search budget at all: optimal keeps greedy's plan (6) and cannot prove the bound (5)
    starved = PlannerParams(steps_per_second=0)
    placement = plan_buffers(GREEDY_MISSES, algorithm="optimal", params=starved)
    assert (placement.peak, placement.optimal, placement.algorithm) == (6, False, "greedy")


@pytest.mark.parametrize("bad", [{"dominance": 1}, {"step_buffers": 0}, {"repair_share": -1.0},
                                 {"branching_orders": ("WAX",)}, {"branching_orders": ()}])
def test_planner_params_refuse_values_that_would_break_the_search(bad):
    with pytest.raises(PlanError, match="PlannerParams"):
        PlannerParams(**bad)


def test_plan_buffers_refuses_params_of_another_type():
    with pytest.raises(PlanError, match="params must be a tensorplan.PlannerParams"):
        plan_buffers(STAIRS, params={"dominance": False})
