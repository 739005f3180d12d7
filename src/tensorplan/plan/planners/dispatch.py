"""``plan_buffers``: pick a planner by name, run it, verify its plan, and report a Placement.

``PLANNERS`` maps each ``algorithm`` name to a function ``(instance, bound, time_limit,
params) -> Outcome``; a new planner is one such function and one entry there.
``plan_unverified`` is the same without the check, for callers that verify a larger plan
themselves (the plan stage checks the whole ``MemoryPlan`` once).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tensorplan.errors import PlanError
from tensorplan.plan.planners.exact.optimal import plan_optimal
from tensorplan.plan.planners.greedy.naive import plan_naive
from tensorplan.plan.planners.greedy.portfolio import plan_greedy
from tensorplan.plan.planners.params import PlannerParams
from tensorplan.plan.planners.problem.data import Buffer, Placement, Problem
from tensorplan.plan.planners.problem.instance import Instance, peak_of, section_loads, to_instance
from tensorplan.plan.validate import check_placement


@dataclass(frozen=True)
class Outcome:
    """What one planner returns, in units over the instance's buffers."""

    offsets: list[int]  # offset of each instance buffer, in units
    proven: bool  # the search itself proved the peak minimal
    algorithm: str  # the planner that made the offsets
    search_seconds: float = 0.0  # wall time of the optimal planner, greedy included (else 0)


Planner = Callable[[Instance, int, float | None, PlannerParams], Outcome]


def _naive(inst: Instance, bound: int, time_limit: float | None,
           params: PlannerParams) -> Outcome:
    return Outcome(plan_naive(inst), False, "naive")


def _greedy(inst: Instance, bound: int, time_limit: float | None,
            params: PlannerParams) -> Outcome:
    return Outcome(plan_greedy(inst, bound, params), False, "greedy")


def _optimal(inst: Instance, bound: int, time_limit: float | None,
             params: PlannerParams) -> Outcome:
    seconds = params.optimal_seconds if time_limit is None else time_limit
    return _search(inst, bound, seconds, params)


def _auto(inst: Instance, bound: int, time_limit: float | None,
          params: PlannerParams) -> Outcome:
    seconds = auto_budget_seconds(len(inst.sizes), params) if time_limit is None else time_limit
    return _search(inst, bound, seconds, params)


def auto_budget_seconds(n: int, params: PlannerParams) -> float:
    """Default search budget of algorithm="auto" for ``n`` buffers.

    >>> auto_budget_seconds(500, PlannerParams()), auto_budget_seconds(5_000, PlannerParams())
    (1.0, 5.0)
    """
    extra = max(n - 1000, 0) / 1000 * params.auto_seconds_per_1000
    return min(params.auto_seconds + extra, params.auto_max_seconds)


def _search(inst: Instance, bound: int, seconds: float, params: PlannerParams) -> Outcome:
    """Run the optimal planner; the result is named "greedy" when the search improved nothing."""
    started = time.perf_counter()
    found = plan_optimal(inst, bound, seconds, params)
    name = "optimal" if found.improved else "greedy"
    return Outcome(found.offsets, found.proven, name, time.perf_counter() - started)


PLANNERS: dict[str, Planner] = {
    "naive": _naive,
    "greedy": _greedy,
    "optimal": _optimal,
    "auto": _auto,
}


def _expand(problem: Problem, inst: Instance, units: list[int]) -> tuple[int, ...]:
    """Byte offsets for every buffer of the problem; zero-size buffers sit at 0."""
    offsets = [0] * len(problem.buffers)
    for unit_offset, index in zip(units, inst.source, strict=True):
        offsets[index] = unit_offset * inst.unit
    return tuple(offsets)


def _check_options(algorithm: str, time_limit: float | None, params: PlannerParams) -> None:
    if algorithm not in PLANNERS:
        valid = ", ".join(sorted(PLANNERS))
        raise PlanError(f"unknown planning algorithm {algorithm!r}: choose one of {valid}")
    if time_limit is not None and not (
        isinstance(time_limit, (int, float)) and not isinstance(time_limit, bool)
        and 0 <= time_limit < math.inf
    ):
        raise PlanError(f"time_limit must be >= 0 seconds (a finite number) or None, "
                        f"got {time_limit!r}")
    if not isinstance(params, PlannerParams):
        raise PlanError(f"params must be a tensorplan.PlannerParams, got {type(params).__name__}")


def plan_unverified(
    problem: Problem, algorithm: str, time_limit: float | None, params: PlannerParams
) -> Placement:
    """``plan_buffers`` on ``problem`` without the independent check: the caller must verify
    the plan (or the larger plan it becomes part of) before anything uses it."""
    _check_options(algorithm, time_limit, params)
    inst = to_instance(problem)
    bound = max(section_loads(inst), default=0)
    outcome = PLANNERS[algorithm](inst, bound, time_limit, params)
    peak = peak_of(inst, outcome.offsets)
    return Placement(
        offsets=_expand(problem, inst, outcome.offsets),
        peak=peak * inst.unit,
        lower_bound=bound * inst.unit,
        optimal=outcome.proven or peak == bound,
        algorithm=outcome.algorithm,
        search_seconds=outcome.search_seconds,
    )


def plan_buffers(
    buffers: Iterable[Buffer],
    *,
    algorithm: str = "auto",
    alignment: int = 1,
    time_limit: float | None = None,
    params: PlannerParams | None = None,
) -> Placement:
    """Place every buffer in one arena so that buffers live at the same time never overlap.

    Offsets are multiples of ``alignment`` and sizes are rounded up to it; ``peak`` is the arena
    size. ``params`` tunes the planners (budgets, portfolio, pruning rules; None: the
    defaults). The plan is checked once by ``tensorplan.plan.validate`` before it is returned.

    >>> p = plan_buffers([Buffer(4, 0, 2), Buffer(4, 1, 3), Buffer(8, 2, 4)], algorithm="greedy")
    >>> p.offsets, p.peak, p.lower_bound, p.optimal
    ((0, 8, 0), 12, 12, True)
    """
    problem = Problem(tuple(buffers), alignment)
    placement = plan_unverified(problem, algorithm, time_limit,
                                PlannerParams() if params is None else params)
    check_placement(
        problem.aligned_sizes,
        [b.start for b in problem.buffers],
        [b.end for b in problem.buffers],
        placement.offsets,
        alignment,
        placement.peak,
    )
    return placement
