"""How a picture shows a plan: the time axis of every graph, the peak step, the colours.

The pictures (``timeline.py``'s PNG/SVG, ``html.py``'s page) draw each storage as the rectangle
``[start, end) x [offset, offset + size)``. A control-flow region takes one step of its graph;
its subgraphs share that step (a ``cond``'s true branch on the left, its false branch on the
right), each subgraph's own steps squeezed into its share.
"""

from __future__ import annotations

from collections.abc import Callable

from tensorplan.plan.peak import (
    Peak as Peak,  # re-exported for the pictures, which draw the peak step
)
from tensorplan.plan.peak import graph_steps as graph_steps
from tensorplan.plan.peak import peak as peak
from tensorplan.plan.plan import MemoryPlan

XMap = Callable[[float], float]  # a graph's steps -> top-level x coordinate

KIND_COLOURS = {"input": "#4C72B0", "state": "#C44E52", "activation": "#55A868"}
KIND_MEANINGS = {  # what a storage of each kind holds, as legends say it
    "input": "input (the caller's tensors, copied in)",
    "state": "state (a mutated buffer, kept across runs)",
    "activation": "activation (computed during a run)",
}
INSTANCE_MEANINGS = {"activation": "buffer (a row of the instance)"}  # a DSA instance's
REGION_COLOUR = "#8172B2"
PEAK_COLOUR = "#D62728"
REWRITE_COLOUR = "#DD8452"  # where a rewrite runs: each chunked region's steps


def kind_meanings(instance: bool) -> dict[str, str]:
    """What each kind of storage holds, as a legend says it: a model's, or a DSA instance's
    (whose storages are all buffers)."""
    return INSTANCE_MEANINGS if instance else KIND_MEANINGS


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
