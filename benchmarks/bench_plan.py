"""Arena of tensorplan's memory plan vs its lower bound, and vs ExecuTorch's, for every zoo model.

Usage: ``python benchmarks/bench_plan.py [--out FILE] [--models a,b]``

For each model (default: every name in ``tensorplan.zoo.names()``, ``hf_*`` included when
``transformers`` is installed) the script compiles with ``tp.compile`` (inputs and outputs in
the arena, alignment 16) and, when ``executorch`` is installed, lowers the same model with
``to_edge(torch.export.export(...)).to_executorch()`` under its default config (greedy memory
planning, inputs and outputs planned, alignment 16). ExecuTorch's arena is the sum of the
planned buffer sizes ``execution_plan[0].non_const_buffer_sizes[1:]`` (id 0 is the constant
buffer). It prints a markdown table, and writes it to ``--out`` when given.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from common import emit, executorch_installed, lower_to_executorch, one_line, quiet

import tensorplan as tp
from tensorplan import zoo
from tensorplan.zoo import Example

REASON_CHARS = 90  # longest ExecuTorch failure reason printed in a table cell


@dataclass(frozen=True)
class Row:
    """One model's measurements."""

    model: str                    # zoo name
    storages: int                 # storages in the plan (all graphs)
    arena: int                    # tensorplan arena bytes
    lower_bound: int              # bytes live at the busiest step: no plan can be smaller
    seconds: float                # wall time of tp.compile (capture, propagate, alias, plan)
    executorch: int | str | None  # ExecuTorch arena bytes, its failure reason, or None


def executorch_arena(example: Example) -> int | str:
    """Bytes of ExecuTorch's planned arena for ``example`` (default config), or why it failed."""
    try:
        lowered = lower_to_executorch(example)
    except Exception as error:  # any failure becomes the table cell, not a crash
        return one_line(error, REASON_CHARS)
    sizes = lowered.executorch_program.execution_plan[0].non_const_buffer_sizes
    return sum(sizes[1:])


def warm_up() -> None:
    """Compile a one-layer model once, so the first timed model does not pay import costs."""
    with quiet():
        tp.compile(torch.nn.Linear(2, 2), (torch.randn(1, 2),))


def measure(name: str, with_executorch: bool) -> Row:
    """Compile zoo model ``name`` with tensorplan (and ExecuTorch when asked) and measure it."""
    example = zoo.example(name)
    start = time.perf_counter()
    with quiet():
        program = tp.compile(example.model, example.args, example.kwargs,
                             dynamic_shapes=example.dynamic_shapes)
    seconds = time.perf_counter() - start
    program.plan.verify()
    plan = program.plan
    executorch = executorch_arena(example) if with_executorch else None
    return Row(name, len(plan.storages), plan.arena_bytes, plan.lower_bound_bytes, seconds,
               executorch)


def _ratio(numerator: int, denominator: int) -> str:
    return f"{numerator / denominator:.4f}" if denominator else "n/a"


def table(rows: Sequence[Row], with_executorch: bool) -> str:
    """The rows as a markdown table; ExecuTorch columns only when ``with_executorch``."""
    header = ["model", "storages", "arena (B)", "lower bound (B)", "arena / LB", "plan time (s)"]
    if with_executorch:
        header += ["ExecuTorch arena (B)", "tensorplan / ExecuTorch"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row.model, str(row.storages), str(row.arena), str(row.lower_bound),
                 _ratio(row.arena, row.lower_bound), f"{row.seconds:.2f}"]
        if with_executorch:
            cells += _executorch_cells(row)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _executorch_cells(row: Row) -> list[str]:
    if isinstance(row.executorch, int):
        return [str(row.executorch), _ratio(row.arena, row.executorch)]
    return [str(row.executorch), "n/a"]


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown table to this file")
    parser.add_argument("--models", help="comma-separated zoo names (default: all)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the chosen models, print the table, write it to ``--out``; 0 on success."""
    options = _arguments(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)
    names = options.models.split(",") if options.models else zoo.names()
    with_executorch = executorch_installed()
    warm_up()
    rows = [measure(name, with_executorch) for name in names]
    emit(table(rows, with_executorch), options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
