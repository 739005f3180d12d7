"""A picture of the plan: bytes of the arena against the steps of the schedule (PNG, SVG, ...).

Each storage is a rectangle ``[start, end) x [offset, offset + size)`` coloured by kind; the
largest ones carry their first value's name and size when the text fits inside. Each
control-flow region is a hatched rectangle labelled with its node, its subgraphs' storages
drawn inside it (see ``geometry.py``). The peak step is a shaded band, the lower bound a dashed
line, a strip along the top marks the steps each chunked region runs over, and the legend
says what each colour means. With memory banks each bank is drawn on its
own axis, fastest at the top, with its own lower bound (and its capacity, when the axis reaches
it), titled with its arena, capacity, traffic and cost (``banks.bank_rows``). matplotlib is
imported only here, on demand (``pip install tensorplan[plot]``).
"""

from __future__ import annotations

import math
import os
from typing import Any

from tensorplan.errors import TensorPlanError
from tensorplan.plan.plan import BankPlan, MemoryPlan, PlannedStorage
from tensorplan.program import Program
from tensorplan.report.banks import BANK_COLUMNS, bank_rows, bank_title
from tensorplan.report.figures import ratio_value
from tensorplan.report.geometry import (
    KIND_COLOURS,
    PEAK_COLOUR,
    REGION_COLOUR,
    REWRITE_COLOUR,
    XMap,
    first_step,
    graph_steps,
    kind_meanings,
    peak,
    x_maps,
)
from tensorplan.report.subject import Subject, model_subject
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


def _draw_storages(ax: Any, plan: MemoryPlan, maps: dict[str, XMap], bank: str) -> None:
    """The storages of ``bank`` ("" without banks), at their offsets in its arena."""
    edge = 0.3 if len(plan.storages) <= 200 else 0.05  # thin edges keep 1,000 boxes apart
    for s in plan.storages.values():
        if s.bank == bank:
            x0, x1 = maps[s.graph](s.start), maps[s.graph](s.end)
            ax.add_patch(_rectangle(x0, x1, s.offset, s.size, facecolor=KIND_COLOURS[s.kind],
                                    edgecolor="#333333", linewidth=edge, alpha=0.85))


def _draw_regions(ax: Any, plan: MemoryPlan, maps: dict[str, XMap], bank: str) -> None:
    """The control-flow regions of ``bank``, hatched and labelled with their node."""
    for r in plan.regions:
        if r.bank != bank:
            continue
        x0, x1 = maps[r.graph](r.step), maps[r.graph](r.step + 1)
        ax.add_patch(_rectangle(x0, x1, r.offset, r.size, facecolor="none", hatch="///",
                                edgecolor=REGION_COLOUR, linewidth=1.0))
        ax.annotate(r.node, ((x0 + x1) / 2, r.offset + r.size), ha="center", va="bottom",
                    fontsize="small", color=REGION_COLOUR, zorder=5,
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})


def _fits(text: str, width: float, height: float) -> bool:
    """Whether ``text`` (lines split on newlines) fits a ``width`` x ``height`` pixel box."""
    char, line = CHAR_WIDTH * LABEL_POINTS * DPI / 72, 1.3 * LABEL_POINTS * DPI / 72
    lines = text.split("\n")
    return max(map(len, lines)) * char <= width and len(lines) * line <= height


def _label(s: PlannedStorage, width: float, height: float) -> tuple[str, int] | None:
    """The label and its rotation that fit a ``width`` x ``height`` pixel box, or None.

    Tried in order: ``name: size`` on one line, on two lines, then upright in a tall box. A
    storage that holds several values (views, in-place reuse, a concatenation made in place)
    is named by its first value and how many more share it: ``addmm +1``.
    """
    name = s.values[0] if s.values else f"storage {s.id}"
    if len(s.values) > 1:
        name = f"{name} +{len(s.values) - 1}"
    one_line = f"{name}: {human_bytes(s.size)}"  # the colon keeps an id and a size apart
    for text, rotation in ((one_line, 0), (f"{name}\n{human_bytes(s.size)}", 0),
                           (one_line, 90)):
        box = (width, height) if rotation == 0 else (height, width)
        if _fits(text, *box):
            return text, rotation
    return None


def _draw_labels(ax: Any, plan: MemoryPlan, maps: dict[str, XMap], bank: str) -> None:
    """Label the ``LABELLED`` largest storages of ``bank`` whose rectangle holds the text."""
    to_pixels = ax.transData.transform
    drawn = 0
    for s in sorted(plan.storages.values(), key=lambda s: (-s.size, s.id)):
        if s.bank != bank:
            continue
        x0, x1 = maps[s.graph](s.start), maps[s.graph](s.end)
        (px0, py0), (px1, py1) = to_pixels((x0, s.offset)), to_pixels((x1, s.offset + s.size))
        label = _label(s, abs(px1 - px0) - 4, abs(py1 - py0) - 2)
        if label is not None:
            ax.text((x0 + x1) / 2, s.offset + s.size / 2, label[0], rotation=label[1],
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


def _kind_handles(plan: MemoryPlan, instance: bool) -> list[Any]:
    """A legend entry per kind of storage drawn, and one for regions when there are some."""
    from matplotlib.patches import Patch
    meanings = kind_meanings(instance)
    kinds = sorted({s.kind for s in plan.storages.values()})
    handles = [Patch(facecolor=KIND_COLOURS[k], label=meanings[k]) for k in kinds]
    if plan.regions:
        handles.append(Patch(facecolor="none", edgecolor=REGION_COLOUR, hatch="///",
                             label="control-flow region (its subgraphs inside)"))
    return handles


def _title(plan: MemoryPlan, subject: Subject) -> str:
    """The plan's name, arena, lower bound, their ratio, planner and count, then one line per
    rewrite and, with banks, their traffic cost."""
    arena, things = ("peak", "buffers") if subject.instance else ("arena", "storages")
    ratio = f" (ratio {ratio_value(plan.arena_bytes, plan.lower_bound_bytes)})"
    lines = [f"{subject.name}: {arena} {human_bytes(plan.arena_bytes)} vs lower bound "
             f"{human_bytes(plan.lower_bound_bytes)}{ratio}, {plan.algorithm}, "
             f"{len(plan.storages)} {things}", *(n.summary for n in subject.notes)]
    return "\n".join([*lines, bank_title(plan)] if plan.banks else lines)


def _marks(ax: Any, plan: MemoryPlan, bound: int) -> list[Any]:
    """The lower bound's dashed line and a band over the peak step, for the legend."""
    top = peak(plan)
    line = ax.axhline(bound, color="black", linestyle="--", linewidth=1,
                      label=f"lower bound {human_bytes(bound)}")
    band = ax.axvspan(top.step, top.step + 1, facecolor=f"{PEAK_COLOUR}30", zorder=4,
                      edgecolor=PEAK_COLOUR, linewidth=1.0,
                      label=f"peak: step {top.step}, {human_bytes(top.live_bytes)} live")
    return [line, band]


SPAN_LANE = 0.025  # the height of a rewrite's strip along an axis's top, in axis fractions


def _rewrite_spans(ax: Any, subject: Subject) -> list[Any]:
    """Each rewrite's steps (``Note.spans``: each chunked region's) as a strip along the top
    of the axis, neighbours in two lanes so that regions that overlap in time stay apart;
    one legend entry per rewrite."""
    marks = []
    for note in subject.notes:
        for i, (start, end) in enumerate(note.spans):
            lane = 1 - SPAN_LANE * (1 + i % 2)
            band = ax.axvspan(start, end, ymin=lane, ymax=lane + SPAN_LANE, zorder=5,
                              facecolor=REWRITE_COLOUR, edgecolor="white", linewidth=0.5,
                              label=f"{note.label}: where its {len(note.spans)} regions run"
                              if i == 0 else None)
            marks += [band] if i == 0 else []
    return marks


def _bank_caption(plan: MemoryPlan, bank: BankPlan) -> str:
    """A bank axis's title: its arena and capacity, bound, traffic, share and cost."""
    row = dict(zip(BANK_COLUMNS, next(r for r in bank_rows(plan) if r[0] == bank.name),
                   strict=True))
    return (f"bank {bank.name}: arena {row['arena']} of capacity {row['capacity']}, lower "
            f"bound {row['lower bound']}; traffic {row['traffic']} per run ({row['share']}), "
            f"cost {row['cost']}")


def _capacity(ax: Any, bank: BankPlan, top: float) -> list[Any]:
    """The bank's capacity as a dotted line, when the axis reaches it."""
    if bank.capacity is None or bank.capacity > top:
        return []
    return [ax.axhline(bank.capacity, color="#333333", linestyle=":", linewidth=1.5,
                       label=f"capacity {human_bytes(bank.capacity)}")]


def _inputs_outside(ax: Any, plan: MemoryPlan) -> list[Any]:
    """The arena's end as a solid line when the inputs sit in their own buffer above it."""
    if not plan.input_bytes:
        return []
    return [ax.axhline(plan.arena_bytes, color="#333333", linewidth=1.5,
                       label=f"arena's end: the inputs' own buffer above, "
                             f"{human_bytes(plan.input_bytes)}")]


def _steps_label(subject: Subject) -> str:
    """The time axis's label; a model's says which steps only bind its placeholders."""
    if subject.instance:
        return "step"
    if not subject.placeholders:
        return "step (top-level schedule)"
    return (f"step (top-level schedule; steps 0-{subject.placeholders - 1}: the "
            f"{subject.placeholders} placeholders, where nothing runs)")


def _axis(ax: Any, plan: MemoryPlan, maps: dict[str, XMap], bank: BankPlan | None,
          subject: Subject) -> list[Any]:
    """One axis: the storages and regions of ``bank`` (all of them without banks), its bound,
    the peak band and where the rewrites run; returns the marks for its legend."""
    name = bank.name if bank else ""
    arena = bank.arena_bytes if bank else plan.buffer_bytes
    bound = bank.lower_bound_bytes if bank else plan.lower_bound_bytes
    top = max(arena, bound, 1) * 1.08
    _draw_storages(ax, plan, maps, name)
    _draw_regions(ax, plan, maps, name)
    marks = _marks(ax, plan, bound) + (_capacity(ax, bank, top) if bank else []) + \
        _inputs_outside(ax, plan) + _rewrite_spans(ax, subject)
    ax.set_xlim(first_step(plan), graph_steps(plan, ""))
    ax.set_ylim(0, top)
    ax.set_ylabel(f"offset in bank {name}" if bank else "arena offset")
    ax.yaxis.set_major_locator(_byte_ticks(top))
    ax.yaxis.set_major_formatter(lambda value, _: human_bytes(int(value)))
    if bank:
        ax.set_title(_bank_caption(plan, bank), fontsize="small", loc="left")
    return marks


def draw(plan: MemoryPlan, subject: Subject) -> Any:
    """The matplotlib figure of ``plan``: one axis, or one per bank (fastest at the top)."""
    plt = _pyplot()
    maps = x_maps(plan)
    banks: list[BankPlan | None] = list(plan.banks) or [None]
    fig, axes = plt.subplots(len(banks), 1, figsize=(12, max(6.0, 3.4 * len(banks))),
                             layout="constrained", dpi=DPI, sharex=True, squeeze=False)
    for row, (ax, bank) in enumerate(zip(axes[:, 0], banks, strict=True)):
        marks = _axis(ax, plan, maps, bank, subject)
        handles = _kind_handles(plan, subject.instance) if row == 0 else []
        ax.legend(handles=[*handles, *marks], loc="upper left", bbox_to_anchor=(1.01, 1),
                  fontsize="small")
    axes[-1, 0].set_xlabel(_steps_label(subject))
    fig.suptitle(_title(plan, subject))
    fig.canvas.draw()  # the final layout, so labels are sized against the real axes
    for ax, bank in zip(axes[:, 0], banks, strict=True):
        _draw_labels(ax, plan, maps, bank.name if bank else "")
    return fig


def plot_timeline(program: Program, path: str | os.PathLike[str], name: str = "model") -> None:
    """Write a PNG, an SVG (text kept as text) or any format matplotlib infers from ``path``.

    x is the step of the top-level schedule, from just before the first computation (the
    steps before it only bind inputs, parameters and state, and the axis says how many); y is
    the byte offset in the arena (with memory banks: one axis per bank, each with its own
    bound, titled with its capacity, traffic and cost). Storages are coloured by kind and the
    largest ones labelled, regions hatched, the lower bound a dashed line and the peak step a
    shaded band; the title says whether the program was patched or chunked, and a strip along
    the top where each chunked region runs. Raises
    ``TensorPlanError`` when matplotlib is missing.
    """
    plot_plan(program.plan, path, model_subject(program, name, {}))


def plot_plan(plan: MemoryPlan, path: str | os.PathLike[str],
              subject: Subject | str = "model") -> None:
    """``plot_timeline`` of a plan (at some sizes: ``MemoryPlan.at``; a DSA placement:
    ``html.placement_plan``) described by ``subject``, or titled by a bare name."""
    plt = _pyplot()
    described = Subject(subject) if isinstance(subject, str) else subject
    with plt.rc_context({"svg.fonttype": "none"}):
        fig = draw(plan, described)
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
