"""``plan_buffers``: pick a planner, run it, verify its plan, and report it as a Placement."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tensorplan.errors import PlanError
from tensorplan.planners.greedy import plan_greedy
from tensorplan.planners.instance import Instance, peak_of, section_loads, to_instance
from tensorplan.planners.naive import plan_naive
from tensorplan.planners.optimal import SearchParams, auto_seconds, plan_optimal
from tensorplan.planners.problem import Buffer, Placement, Problem
from tensorplan.validate import check_placement


@dataclass(frozen=True)
class Outcome:
    """What one planner returns, in units over the instance's buffers."""

    offsets: list[int]  # offset of each instance buffer, in units
    proven: bool  # the search itself proved the peak minimal
    algorithm: str  # the planner that made the offsets
    search_seconds: float = 0.0  # wall time of the optimal planner, greedy included (else 0)


Planner = Callable[[Instance, int, float | None], Outcome]
PARAMS = SearchParams()  # the defaults of the optimal search


def _naive(inst: Instance, bound: int, time_limit: float | None) -> Outcome:
    return Outcome(plan_naive(inst), False, "naive")


def _greedy(inst: Instance, bound: int, time_limit: float | None) -> Outcome:
    return Outcome(plan_greedy(inst, bound), False, "greedy")


def _optimal(inst: Instance, bound: int, time_limit: float | None) -> Outcome:
    seconds = PARAMS.optimal_seconds if time_limit is None else time_limit
    return _search(inst, bound, seconds)


def _auto(inst: Instance, bound: int, time_limit: float | None) -> Outcome:
    seconds = auto_seconds(len(inst.sizes), PARAMS) if time_limit is None else time_limit
    return _search(inst, bound, seconds)


def _search(inst: Instance, bound: int, seconds: float) -> Outcome:
    """Run the optimal planner; the result is named "greedy" when the search improved nothing."""
    started = time.perf_counter()
    found = plan_optimal(inst, bound, seconds, PARAMS)
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


def plan_buffers(
    buffers: Iterable[Buffer],
    *,
    algorithm: str = "auto",
    alignment: int = 1,
    time_limit: float | None = None,
) -> Placement:
    """Place every buffer in one arena so that buffers live at the same time never overlap.

    Offsets are multiples of ``alignment`` and sizes are rounded up to it; ``peak`` is the arena
    size. The plan is checked by ``tensorplan.validate`` before it is returned.

    >>> p = plan_buffers([Buffer(4, 0, 2), Buffer(4, 1, 3), Buffer(8, 2, 4)], algorithm="greedy")
    >>> p.offsets, p.peak, p.lower_bound, p.optimal
    ((0, 8, 0), 12, 12, True)
    """
    if algorithm not in PLANNERS:
        valid = ", ".join(sorted(PLANNERS))
        raise PlanError(f"unknown planning algorithm {algorithm!r}: choose one of {valid}")
    if time_limit is not None and not (
        isinstance(time_limit, (int, float)) and not isinstance(time_limit, bool)
        and 0 <= time_limit < math.inf
    ):
        raise PlanError(f"time_limit must be >= 0 seconds (a finite number) or None, "
                        f"got {time_limit!r}")
    problem = Problem(tuple(buffers), alignment)
    inst = to_instance(problem)
    bound = max(section_loads(inst), default=0)
    outcome = PLANNERS[algorithm](inst, bound, time_limit)
    peak = peak_of(inst, outcome.offsets)
    offsets = _expand(problem, inst, outcome.offsets)
    check_placement(
        problem.aligned_sizes,
        [b.start for b in problem.buffers],
        [b.end for b in problem.buffers],
        offsets,
        alignment,
        peak * inst.unit,
    )
    return Placement(
        offsets=offsets,
        peak=peak * inst.unit,
        lower_bound=bound * inst.unit,
        optimal=outcome.proven or peak == bound,
        algorithm=outcome.algorithm,
        search_seconds=outcome.search_seconds,
    )
