"""Terminal table (rich) of a plan's memory banks: arena, bound, traffic and its cost."""

from __future__ import annotations

from rich.table import Table

from tensorplan.plan.plan import MemoryPlan
from tensorplan.report.text import bytes_text


def bank_table(plan: MemoryPlan) -> Table:
    """One row per bank, fastest first: capacity, arena, its lower bound, constants, bytes
    moved per run, their share and their cost; the title gives the total cost and how far it
    is from the proven bound."""
    total = sum(bank.traffic_bytes for bank in plan.banks) or 1
    gap = plan.traffic_cost / plan.traffic_cost_bound - 1 if plan.traffic_cost_bound else 0.0
    table = Table(title=f"memory banks: traffic cost {plan.traffic_cost:,.0f} (proven bound "
                        f"{plan.traffic_cost_bound:,.0f}, {gap:+.1%}); at most "
                        f"{bytes_text(plan.served_bound_bytes)} can move outside the slowest")
    for column in ("bank", "capacity", "arena", "lower bound", "constants", "traffic",
                   "share", "cost"):
        table.add_column(column, justify="left" if column == "bank" else "right")
    for bank in plan.banks:
        table.add_row(bank.name,
                      "unbounded" if bank.capacity is None else bytes_text(bank.capacity),
                      bytes_text(bank.arena_bytes), bytes_text(bank.lower_bound_bytes),
                      bytes_text(bank.constant_bytes), bytes_text(bank.traffic_bytes),
                      f"{bank.traffic_bytes / total:.1%}",
                      f"{bank.traffic_bytes * bank.cost:,.0f} (x{bank.cost:g})")
    return table
