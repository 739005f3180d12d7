"""Terminal tables (rich) of a spec table and of a memory plan."""

from __future__ import annotations

from collections import Counter

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tensorplan.formats.encoding import dtype_name
from tensorplan.plan.plan import MemoryPlan, PlannedStorage
from tensorplan.program import Program
from tensorplan.report.text import bytes_text, shape_text
from tensorplan.specs.spec import SpecTable

SHOWN_VALUES = 3  # values named per storage row before "+N more"


def spec_table(specs: SpecTable, title: str = "Tensor specs") -> Table:
    """One row per tensor value (items of multi-output values as ``name[i]``).

    Columns: name, shape (symbolic dims as ``s0<=128``), dtype, dim_order, nbytes, storage
    (``-`` for constants) and const. Non-tensor values have no row.
    """
    table = Table(title=title)
    table.add_column("name", overflow="fold", min_width=12)
    table.add_column("shape")
    table.add_column("dtype", no_wrap=True)
    table.add_column("dim_order", no_wrap=True)
    table.add_column("nbytes", justify="right")
    table.add_column("storage", justify="right")
    table.add_column("const")
    for name, spec in specs.tensors():
        table.add_row(Text(name), Text(shape_text(spec, specs.dim_names)), dtype_name(spec.dtype),
                      str(spec.dim_order), bytes_text(spec.nbytes),
                      "-" if spec.storage is None else str(spec.storage),
                      "yes" if spec.const else "")
    return table


def _ratio(plan: MemoryPlan) -> str:
    if plan.lower_bound_bytes == 0:
        return "n/a (nothing to place)"
    return f"{plan.arena_bytes / plan.lower_bound_bytes:.3f} (arena / lower bound)"


def _kinds(plan: MemoryPlan) -> str:
    counts = Counter(s.kind for s in plan.storages.values())
    detail = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    return f"{len(plan.storages)} ({detail})" if counts else "0"


def plan_numbers(plan: MemoryPlan) -> list[tuple[str, str]]:
    """The plan's headline numbers as (label, text): arena, lower bound, ratio, algorithm, ..."""
    return [
        ("arena", bytes_text(plan.arena_bytes)),
        ("lower bound", bytes_text(plan.lower_bound_bytes)),
        ("ratio", _ratio(plan)),
        ("baseline bound", _baseline(plan)),
        ("order", plan.order),
        ("constants", _constants(plan)),
        ("algorithm", plan.algorithm),
        ("optimal", "yes" if plan.optimal else "not proven"),
        ("alignment", f"{plan.alignment} B"),
        ("storages", _kinds(plan)),
        ("regions", str(len(plan.regions))),
    ]


def _baseline(plan: MemoryPlan) -> str:
    """The bound before reuse, reordering and folding, and how far the arena is below it."""
    if not plan.baseline_bound_bytes:
        return "-"
    share = plan.arena_bytes / plan.baseline_bound_bytes
    return f"{bytes_text(plan.baseline_bound_bytes)} (arena {share:.2f}x)"


def _constants(plan: MemoryPlan) -> str:
    """Bytes of the constants the runs read, and before folding when that changed them."""
    if plan.constant_bytes == plan.baseline_constant_bytes:
        return bytes_text(plan.constant_bytes)
    before = bytes_text(plan.baseline_constant_bytes)
    return f"{bytes_text(plan.constant_bytes)} (before folding {before})"


def overview_table(plan: MemoryPlan) -> Table:
    """Two columns: the plan's headline numbers (``plan_numbers``)."""
    table = Table(title="Memory plan", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", justify="right")
    for label, text in plan_numbers(plan):
        table.add_row(label, text)
    return table


def _values_text(storage: PlannedStorage) -> str:
    shown = ", ".join(storage.values[:SHOWN_VALUES])
    hidden = len(storage.values) - SHOWN_VALUES
    return f"{shown} +{hidden} more" if hidden > 0 else shown


def _largest(storages: list[PlannedStorage], top: int) -> list[PlannedStorage]:
    """The ``top`` largest storages, largest first (ties by id)."""
    return sorted(storages, key=lambda s: (-s.size, s.id))[:top]


def storage_table(plan: MemoryPlan, top: int = 10) -> Table:
    """The ``top`` largest storages with offset, size, lifetime ``[start, end)``, kind, values."""
    rows = _largest(list(plan.storages.values()), top)
    table = Table(title=f"Largest {len(rows)} of {len(plan.storages)} storages")
    table.add_column("id", justify="right")
    table.add_column("offset", justify="right", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("lifetime", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("values", overflow="fold")
    for s in rows:
        where = f" in {s.graph}" if s.graph else ""
        table.add_row(str(s.id), f"{s.offset:,}", bytes_text(s.size),
                      Text(f"[{s.start}, {s.end}){where}"), s.kind, Text(_values_text(s)))
    return table


def plan_summary(planned: Program | MemoryPlan, top: int = 10, title: str = "") -> Group:
    """The plan's overview table followed by its ``top`` largest storages, as one renderable
    (``title`` added to the overview's: the sizes a plan is shown at)."""
    plan = planned.plan if isinstance(planned, Program) else planned
    overview = overview_table(plan)
    if title:
        overview.title = f"{overview.title} {title}"
    return Group(overview, storage_table(plan, top))
