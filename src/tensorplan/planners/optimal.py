"""The anytime optimal planner: greedy, squeaky-wheel repair, then branch-and-bound probes.

On large instances the greedy plan is first repaired by re-placing its buffers with the ones
above the bound promoted (``improve.py``). Then the peak lies between the lower bound ``lo``
and the best plan found so far. Each probe asks the decision search for a plan under a
capacity, on the whole instance (``search.fit``) or, on large ones, on windows of it around
the tight sections (``window.window_fit``): first the lower bound itself
(most instances reach it, so it gets most of the budget), then halfway between what is refuted
or unresolved and the best peak. A found plan lowers the best peak, a refuted capacity raises
``lo``; the best plan is proven optimal once ``lo`` reaches its peak. A probe after which no
capacity would be left gets all of the remaining budget. How hard a capacity is to resolve is
far from monotone (challenging_D: a plan at 1025 units takes 88k steps, at 1026 more than
1.5M, at 1024 522k), so no schedule is right for every instance.

Budgets are counted in search steps (``SearchParams.steps_per_second`` per second of the time
limit) so that a run is repeatable, with the wall clock as a safety net.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tensorplan.planners.budget import Budget
from tensorplan.planners.greedy import best_greedy
from tensorplan.planners.improve import squeaky_wheel
from tensorplan.planners.instance import Instance, peak_of
from tensorplan.planners.search import Verdict, fit
from tensorplan.planners.tables import build_tables
from tensorplan.planners.window import window_fit


@dataclass(frozen=True)
class SearchParams:
    """Knobs of the optimal search, with their defaults."""

    optimal_seconds: float = 30.0  # budget of algorithm="optimal" when no time_limit is given
    auto_seconds: float = 1.0  # budget of algorithm="auto" for its first 1,000 buffers ...
    auto_seconds_per_1000: float = 0.5  # ... plus this much per further 1,000 buffers
    auto_max_seconds: float = 5.0  # ... and never more than this
    steps_per_second: int = 120_000  # search steps one second of budget buys (repeatable runs;
    # the search makes 115-175k a second on challenging_* here with the other core busy)
    repair_share: float = 0.5  # most of the budget squeaky-wheel repair may take ...
    repair_patience: int = 1  # ... as it stops after this many passes without a better plan
    repair_min_buffers: int = 1_000  # from this size: repair, then window probes (window.py)
    first_probe_share: float = 2 / 3  # share of the rest for the probe at the lower bound
    max_pairs: int = 2_000_000  # time-overlapping pairs above which a window is not searched


@dataclass(frozen=True)
class Outcome:
    """Result of the optimal planner, in units."""

    offsets: list[int]  # the best plan found
    proven: bool  # no plan has a smaller peak
    improved: bool  # the search beat the greedy plan


def auto_seconds(n: int, params: SearchParams) -> float:
    """Default search budget of algorithm="auto" for ``n`` buffers.

    >>> auto_seconds(500, SearchParams()), auto_seconds(5_000, SearchParams())
    (1.0, 3.0)
    """
    extra = max(n - 1000, 0) / 1000 * params.auto_seconds_per_1000
    return min(params.auto_seconds + extra, params.auto_max_seconds)


def plan_optimal(inst: Instance, bound: int, seconds: float, params: SearchParams) -> Outcome:
    """Best plan found within ``seconds`` (never worse than greedy), and whether it is proven.

    Greedy first; on instances of ``repair_min_buffers`` or more, squeaky-wheel repair until it
    stalls, capacity probes through windows (``window.py``), and repair again with whatever
    budget the probes left; on smaller ones, capacity probes of the whole instance. The clock
    starts before greedy, so ``seconds`` bounds the whole call. Here greedy peaks at 6 while
    5 is the bound:

    >>> inst = Instance((3, 3, 1, 2), (0, 3, 0, 1), (1, 5, 2, 4), 5, (0, 1, 2, 3))
    >>> plan_optimal(inst, 5, 1.0, SearchParams())
    Outcome(offsets=[0, 2, 3, 0], proven=True, improved=True)
    """
    budget = Budget(seconds, int(seconds * params.steps_per_second))
    greedy, order = best_greedy(inst, bound, wide=True)
    greedy_peak = peak_of(inst, greedy)
    if greedy_peak <= bound:
        return Outcome(greedy, True, False)
    large = len(inst.sizes) >= params.repair_min_buffers
    best, lo = greedy, bound
    if large:
        best = _repair(inst, order, best, bound, budget, params.repair_share,
                       params.repair_patience)
    if peak_of(inst, best) > bound:
        probe = _window_probe(inst, order, params.max_pairs) if large else _whole_probe(inst)
        best, lo = _capacity_search(inst, probe, bound, best, budget, params)
    if large and peak_of(inst, best) > lo and not budget.expired:
        best = _repair(inst, order, best, bound, budget, 1.0, None)
    best_peak = peak_of(inst, best)
    return Outcome(best, lo >= best_peak, best_peak < greedy_peak)


def _repair(
    inst: Instance, order: list[int], offsets: list[int], bound: int, budget: Budget,
    share: float, patience: int | None,
) -> list[int]:
    """Squeaky-wheel repair of ``offsets`` with a share of what ``budget`` has left."""
    repair = Budget(budget.left(), _steps_left(budget, share))
    best = squeaky_wheel(inst, order, offsets, bound, repair, patience)
    budget.spend(repair.steps)
    return best


Probe = Callable[[int, Budget], Verdict]


def _whole_probe(inst: Instance) -> Probe:
    """Probes that search the whole instance."""
    tables = build_tables(inst)
    return lambda cap, budget: fit(tables, cap, budget)


def _window_probe(inst: Instance, order: list[int], max_pairs: int) -> Probe:
    """Probes that search windows around the tight sections, completed in ``order``."""
    return lambda cap, budget: window_fit(inst, cap, order, budget, max_pairs)


def _capacity_search(
    inst: Instance, probe: Probe, bound: int, best: list[int], budget: Budget,
    params: SearchParams,
) -> tuple[list[int], int]:
    """Probe capacities with the decision search: the best plan and the proven lower bound."""
    best_peak = peak_of(inst, best)
    lo = soft_lo = bound
    share = params.first_probe_share
    while soft_lo < best_peak and not budget.expired:
        cap = soft_lo if soft_lo == bound else (soft_lo + best_peak - 1) // 2
        last = cap + 1 >= best_peak  # if this probe fails, no capacity is left to try
        step_budget = Budget(budget.left(), _steps_left(budget, 1.0 if last else share))
        verdict = probe(cap, step_budget)
        budget.spend(step_budget.steps)
        share = 0.5
        if verdict.offsets is not None:
            best, best_peak = verdict.offsets, peak_of(inst, verdict.offsets)
        elif verdict.exhausted:
            lo = soft_lo = cap + 1
        else:
            soft_lo = cap + 1
    return best, lo


def _steps_left(budget: Budget, share: float) -> int | None:
    """A share of the steps the budget has left (at least one)."""
    if budget.cap is None:
        return None
    return max(int((budget.cap - budget.steps) * share), 1)
