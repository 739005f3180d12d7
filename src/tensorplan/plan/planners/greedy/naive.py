"""The bump planner: every buffer gets its own slot, one after the other."""

from __future__ import annotations

from itertools import accumulate

from tensorplan.plan.planners.problem.instance import Instance


def plan_naive(inst: Instance) -> list[int]:
    """Offsets (in units) that stack every buffer on the previous one.

    >>> plan_naive(Instance((2, 3, 1), (0, 0, 1), (1, 2, 2), 2, (0, 1, 2)))
    [0, 2, 5]
    """
    return [0, *accumulate(inst.sizes)][: len(inst.sizes)]
