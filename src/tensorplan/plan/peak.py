"""The peak of a plan: the top-level step with the most bytes live, and what is live there.

Torch-free; the pictures (``report/geometry.py``) and the arena budget (``budget.py``)
read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorplan.plan.plan import MemoryPlan


def graph_steps(plan: MemoryPlan, graph: str) -> int:
    """The number of steps of ``graph``'s schedule that the plan uses (at least 1)."""
    ends = [s.end for s in plan.storages.values() if s.graph == graph]
    ends += [r.step + 1 for r in plan.regions if r.graph == graph]
    return max(ends, default=1)


@dataclass(frozen=True)
class Peak:
    """The top-level step with the most bytes live, and what is live there."""

    step: int                    # the first such step of the top-level schedule
    live_bytes: int              # bytes of the storages and regions live at it
    storages: tuple[int, ...]    # ids of the top-level storages live at it, largest first
    regions: tuple[str, ...]     # nodes of the control-flow regions live at it


def peak(plan: MemoryPlan) -> Peak:
    """The peak of the top-level graph; its ``live_bytes`` is the plan's lower bound.

    >>> from tensorplan.plan.plan import PlannedStorage
    >>> a = PlannedStorage(0, 0, 64, 0, 2, "input", "", ("x",))
    >>> b = PlannedStorage(1, 64, 32, 1, 3, "activation", "", ("relu",))
    >>> plan = MemoryPlan(96, 96, "greedy", 16, True, {0: a, 1: b}, ())
    >>> peak(plan)
    Peak(step=1, live_bytes=96, storages=(0, 1), regions=())
    """
    top = [s for s in plan.storages.values() if not s.graph]
    regions = [r for r in plan.regions if not r.graph]
    delta = [0] * (graph_steps(plan, "") + 1)
    for s in top:
        delta[s.start] += s.size
        delta[s.end] -= s.size
    for r in regions:
        delta[r.step] += r.size
        delta[r.step + 1] -= r.size
    live, best, step = 0, -1, 0
    for t, change in enumerate(delta[:-1]):
        live += change
        if live > best:
            best, step = live, t
    storages = sorted((s for s in top if s.start <= step < s.end), key=lambda s: (-s.size, s.id))
    return Peak(step, max(best, 0), tuple(s.id for s in storages),
                tuple(r.node for r in regions if r.step == step))
