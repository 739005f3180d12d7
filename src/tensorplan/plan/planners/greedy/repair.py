"""Squeaky-wheel repair of a greedy plan: buffers that stick out go first next time.

After a best-fit pass, the buffers whose tops lie above the lower bound are the troublemakers;
moving them (in their current order) to the front of the order and placing again often closes
the gap on large model traces, where the branch-and-bound search is too slow to start.
"""

from __future__ import annotations

from tensorplan.plan.planners.budget import Budget
from tensorplan.plan.planners.greedy.best_fit import placement_steps
from tensorplan.plan.planners.params import PlannerParams
from tensorplan.plan.planners.problem.instance import Instance, Placed


def _pass(
    inst: Instance, order: list[int], budget: Budget, params: PlannerParams
) -> list[int] | None:
    """One best-fit pass in ``order``, charged per placement; None if the budget runs out."""
    offsets = [0] * len(order)
    chunk = params.pass_chunk
    for _ in placement_steps(inst, order, offsets, chunk):
        if not budget.spend(chunk * params.steps_per_placement):
            return None
    return offsets


def squeaky_wheel(
    inst: Instance, placed: Placed, bound: int, budget: Budget, params: PlannerParams,
    patience: int | None = None,
) -> list[int]:
    """The best plan found by repeatedly promoting the buffers above ``bound``; never worse.

    ``placed`` is the plan to repair and its order; the loop stops at ``bound``, when
    ``budget`` ends, or after ``patience`` passes in a row that found no better plan (None:
    never). Each pass costs ``params.steps_per_placement`` budget steps a buffer.

    Order [1, 0, 3, 2] peaks at 6 (buffer 2 on top); promoting buffer 2 reaches the bound 5:

    >>> inst = Instance((3, 3, 1, 2), (0, 3, 0, 1), (1, 5, 2, 4), 5, (0, 1, 2, 3))
    >>> squeaky_wheel(inst, Placed([0, 0, 5, 3], [1, 0, 3, 2]), 5, Budget(None), PlannerParams())
    [1, 0, 0, 3]
    """
    offsets, order = placed
    sizes = inst.sizes
    best, best_peak = offsets, max(map(sum, zip(offsets, sizes, strict=True)), default=0)
    current, idle = offsets, 0
    while best_peak > bound and idle != patience:
        above = [i for i in order if current[i] + sizes[i] > bound]
        promoted = set(above)
        order = above + [i for i in order if i not in promoted]
        placed = _pass(inst, order, budget, params)
        if placed is None:
            break
        current = placed
        peak = max(map(sum, zip(current, sizes, strict=True)), default=0)
        idle += 1
        if peak < best_peak:
            best, best_peak, idle = current, peak, 0
    return best
