"""The lower bound every plan must meet: the most bytes live at one time."""

from __future__ import annotations

from collections.abc import Iterable

from tensorplan.plan.planners.problem.data import Buffer, Problem
from tensorplan.plan.planners.problem.instance import section_loads, to_instance


def lower_bound(buffers: Iterable[Buffer] | Problem, alignment: int = 1) -> int:
    """Largest total of aligned sizes live at one step; no valid plan has a smaller peak.

    >>> lower_bound([Buffer(10, 0, 2), Buffer(5, 1, 3), Buffer(7, 2, 4)])
    15
    >>> lower_bound([Buffer(10, 0, 2), Buffer(5, 1, 3)], alignment=8)
    24
    """
    problem = buffers if isinstance(buffers, Problem) else Problem(tuple(buffers), alignment)
    inst = to_instance(problem)
    return max(section_loads(inst), default=0) * inst.unit
