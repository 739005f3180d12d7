"""Terminal tables (rich) of a ``.pte`` lowered by ``integrations.executorch.lower``."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from tensorplan.report.text import bytes_text


def _ratio(value: int, reference: int) -> str:
    return f"{value / reference:.2f}x" if reference else "n/a"


def _products(products: Any) -> str:
    return (f"{products.linears} products made linear without a transpose, "
            f"{products.stored_transposed} constant weights stored transposed, "
            f"{products.split} addmm made mm + add, "
            f"{products.pointwise} 1x1 convolutions made mm")


def pte_tables(name: str, shipped: Any, executorch_arena: int) -> Group:
    """What the program holds (arena, lower bound, constants, ExecuTorch's default arena for
    the same program), then per method what each technique gave and the foldings tried.

    ``shipped`` is an ``integrations.executorch.Shipped``; ``executorch_arena`` the arena
    ExecuTorch's default lowering plans for the same program.
    """
    summary = Table(title=f"{name}: ExecuTorch program with tensorplan's plan")
    summary.add_column("")
    summary.add_column("bytes", justify="right")
    summary.add_column("vs ExecuTorch's greedy", justify="right")
    summary.add_row("arena", bytes_text(shipped.arena_bytes),
                    _ratio(shipped.arena_bytes, executorch_arena))
    summary.add_row("lower bound", bytes_text(sum(p.lower_bound_bytes
                                                  for p in shipped.methods.values())), "")
    summary.add_row("constants", bytes_text(shipped.constant_bytes), "")
    summary.add_row("ExecuTorch's greedy arena (default lowering)",
                    bytes_text(executorch_arena), "1.00x")
    steps = Table(title="what each technique gave (arena with tensorplan's greedy)")
    for column in ("method", "technique", "arena"):
        steps.add_column(column, justify="right" if column == "arena" else "left")
    for method, plan in shipped.methods.items():
        for technique, arena in plan.steps:
            steps.add_row(method, technique, bytes_text(arena))
        steps.add_row(method, f"kept: order {plan.order}, {plan.in_place} in-place, "
                      f"{plan.concat} concat links, {_products(shipped.products)}, "
                      f"{shipped.identities} copies that change nothing and "
                      f"{shipped.broadcasts} expands read by broadcasting kernels dropped; "
                      "final planner", bytes_text(plan.arena_bytes))
    folds = Table(title="foldings tried", caption=f"kept {shipped.folding}: {shipped.why}")
    for column in ("folding", "arena", "constants", "total", "instructions", "kept"):
        folds.add_column(column, justify="left" if column in ("folding", "kept") else "right")
    for choice in shipped.folds:
        folds.add_row(choice.name if choice.lowered else
                      f"{choice.name} (estimated, not lowered: it folds nothing at the peak "
                      "and adds constants)", bytes_text(choice.arena_bytes),
                      bytes_text(choice.constant_bytes),
                      bytes_text(choice.arena_bytes + choice.constant_bytes),
                      "-" if choice.instructions is None else str(choice.instructions),
                      "yes" if choice.name == shipped.folding else "")
    return Group(summary, steps, folds)
