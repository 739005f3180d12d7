"""A plan's headline figures, one definition each, shared by the terminal overview, the page
and the picture: the arena, its bounds and the ratios between them, at the sizes asked for.

The baseline bound is measured once, at the upper bounds of the dynamic dims, so the arena's
share of it is always taken there (at ``--at seq=16`` the arena at 16 over the baseline at
128 would be a ratio of two different runs).

>>> bound_ratio(28_736, 28_672), bound_ratio(0, 0)
('1.002 (arena / lower bound)', 'n/a (nothing to place)')
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from tensorplan.plan.plan import MemoryPlan
from tensorplan.report.text import bytes_text


def ratio_value(arena: int, lower_bound: int) -> str:
    """arena / lower bound to three decimals (``1.002``); ``n/a`` when nothing is placed."""
    return "n/a" if lower_bound == 0 else f"{arena / lower_bound:.3f}"


def bound_ratio(arena: int, lower_bound: int) -> str:
    """The ratio figure: ``1.002 (arena / lower bound)``, or ``n/a (nothing to place)``."""
    if lower_bound == 0:
        return "n/a (nothing to place)"
    return f"{ratio_value(arena, lower_bound)} (arena / lower bound)"


def baseline_text(plan: MemoryPlan) -> str:
    """The baseline bound and the arena's share of it (``-`` when not measured); with dynamic
    dims both at their upper bounds, where the baseline is measured, and said so."""
    if not plan.baseline_bound_bytes:
        return "-"
    share = f"{plan.arena_bytes / plan.baseline_bound_bytes:.2f}x"
    if plan.symbolic is None:
        return f"{bytes_text(plan.baseline_bound_bytes)} (arena {share})"
    return f"{bytes_text(plan.baseline_bound_bytes)} at the upper bounds (arena there {share})"


def _kinds(plan: MemoryPlan) -> str:
    counts = Counter(s.kind for s in plan.storages.values())
    detail = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    return f"{len(plan.storages)} ({detail})" if counts else "0"


def _constants(plan: MemoryPlan) -> str:
    """Bytes of the constants the runs read, and before folding when that changed them."""
    if plan.constant_bytes == plan.baseline_constant_bytes:
        return bytes_text(plan.constant_bytes)
    before = bytes_text(plan.baseline_constant_bytes)
    return f"{bytes_text(plan.constant_bytes)} (before folding {before})"


def _optimal(shown: MemoryPlan, at: Mapping[str, int] | None) -> str:
    """Whether no placement is smaller: proven by the planner, or an arena at the lower bound
    (the page says the same at its sliders' sizes)."""
    if shown.optimal:
        return "yes"
    if shown.arena_bytes <= shown.lower_bound_bytes:
        return "yes (the arena is the lower bound)"
    return "not proven at these sizes" if at else "not proven"


def plan_numbers(plan: MemoryPlan, at: Mapping[str, int] | None = None) -> list[tuple[str, str]]:
    """The plan's headline figures as (label, text), each label a glossary term: arena, lower
    bound, ratio, baseline bound, algorithm, ... With ``at`` (dynamic dims by name) the arena,
    the lower bound, their ratio and optimality are at those sizes (``MemoryPlan.at``); the
    baseline row stays at the upper bounds and says so."""
    shown = plan.at(**at) if at else plan
    return [
        ("arena", bytes_text(shown.arena_bytes)),
        ("lower bound", bytes_text(shown.lower_bound_bytes)),
        ("ratio", bound_ratio(shown.arena_bytes, shown.lower_bound_bytes)),
        ("baseline bound", baseline_text(plan)),
        ("order", plan.order),
        ("constants", _constants(plan)),
        ("algorithm", plan.algorithm),
        ("optimal", _optimal(shown, at)),
        ("alignment", f"{plan.alignment} B"),
        ("storages", _kinds(plan)),
        ("regions", str(len(plan.regions))),
        *([("inputs outside", bytes_text(plan.input_bytes))] if plan.input_bytes else []),
    ]
