"""A picture of the plan: bytes of the arena against the steps of the schedule.

Each storage is a rectangle ``[start, end) x [offset, offset + size)``; each control-flow
region is a hatched rectangle labelled with its node, and its subgraphs' storages are drawn
inside it: the region's one step is split between its subgraphs (a ``cond``'s true branch on
the left, its false branch on the right), each subgraph's own steps squeezed into its share.
matplotlib is imported only here, on demand (``pip install tensorplan[plot]``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from ..errors import TensorPlanError
from ..plan import MemoryPlan
from ..program import Program
from .text import human_bytes

KIND_COLOURS = {"input": "#4C72B0", "state": "#C44E52", "activation": "#55A868"}
REGION_COLOUR = "#8172B2"

XMap = Callable[[float], float]  # a graph's steps -> top-level x coordinate


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as error:
        raise TensorPlanError("timeline: matplotlib is not installed; install it with "
                              "`pip install 'tensorplan[plot]'`") from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _graph_steps(plan: MemoryPlan, graph: str) -> int:
    ends = [s.end for s in plan.storages.values() if s.graph == graph]
    ends += [r.step + 1 for r in plan.regions if r.graph == graph]
    return max(ends, default=1)


def _first_step(plan: MemoryPlan) -> int:
    """One step before the first computation: the steps before it are only placeholders."""
    starts = [s.start for s in plan.storages.values() if s.kind == "activation" and not s.graph]
    starts += [r.step for r in plan.regions if not r.graph]
    return max(min(starts, default=0) - 1, 0)


def _x_maps(plan: MemoryPlan) -> dict[str, XMap]:
    """For every graph, where its steps fall on the top-level time axis."""
    maps: dict[str, XMap] = {"": lambda x: x}
    for region in plan.regions:  # a parent's region always comes before its subgraphs' regions
        outer = maps[region.graph]
        left, right = outer(region.step), outer(region.step + 1)
        share = (right - left) / max(len(region.subgraphs), 1)
        for i, sub in enumerate(region.subgraphs):
            maps[sub] = _squeeze(left + i * share, share, _graph_steps(plan, sub))
    return maps


def _squeeze(left: float, width: float, steps: int) -> XMap:
    """Steps ``[0, steps)`` of a subgraph onto ``[left, left + width)``."""
    return lambda x: left + width * x / steps


def _draw_storages(ax: Any, plan: MemoryPlan, maps: dict[str, XMap]) -> None:
    for s in plan.storages.values():
        x0, x1 = maps[s.graph](s.start), maps[s.graph](s.end)
        ax.add_patch(_rectangle(x0, x1, s.offset, s.size, facecolor=KIND_COLOURS[s.kind],
                                edgecolor="#333333", linewidth=0.3, alpha=0.85))


def _draw_regions(ax: Any, plan: MemoryPlan, maps: dict[str, XMap]) -> None:
    for r in plan.regions:
        x0, x1 = maps[r.graph](r.step), maps[r.graph](r.step + 1)
        ax.add_patch(_rectangle(x0, x1, r.offset, r.size, facecolor="none", hatch="///",
                                edgecolor=REGION_COLOUR, linewidth=1.0))
        ax.annotate(r.node, ((x0 + x1) / 2, r.offset + r.size), ha="center", va="bottom",
                    fontsize="small", color=REGION_COLOUR, zorder=5,
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})


def _rectangle(x0: float, x1: float, offset: int, size: int, **style: Any) -> Any:
    from matplotlib.patches import Rectangle
    return Rectangle((x0, offset), x1 - x0, size, **style)


def _byte_ticks(top: float) -> Any:
    """Ticks at multiples of the power of two that gives about eight of them up to ``top``."""
    from matplotlib.ticker import MultipleLocator
    return MultipleLocator(2 ** max(0, math.ceil(math.log2(max(top, 8) / 8))))


def _legend(ax: Any, plan: MemoryPlan) -> None:
    from matplotlib.patches import Patch
    kinds = sorted({s.kind for s in plan.storages.values()})
    handles = [Patch(facecolor=KIND_COLOURS[k], label=k) for k in kinds]
    if plan.regions:
        handles.append(Patch(facecolor="none", edgecolor=REGION_COLOUR, hatch="///",
                             label="control-flow region"))
    ax.legend(handles=[*handles, *ax.get_lines()], loc="upper left", bbox_to_anchor=(1.01, 1),
              fontsize="small")


def _title(plan: MemoryPlan, name: str) -> str:
    ratio = (f" ({plan.arena_bytes / plan.lower_bound_bytes:.3f}x)"
             if plan.lower_bound_bytes else "")
    return (f"{name}: arena {human_bytes(plan.arena_bytes)} vs lower bound "
            f"{human_bytes(plan.lower_bound_bytes)}{ratio}, {plan.algorithm}")


def plot_timeline(program: Program, path: str | os.PathLike[str], name: str = "model") -> None:
    """Write a PNG (or any format matplotlib infers from ``path``) of the plan over time.

    x is the step of the top-level schedule, from just before the first computation (the
    steps before it only bind inputs, parameters and state); y is the byte offset in the
    arena. Storages are coloured by kind, regions hatched, the lower bound a dashed line.
    Raises ``TensorPlanError`` when matplotlib is missing.
    """
    plt = _pyplot()
    plan = program.plan
    maps = _x_maps(plan)
    fig, ax = plt.subplots(figsize=(12, 6), layout="constrained")
    _draw_storages(ax, plan, maps)
    _draw_regions(ax, plan, maps)
    ax.axhline(plan.lower_bound_bytes, color="black", linestyle="--", linewidth=1,
               label=f"lower bound {human_bytes(plan.lower_bound_bytes)}")
    ax.set_xlim(_first_step(plan), _graph_steps(plan, ""))
    ax.set_ylim(0, max(plan.arena_bytes, plan.lower_bound_bytes, 1) * 1.08)
    ax.set_xlabel("step (top-level schedule)")
    ax.set_ylabel("arena offset")
    ax.yaxis.set_major_locator(_byte_ticks(ax.get_ylim()[1]))
    ax.yaxis.set_major_formatter(lambda value, _: human_bytes(int(value)))
    ax.set_title(_title(plan, name))
    _legend(ax, plan)
    fig.savefig(path, dpi=120)
    plt.close(fig)
