"""How a picture shows a plan: the time axis of every graph, the peak step, the colours.

The pictures (``timeline.py``'s PNG/SVG, ``html.py``'s page) draw each storage as the rectangle
``[start, end) x [offset, offset + size)``. A control-flow region takes one step of its graph;
its subgraphs share that step (a ``cond``'s true branch on the left, its false branch on the
right), each subgraph's own steps squeezed into its share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..plan import MemoryPlan

XMap = Callable[[float], float]  # a graph's steps -> top-level x coordinate

KIND_COLOURS = {"input": "#4C72B0", "state": "#C44E52", "activation": "#55A868"}
KIND_MEANINGS = {  # what a storage of each kind holds, as legends say it
    "input": "input (the caller's tensors, copied in)",
    "state": "state (a mutated buffer, kept across runs)",
    "activation": "activation (computed during a run)",
}
REGION_COLOUR = "#8172B2"
PEAK_COLOUR = "#D62728"


def graph_steps(plan: MemoryPlan, graph: str) -> int:
    """The number of steps of ``graph``'s schedule that the plan uses (at least 1)."""
    ends = [s.end for s in plan.storages.values() if s.graph == graph]
    ends += [r.step + 1 for r in plan.regions if r.graph == graph]
    return max(ends, default=1)


def first_step(plan: MemoryPlan) -> int:
    """One step before the first computation: the steps before it are only placeholders."""
    starts = [s.start for s in plan.storages.values() if s.kind == "activation" and not s.graph]
    starts += [r.step for r in plan.regions if not r.graph]
    return max(min(starts, default=0) - 1, 0)


def x_maps(plan: MemoryPlan) -> dict[str, XMap]:
    """For every graph, where its steps fall on the top-level time axis."""
    maps: dict[str, XMap] = {"": lambda x: x}
    for region in plan.regions:  # a parent's region always comes before its subgraphs' regions
        outer = maps[region.graph]
        left, right = outer(region.step), outer(region.step + 1)
        share = (right - left) / max(len(region.subgraphs), 1)
        for i, sub in enumerate(region.subgraphs):
            maps[sub] = _squeeze(left + i * share, share, graph_steps(plan, sub))
    return maps


def _squeeze(left: float, width: float, steps: int) -> XMap:
    """Steps ``[0, steps)`` of a subgraph onto ``[left, left + width)``."""
    return lambda x: left + width * x / steps


@dataclass(frozen=True)
class Peak:
    """The top-level step with the most bytes live, and what is live there."""

    step: int                    # the first such step of the top-level schedule
    live_bytes: int              # bytes of the storages and regions live at it
    storages: tuple[int, ...]    # ids of the top-level storages live at it, largest first
    regions: tuple[str, ...]     # nodes of the control-flow regions live at it


def peak(plan: MemoryPlan) -> Peak:
    """The peak of the top-level graph; its ``live_bytes`` is the plan's lower bound.

    >>> from tensorplan.plan import PlannedStorage
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
