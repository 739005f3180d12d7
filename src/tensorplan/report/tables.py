"""Terminal tables (rich) of a spec table and of a memory plan."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tensorplan.formats.encoding import dtype_name
from tensorplan.plan.plan import MemoryPlan, PlannedStorage
from tensorplan.program import Program
from tensorplan.report.figures import plan_numbers
from tensorplan.report.glossary import caption
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


def overview_table(plan: MemoryPlan, at: Mapping[str, int] | None = None) -> Table:
    """Two columns: the plan's headline numbers (``plan_numbers``, at the sizes ``at``); the
    caption says what its bounds are."""
    table = Table(title="Memory plan", show_header=False,
                  caption=caption(("lower bound", "baseline bound")), caption_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value", justify="right")
    for label, text in plan_numbers(plan, at):
        table.add_row(label, text)
    return table


def _values_text(storage: PlannedStorage) -> str:
    shown = ", ".join(storage.values[:SHOWN_VALUES])
    hidden = len(storage.values) - SHOWN_VALUES
    return f"{shown} +{hidden} more" if hidden > 0 else shown


def _largest_first(plan: MemoryPlan) -> list[PlannedStorage]:
    """The plan's storages, largest first (ties by id)."""
    return sorted(plan.storages.values(), key=lambda s: (-s.size, s.id))


def _rest(hidden: list[PlannedStorage]) -> str | None:
    """The line under the storage table for the storages not shown: how many, their bytes."""
    if not hidden:
        return None
    return (f"and {len(hidden)} more storage{'s' if len(hidden) != 1 else ''}, "
            f"{bytes_text(sum(s.size for s in hidden))} in all")


def storage_table(plan: MemoryPlan, top: int = 10) -> Table:
    """The ``top`` largest storages with offset, size, lifetime ``[start, end)``, kind, values
    (with banks: the bank each lives in, its offset inside that bank's arena); the rest are
    counted and summed in the caption."""
    ranked = _largest_first(plan)
    rows = ranked[:top]
    table = Table(title=f"Largest {len(rows)} of {len(plan.storages)} storages",
                  caption=_rest(ranked[top:]))
    table.add_column("id", justify="right")
    if plan.banks:
        table.add_column("bank", no_wrap=True)
    table.add_column("offset", justify="right", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("lifetime", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("values", overflow="fold")
    for s in rows:
        where = f" in {s.graph}" if s.graph else ""
        bank = (s.bank,) if plan.banks else ()
        table.add_row(str(s.id), *bank, f"{s.offset:,}", bytes_text(s.size),
                      Text(f"[{s.start}, {s.end}){where}"), s.kind, Text(_values_text(s)))
    return table


def plan_summary(planned: Program | MemoryPlan, top: int = 10, title: str = "",
                 at: Mapping[str, int] | None = None) -> Group:
    """The plan's overview table followed by its ``top`` largest storages, as one renderable,
    at the sizes ``at`` of the dynamic dims (``title`` added to the overview's: the sizes a
    plan is shown at)."""
    plan = planned.plan if isinstance(planned, Program) else planned
    overview = overview_table(plan, at)
    if title:
        overview.title = f"{overview.title} {title}"
    return Group(overview, storage_table(plan.at(**at) if at else plan, top))
