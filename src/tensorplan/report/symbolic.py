"""Terminal tables (rich) of a symbolic plan: the arena and its bound at a sweep of sizes, the
expression, and the storages held at their bound."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tensorplan.plan.plan import MemoryPlan
from tensorplan.report.text import bytes_text

SWEEP = (8, 4, 2, 1)  # sizes shown: each dim at 1/8, 1/4, 1/2 and all of its range
SHOWN_HELD = 5        # held storages listed by name


def sweep_sizes(plan: MemoryPlan) -> list[dict[str, int]]:
    """Every dim at its lower bound, then at 1/8, 1/4, 1/2 and all of its upper bound (at
    least its lower bound), each set of sizes once."""
    dims = plan.symbolic.dims
    found = [{d.name: d.lower for d in dims}]
    for part in SWEEP:
        sizes = {d.name: max(d.lower, d.upper // part) for d in dims}
        if sizes not in found:
            found.append(sizes)
    return found


def symbolic_table(plan: MemoryPlan, sizes: list[Mapping[str, int]]) -> Table:
    """One row per set of sizes: the arena there, the lower bound there and their ratio; the
    title names the dims and their ranges, the caption the arena's expression."""
    sym = plan.symbolic
    ranges = ", ".join(f"{d.name} in [{d.lower}, {d.upper}]" for d in sym.dims)
    table = Table(title=f"the plan at the sizes a run has ({ranges})",
                  caption=Text(f"arena = {sym.arena.text()}", overflow="fold"),
                  caption_justify="left")
    for column in ("sizes", "arena", "lower bound", "arena / bound"):
        table.add_column(column, justify="left" if column == "sizes" else "right")
    for given in sizes:
        at = plan.at(**given)
        shown = ", ".join(f"{d}={v}" for d, v in sorted(given.items()))
        ratio = at.arena_bytes / at.lower_bound_bytes if at.lower_bound_bytes else 1.0
        table.add_row(shown, bytes_text(at.arena_bytes), bytes_text(at.lower_bound_bytes),
                      f"{ratio:.3f}")
    return table


def held_text(plan: MemoryPlan) -> Text:
    """Which storages are planned at their bound size, and why (empty when none)."""
    held = plan.symbolic.held
    if not held:
        return Text("")
    lines = [f"{len(held)} storage(s) keep their bound size at every size:"]
    lines += [f"  storage {sid}: {why}" for sid, why in sorted(held.items())[:SHOWN_HELD]]
    if len(held) > SHOWN_HELD:
        lines.append(f"  ... and {len(held) - SHOWN_HELD} more")
    return Text("\n".join(lines))


def symbolic_summary(plan: MemoryPlan, at: Mapping[str, int] | None = None) -> Group:
    """The sweep table (or the sizes ``at`` alone) and the held storages."""
    return Group(symbolic_table(plan, [at] if at else sweep_sizes(plan)), held_text(plan))
