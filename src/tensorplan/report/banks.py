"""A plan's memory banks as rows of texts (arena, bound, traffic and its cost), for the terminal
table (rich) here and for the page's bank table."""

from __future__ import annotations

from rich.table import Table

from tensorplan.plan.plan import BankPlan, MemoryPlan
from tensorplan.report.glossary import caption
from tensorplan.report.text import bytes_text

BANK_COLUMNS = ("bank", "capacity", "arena", "lower bound", "constants", "traffic", "share",
                "cost")


def capacity_text(bank: BankPlan) -> str:
    """The bank's capacity, or ``unbounded``."""
    return "unbounded" if bank.capacity is None else bytes_text(bank.capacity)


def cost_text(bank: BankPlan) -> str:
    """The bank's traffic times its price per byte, and the price: ``40,960 (x1)``."""
    return f"{bank.traffic_bytes * bank.cost:,.0f} (x{bank.cost:g})"


def bank_rows(plan: MemoryPlan) -> list[tuple[str, ...]]:
    """One row per bank, fastest first, in ``BANK_COLUMNS``' order: capacity, arena, its lower
    bound, constants, bytes moved per run, their share of all bytes moved, and their cost."""
    total = sum(bank.traffic_bytes for bank in plan.banks) or 1
    return [(bank.name, capacity_text(bank), bytes_text(bank.arena_bytes),
             bytes_text(bank.lower_bound_bytes), bytes_text(bank.constant_bytes),
             bytes_text(bank.traffic_bytes), f"{bank.traffic_bytes / total:.1%}",
             cost_text(bank))
            for bank in plan.banks]


def bank_title(plan: MemoryPlan) -> str:
    """The total cost, how far it is from the proven bound, and the most bytes any choice
    moves outside the slowest bank."""
    gap = plan.traffic_cost / plan.traffic_cost_bound - 1 if plan.traffic_cost_bound else 0.0
    return (f"memory banks: traffic cost {plan.traffic_cost:,.0f} (proven bound "
            f"{plan.traffic_cost_bound:,.0f}, {gap:+.1%}); at most "
            f"{bytes_text(plan.served_bound_bytes)} can move outside the slowest")


def bank_table(plan: MemoryPlan) -> Table:
    """``bank_rows`` under ``bank_title``; the caption says what traffic and cost are."""
    table = Table(title=bank_title(plan), caption=caption(("traffic", "cost")),
                  caption_justify="left")
    for column in BANK_COLUMNS:
        table.add_column(column, justify="left" if column == "bank" else "right")
    for row in bank_rows(plan):
        table.add_row(*row)
    return table
