"""The anytime optimal planner: greedy, squeaky-wheel repair, then branch-and-bound probes.

On large instances the greedy plan is first repaired by re-placing its buffers with the ones
above the bound promoted (``greedy/repair.py``). Then the peak lies between the lower bound ``lo``
and the best plan found so far, and resumable probes ask the decision search for a plan under
a capacity: on the whole instance (``search.Probe``) or, on large ones, on windows of it
around the tight sections (``windows.WindowProbe``). A ladder of probes runs side by side:
the one at ``lo`` (most instances reach their bound, so it gets half of the steps) and one per
distance 1, 2, 4, ... below the best peak (see ``_capacity_search``). A found plan lowers the
best peak, a refuted capacity raises ``lo``; the best plan is proven optimal once ``lo``
reaches its peak.

Budgets are counted in search steps (``PlannerParams.steps_per_second`` per second of the
time limit) so that a run is repeatable, with the wall clock as a safety net.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tensorplan.plan.planners.budget import Budget
from tensorplan.plan.planners.exact.branch_and_bound import Probe, Resumable
from tensorplan.plan.planners.exact.search_instance import to_search_instance
from tensorplan.plan.planners.exact.windows import Windows
from tensorplan.plan.planners.greedy.portfolio import best_greedy
from tensorplan.plan.planners.greedy.repair import squeaky_wheel
from tensorplan.plan.planners.params import PlannerParams
from tensorplan.plan.planners.problem.instance import Instance, Placed, peak_of


@dataclass(frozen=True)
class SearchOutcome:
    """Result of the optimal planner, in units."""

    offsets: list[int]  # the best plan found
    proven: bool  # no plan has a smaller peak
    improved: bool  # the search beat the greedy plan


def plan_optimal(
    inst: Instance, bound: int, seconds: float, params: PlannerParams
) -> SearchOutcome:
    """Best plan found within ``seconds`` (never worse than greedy), and whether it is proven.

    Greedy first; on instances of ``repair_min_buffers`` or more, squeaky-wheel repair until it
    stalls, capacity probes through windows (``windows.py``), and repair again with whatever
    budget the probes left; on smaller ones, capacity probes of the whole instance. The clock
    starts before greedy, so ``seconds`` bounds the whole call. Here greedy peaks at 6 while
    5 is the bound:

    >>> inst = Instance((3, 3, 1, 2), (0, 3, 0, 1), (1, 5, 2, 4), 5, (0, 1, 2, 3))
    >>> plan_optimal(inst, 5, 1.0, PlannerParams())
    SearchOutcome(offsets=[0, 2, 3, 0], proven=True, improved=True)
    """
    budget = Budget(seconds, int(seconds * params.steps_per_second))
    greedy, order = best_greedy(inst, bound, params, wide=True)
    greedy_peak = peak_of(inst, greedy)
    if greedy_peak <= bound:
        return SearchOutcome(greedy, True, False)
    large = len(inst.sizes) >= params.repair_min_buffers
    best, lo = greedy, bound
    if large:
        best = _repair(inst, Placed(best, order), bound, budget, params, last=False)
    if peak_of(inst, best) > bound:
        probe = Windows(inst, order, params).probe if large else _whole_probe(inst, params)
        best, lo = _capacity_search(inst, probe, bound, best, budget, params)
    if large and peak_of(inst, best) > lo and not budget.expired:
        best = _repair(inst, Placed(best, order), bound, budget, params, last=True)
    best_peak = peak_of(inst, best)
    return SearchOutcome(best, lo >= best_peak, best_peak < greedy_peak)


def _repair(inst: Instance, placed: Placed, bound: int, budget: Budget, params: PlannerParams,
            last: bool) -> list[int]:
    """Squeaky-wheel repair of ``placed``: with ``params.repair_share`` of what ``budget`` has
    left and ``params.repair_patience``, or (``last``) with all of it until it ends."""
    share, patience = (1.0, None) if last else (params.repair_share, params.repair_patience)
    repair = Budget(budget.left(), _steps_left(budget, share))
    best = squeaky_wheel(inst, placed, bound, repair, params, patience)
    budget.spend(repair.steps)
    return best


ProbeMaker = Callable[[int, Budget], Resumable]  # a resumable probe at a capacity


def _whole_probe(inst: Instance, params: PlannerParams) -> ProbeMaker:
    """Probes that search the whole instance."""
    whole = to_search_instance(inst)
    return lambda cap, budget: Probe(whole, cap, budget, params)


def ladder(lo: int, best: int, epoch: int = 0) -> list[int]:
    """The capacities probed at once: ``lo``, and one capacity ``best - d - epoch % d`` per
    distance ``d`` = 1, 2, 4, ... below ``best``, so that over the epochs each walks its own
    stretch ``[best - 2d + 1, best - d]``.

    >>> ladder(963, 1040), ladder(963, 1040, epoch=3)
    ([963, 976, 1008, 1024, 1032, 1036, 1038, 1039], [963, 973, 1005, 1021, 1029, 1033, 1037, 1039])
    """
    caps = {lo}
    d = 1
    while best - d > lo:
        caps.add(max(best - d - epoch % d, lo + 1))
        d *= 2
    return sorted(caps)


def _capacity_search(
    inst: Instance, make: ProbeMaker, bound: int, best: list[int], budget: Budget,
    params: PlannerParams,
) -> tuple[list[int], int]:
    """Probe capacities with the decision search: the best plan and the proven lower bound.

    The probes on the ladder between ``lo`` and the best peak run side by side, resumed in
    turns of ``turn_steps``; the probe at ``lo`` gets as many steps as all of the others
    together. How hard a capacity is to resolve is far from monotone (challenging_D, one
    search order: 1025 units 14k steps, 1024 134k, 1010 12k, 1026 over 800k), so the ladder
    moves on to its next epoch after every ``epoch_turns`` turns without news (twice as many
    every ``epoch_growth`` epochs): probes whose capacity stays on it go on from where they
    were, the others make room for new capacities. A plan found lowers the best peak, a
    refuted capacity raises ``lo``; either way the ladder starts again from epoch 0.
    """
    best_peak = peak_of(inst, best)
    lo = bound
    probes: dict[int, Resumable] = {}
    given_up: set[int] = set()  # capacities whose probe could not search (window too big)
    epoch = turns = 0
    while lo < best_peak and not budget.expired:
        if turns >= params.epoch_turns << (epoch // params.epoch_growth):
            epoch, turns = epoch + 1, 0
        caps = [cap for cap in ladder(lo, best_peak, epoch) if cap not in given_up]
        for cap in [cap for cap in probes if cap not in caps]:
            probes.pop(cap).close()
        verdict = None
        for cap in caps:
            if cap not in probes:
                probes[cap] = make(cap, budget)
            share = max(len(caps) - 1, 1) if cap == lo else 1
            verdict = probes[cap].advance(share * params.turn_steps)
            if verdict is not None:
                del probes[cap]
                break
        turns += 1
        if verdict is None:
            continue
        if verdict.offsets is not None:
            best, best_peak = verdict.offsets, peak_of(inst, verdict.offsets)
        elif verdict.exhausted:
            lo = cap + 1
        elif budget.expired or cap == lo:
            break  # out of budget, or the bound itself cannot be searched
        else:
            given_up.add(cap)
            continue
        epoch = turns = 0
    for probe in probes.values():
        probe.close()
    return best, lo


def _steps_left(budget: Budget, share: float) -> int | None:
    """A share of the steps the budget has left (at least one)."""
    if budget.cap is None:
        return None
    return max(int((budget.cap - budget.steps) * share), 1)
