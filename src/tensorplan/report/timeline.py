"""A picture of the plan: bytes of the arena against the steps of the schedule (PNG, SVG, ...).

Each storage is a rectangle ``[start, end) x [offset, offset + size)`` coloured by kind; the
largest ones carry their first value's name and size when the text fits inside. Each
control-flow region is a hatched rectangle labelled with its node, its subgraphs' storages
drawn inside it (see ``geometry.py``). The peak step is a shaded band, the lower bound a dashed
line, and the legend says what each colour means. matplotlib is imported only here, on demand
(``pip install tensorplan[plot]``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from tensorplan.errors import TensorPlanError
from tensorplan.plan.plan import MemoryPlan, PlannedStorage
from tensorplan.program import Program
from tensorplan.report.geometry import (
    KIND_COLOURS,
    KIND_MEANINGS,
    PEAK_COLOUR,
    REGION_COLOUR,
    XMap,
    first_step,
    graph_steps,
    peak,
    x_maps,
)
from tensorplan.report.rewrites import Note, rewrite_notes
from tensorplan.report.text import human_bytes

LABELLED = 12          # the largest storages that get a label, when it fits
LABEL_POINTS = 7       # font size of the labels
DPI = 120              # pixels per inch of the raster formats
CHAR_WIDTH = 0.62      # a label character's width, in font sizes (DejaVu Sans, on average)


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as error:
        raise TensorPlanError("timeline: matplotlib is not installed; install it with "
                              "`pip install 'tensorplan[plot]'`") from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _draw_storages(ax: Any, plan: MemoryPlan, maps: dict[str, XMap]) -> None:
    edge = 0.3 if len(plan.storages) <= 200 else 0.05  # thin edges keep 1,000 boxes apart
    for s in plan.storages.values():
        x0, x1 = maps[s.graph](s.start), maps[s.graph](s.end)
        ax.add_patch(_rectangle(x0, x1, plan.address(s.id), s.size,
                                facecolor=KIND_COLOURS[s.kind], edgecolor="#333333",
                                linewidth=edge, alpha=0.85))


def _draw_regions(ax: Any, plan: MemoryPlan, maps: dict[str, XMap]) -> None:
    for r in plan.regions:
        x0, x1 = maps[r.graph](r.step), maps[r.graph](r.step + 1)
        y = plan.bank_base(r.bank) + r.offset
        ax.add_patch(_rectangle(x0, x1, y, r.size, facecolor="none", hatch="///",
                                edgecolor=REGION_COLOUR, linewidth=1.0))
        ax.annotate(r.node, ((x0 + x1) / 2, y + r.size), ha="center", va="bottom",
                    fontsize="small", color=REGION_COLOUR, zorder=5,
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})


def _fits(text: str, width: float, height: float) -> bool:
    """Whether ``text`` (lines split on newlines) fits a ``width`` x ``height`` pixel box."""
    char, line = CHAR_WIDTH * LABEL_POINTS * DPI / 72, 1.3 * LABEL_POINTS * DPI / 72
    lines = text.split("\n")
    return max(map(len, lines)) * char <= width and len(lines) * line <= height


def _label(s: PlannedStorage, width: float, height: float) -> tuple[str, int] | None:
    """The label and its rotation that fit a ``width`` x ``height`` pixel box, or None.

    Tried in order: name and size on one line, on two lines, then upright in a tall box. A
    storage that holds several values (views, in-place reuse, a concatenation made in place)
    is named by its first value and how many more share it: ``addmm +1``.
    """
    name = s.values[0] if s.values else f"storage {s.id}"
    if len(s.values) > 1:
        name = f"{name} +{len(s.values) - 1}"
    one_line = f"{name} {human_bytes(s.size)}"
    for text, rotation in ((one_line, 0), (f"{name}\n{human_bytes(s.size)}", 0),
                           (one_line, 90)):
        box = (width, height) if rotation == 0 else (height, width)
        if _fits(text, *box):
            return text, rotation
    return None


def _draw_labels(ax: Any, plan: MemoryPlan, maps: dict[str, XMap]) -> None:
    """Label the ``LABELLED`` largest storages whose rectangle holds the text."""
    to_pixels = ax.transData.transform
    drawn = 0
    for s in sorted(plan.storages.values(), key=lambda s: (-s.size, s.id)):
        x0, x1 = maps[s.graph](s.start), maps[s.graph](s.end)
        y = plan.address(s.id)
        (px0, py0), (px1, py1) = to_pixels((x0, y)), to_pixels((x1, y + s.size))
        label = _label(s, abs(px1 - px0) - 4, abs(py1 - py0) - 2)
        if label is not None:
            ax.text((x0 + x1) / 2, y + s.size / 2, label[0], rotation=label[1],
                    ha="center", va="center", fontsize=LABEL_POINTS, color="white", zorder=6,
                    clip_on=True)
            drawn += 1
            if drawn == LABELLED:
                return


def _rectangle(x0: float, x1: float, offset: int, size: int, **style: Any) -> Any:
    from matplotlib.patches import Rectangle
    return Rectangle((x0, offset), x1 - x0, size, **style)


def _byte_ticks(top: float) -> Any:
    """Ticks at multiples of the power of two that gives about eight of them up to ``top``."""
    from matplotlib.ticker import MultipleLocator
    return MultipleLocator(2 ** max(0, math.ceil(math.log2(max(top, 8) / 8))))


def _legend(ax: Any, plan: MemoryPlan, marks: list[Any]) -> None:
    from matplotlib.patches import Patch
    kinds = sorted({s.kind for s in plan.storages.values()})
    handles = [Patch(facecolor=KIND_COLOURS[k], label=KIND_MEANINGS[k]) for k in kinds]
    if plan.regions:
        handles.append(Patch(facecolor="none", edgecolor=REGION_COLOUR, hatch="///",
                             label="control-flow region (its subgraphs inside)"))
    ax.legend(handles=[*handles, *marks], loc="upper left", bbox_to_anchor=(1.01, 1),
              fontsize="small")


def _title(plan: MemoryPlan, name: str, notes: Sequence[Note]) -> str:
    ratio = (f" ({plan.arena_bytes / plan.lower_bound_bytes:.3f}x)"
             if plan.lower_bound_bytes else "")
    return "\n".join([f"{name}: arena {human_bytes(plan.arena_bytes)} vs lower bound "
                      f"{human_bytes(plan.lower_bound_bytes)}{ratio}, {plan.algorithm}, "
                      f"{len(plan.storages)} storages", *(n.summary for n in notes)])


def _marks(ax: Any, plan: MemoryPlan) -> list[Any]:
    """The lower bound's dashed line and a band over the peak step, for the legend."""
    top = peak(plan)
    bound = ax.axhline(plan.lower_bound_bytes, color="black", linestyle="--", linewidth=1,
               label=f"lower bound {human_bytes(plan.lower_bound_bytes)}")
    band = ax.axvspan(top.step, top.step + 1, facecolor=f"{PEAK_COLOUR}30", zorder=4,
                      edgecolor=PEAK_COLOUR, linewidth=1.0,
                      label=f"peak: step {top.step}, {human_bytes(top.live_bytes)} live")
    for bank in plan.banks:
        base = plan.bank_base(bank.name)
        ax.axhline(base, color="#333333", linewidth=1.5, zorder=5)
        room = "" if bank.capacity is None else f" of {human_bytes(bank.capacity)}"
        ax.annotate(f"bank {bank.name}: {human_bytes(bank.arena_bytes)}{room}", (0.005, base),
                    xycoords=("axes fraction", "data"), va="bottom", fontsize="small", zorder=6)
    return [bound, band]


def plot_timeline(program: Program, path: str | os.PathLike[str], name: str = "model") -> None:
    """Write a PNG, an SVG (text kept as text) or any format matplotlib infers from ``path``.

    x is the step of the top-level schedule, from just before the first computation (the
    steps before it only bind inputs, parameters and state); y is the byte offset in the
    arena (with memory banks: the banks one above the other, fastest at the bottom, each
    starting at a labelled line). Storages are coloured by kind and the largest ones
    labelled, regions hatched, the lower bound a dashed line and the peak step a shaded
    band; the title says whether the program was patched or chunked. Raises
    ``TensorPlanError`` when matplotlib is missing.
    """
    plot_plan(program.plan, path, name, rewrite_notes(program))


def plot_plan(plan: MemoryPlan, path: str | os.PathLike[str], name: str = "model",
              notes: Sequence[Note] = ()) -> None:
    """``plot_timeline`` of a bare plan (a DSA placement, say: ``html.placement_plan``);
    ``notes``: the rewrites the program went through, one title line each."""
    plt = _pyplot()
    maps = x_maps(plan)
    with plt.rc_context({"svg.fonttype": "none"}):
        fig, ax = plt.subplots(figsize=(12, 6), layout="constrained", dpi=DPI)
        _draw_storages(ax, plan, maps)
        _draw_regions(ax, plan, maps)
        marks = _marks(ax, plan)
        ax.set_xlim(first_step(plan), graph_steps(plan, ""))
        ax.set_ylim(0, max(plan.arena_bytes, plan.lower_bound_bytes, 1) * 1.08)
        ax.set_xlabel("step (top-level schedule)")
        ax.set_ylabel("arena offset")
        ax.yaxis.set_major_locator(_byte_ticks(ax.get_ylim()[1]))
        ax.yaxis.set_major_formatter(lambda value, _: human_bytes(int(value)))
        ax.set_title(_title(plan, name, notes))
        _legend(ax, plan, marks)
        fig.canvas.draw()  # the final layout, so labels are sized against the real axes
        _draw_labels(ax, plan, maps)
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
