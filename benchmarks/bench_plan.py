"""Arena of tensorplan's memory plan vs the bound before lowering it, and vs ExecuTorch's best
configuration, on the zoo's models.

Usage: ``python benchmarks/bench_plan.py [--out FILE] [--models a,b | --full] [--runs N]``

For each model (default: ``common.REPRESENTATIVE``, every zoo model with ``--full``, then the
fresh configs of ``common.FRESH``: the zoo's families at
other sizes and CNN families it lacks, seeded, each summarised apart) the script compiles with
``tp.compile`` (inputs and outputs in the arena, alignment 16) five times: with the defaults
(in-place reuse, memory-aware order and folded constants all on), with all three off (one buffer
per value in the exported order: the plan before the bound-lowering stage), and with each one
alone. It times ``Program.run`` of the first two against eager on the example inputs (median of
``--runs`` calls, one thread).

When ``executorch`` is installed it lowers the same model with each configuration of
``common.EXECUTORCH_CONFIGS`` (``to_edge(torch.export.export(...)).to_executorch(config)``,
greedy planning, inputs and outputs planned, alignment 16), loads it with ExecuTorch's runtime
and runs it once. ExecuTorch's arena is the sum of its planned buffers
(``execution_plan[0].non_const_buffer_sizes[1:]``); its best configuration is the one with the
smallest arena among those that load, run and equal eager.

It prints a summary line and four markdown tables (the comparison, what each technique gives,
the plan's details with what is live at its peak, every ExecuTorch configuration), and writes
them to ``--out`` when given.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import common
import torch
from common import EXECUTORCH_CONFIGS, ExecuTorchResult, one_line, quiet, same_outputs

import tensorplan as tp
from tensorplan.report.geometry import peak
from tensorplan.zoo import Example

REASON_CHARS = 90   # longest failure reason printed in a table cell
DEFAULT_RUNS = 20   # timed calls of eager and of each program
PEAK_VALUES = 3     # storages named in the "live at the peak" cell
TARGET_MEDIAN = 0.80  # the target for the median tensorplan / ExecuTorch best
OFF = {"reuse": False, "reorder": False, "fold": False}
# The runs of each technique alone: (column, compile switches)
TECHNIQUES = (("reuse only", {**OFF, "reuse": True}), ("reorder only", {**OFF, "reorder": True}),
              ("fold only", {**OFF, "fold": True}))


@dataclass(frozen=True)
class Latency:
    """Median milliseconds per call on the example inputs."""

    eager: float                 # the eager module
    before: float                # Program.run compiled with reuse, reorder and fold off
    after: float                 # Program.run compiled with the defaults


@dataclass(frozen=True)
class Row:
    """One model's measurements."""

    model: str                          # zoo name
    plan: tp.MemoryPlan                 # the default compile's plan
    seconds: float                      # wall time of the default tp.compile
    off_arena: int                      # arena with reuse, reorder and fold off
    techniques: tuple[int, ...]         # arena with each of TECHNIQUES alone, in that order
    peak: str                           # the largest storages live at the plan's peak step
    latency: Latency | str              # run vs eager, or why the run failed or differed
    executorch: tuple[ExecuTorchResult, ...]  # per configuration; empty without ExecuTorch


# --- measuring -------------------------------------------------------------------------------
def _compile(example: Example, **switches: bool) -> tp.Program:
    with quiet():
        return tp.compile(example.model, example.args, example.kwargs,
                          dynamic_shapes=example.dynamic_shapes, **switches)


def _executorch_config(example: Example, expected: Any, config: str) -> ExecuTorchResult:
    """Lower, load and run ``example`` with one ExecuTorch configuration."""
    try:
        lowered = common.lower_to_executorch(example, config)
    except Exception as error:  # any lowering failure becomes the table cell, not a crash
        return ExecuTorchResult(config, None, None, "lower", one_line(error, REASON_CHARS))
    return common.check_executorch(config, lowered, example, expected, REASON_CHARS)


def _peak_cell(plan: tp.MemoryPlan) -> str:
    """The largest storages live at the plan's peak: first value, kind and KB."""
    found = peak(plan)
    named = [plan.storages[i] for i in found.storages[:PEAK_VALUES]]
    cells = [f"{s.values[0]} ({s.kind}) {s.size / 1024:.0f}" for s in named]
    rest = len(found.storages) - len(named)
    return ", ".join(cells + ([f"{rest} more"] if rest else []))


def _latency(example: Example, before: tp.Program, after: tp.Program, expected: Any,
             runs: int) -> Latency | str:
    """Run times vs eager, or why a run raised or differed from eager."""
    args, kwargs = example.args, example.kwargs
    for label, program in (("lowering off", before), ("default", after)):
        try:
            with torch.no_grad():
                matches = same_outputs(expected, program.run(*args, **kwargs))
        except Exception as error:  # a failing run becomes the cell, not a crash
            return f"{label}: " + one_line(error, REASON_CHARS)
        if not matches:
            return f"{label}: run differs from eager"
    times = common.medians({"eager": lambda: example.model(*args, **kwargs),
                     "before": lambda: before.run(*args, **kwargs),
                     "after": lambda: after.run(*args, **kwargs)}, runs)
    return Latency(times["eager"], times["before"], times["after"])


def measure(name: str, with_executorch: bool, runs: int) -> Row:
    """Compile zoo model ``name`` with each set of switches (and ExecuTorch when asked)."""
    example = common.example(name)
    start = time.perf_counter()
    program = _compile(example)
    seconds = time.perf_counter() - start
    program.plan.verify()
    before = _compile(example, **OFF)
    techniques = tuple(_compile(example, **switches).plan.arena_bytes
                       for _, switches in TECHNIQUES)
    with torch.no_grad():
        expected = example.model(*example.args, **example.kwargs)
    executorch = tuple(_executorch_config(example, expected, config)
                       for config in EXECUTORCH_CONFIGS) if with_executorch else ()
    return Row(name, program.plan, seconds, before.plan.arena_bytes, techniques,
               _peak_cell(program.plan), _latency(example, before, program, expected, runs),
               executorch)


def warm_up() -> None:
    """Compile a one-layer model once, so the first timed model does not pay import costs."""
    _compile(Example(torch.nn.Linear(2, 2), (torch.randn(1, 2),)))


# --- tables ----------------------------------------------------------------------------------
def best(row: Row) -> ExecuTorchResult | None:
    """The best ExecuTorch configuration of the row (``common.best_result``)."""
    return common.best_result(row.executorch)




def _latency_cell(latency: Latency | str) -> str:
    if isinstance(latency, str):
        return latency
    return (f"{latency.eager:.2f} ms: {common.ratio(latency.before, latency.eager)} → "
            f"{common.ratio(latency.after, latency.eager)}")


def comparison_table(rows: Sequence[Row], with_executorch: bool) -> str:
    """Baseline bound, arena, ExecuTorch greedy and best, constants, order and latency."""
    header = ["model", "baseline bound (B)", "arena (B)", "arena / baseline"]
    if with_executorch:
        header += ["ExecuTorch greedy (B)", "ExecuTorch best (B)", "best config",
                   "tensorplan / ExecuTorch best", "same, arena + constants"]
    header += ["constants (B) before → after", "order",
               "eager; run / eager, lowering off → on"]
    cells = []
    for row in rows:
        plan = row.plan
        line = [row.model, str(plan.baseline_bound_bytes), str(plan.arena_bytes),
                common.ratio(plan.arena_bytes, plan.baseline_bound_bytes)]
        if with_executorch:
            line += _executorch_cells(row)
        line += [f"{plan.baseline_constant_bytes} → {plan.constant_bytes}", plan.order,
                 _latency_cell(row.latency)]
        cells.append(line)
    return common.markdown(header, cells)


def _executorch_cells(row: Row) -> list[str]:
    greedy, chosen = row.executorch[0], best(row)
    greedy_cell = str(greedy.arena) if greedy.arena is not None else greedy.reason or "n/a"
    if chosen is None:
        return [greedy_cell, "none loads", "n/a", "n/a", "n/a"]
    plan = row.plan
    return [greedy_cell, str(chosen.arena), chosen.config + (" (†)" if chosen.failed else ""),
            common.ratio(plan.arena_bytes, chosen.arena),
            common.ratio(plan.arena_bytes + plan.constant_bytes,
                   (chosen.arena or 0) + (chosen.constants or 0))]


def techniques_table(rows: Sequence[Row]) -> str:
    """Each model's arena with the lowering off, with each technique alone, and with all."""
    header = ["model", "lowering off (B)"] + [f"{name} (B)" for name, _ in TECHNIQUES] + \
        ["all three (B)"]
    cells = []
    for row in rows:
        arenas = [*row.techniques, row.plan.arena_bytes]
        cells.append([row.model, str(row.off_arena)]
                     + [f"{arena} ({common.ratio(arena, row.off_arena)})" for arena in arenas])
    return common.markdown(header, cells)


def details_table(rows: Sequence[Row]) -> str:
    """Storages, lower bound, arena / lower bound, plan time and what is live at the peak."""
    header = ["model", "storages", "lower bound (B)", "arena / LB", "plan time (s)",
              "live at the peak (first value, kind, KB)"]
    cells = [[row.model, str(len(row.plan.storages)), str(row.plan.lower_bound_bytes),
              f"{row.plan.arena_bytes / row.plan.lower_bound_bytes:.4f}", f"{row.seconds:.2f}",
              row.peak] for row in rows]
    return common.markdown(header, cells)


def executorch_table(rows: Sequence[Row]) -> str:
    """Every ExecuTorch configuration's arena and constants per model, or why it failed."""
    header = ["model"] + [f"{config}: arena / constants (B)" for config in EXECUTORCH_CONFIGS]
    cells = []
    for row in rows:
        line = [row.model]
        for result in row.executorch:
            sizes = f"{result.arena} / {result.constants}" if result.arena is not None else ""
            failure = f"{result.failed} failed: {result.reason}" if result.failed else ""
            line.append("; ".join(filter(None, [sizes, failure])))
        cells.append(line)
    return common.markdown(header, cells)


def summary(rows: Sequence[Row]) -> str:
    """``group_summary`` of the zoo's rows, then of the fresh configs' (when any ran)."""
    labels = {"zoo": "zoo", "fresh": "fresh-config"}
    return "\n".join(group_summary(group, labels[key]) for key, group in
                     common.by_group(rows, lambda row: row.model).items())


def group_summary(rows: Sequence[Row], label: str) -> str:
    """Median and max of tensorplan / ExecuTorch best over the ``label`` models
    (``_dynamic`` variants left out: they plan at their static twin's upper bound), and the
    models above 1.00x."""
    ratios = {row.model: row.plan.arena_bytes / chosen.arena for row in rows
              if not row.model.endswith("_dynamic") and (chosen := best(row)) and chosen.arena}
    if not ratios:
        return f"No {label} model ran under ExecuTorch: no summary.\n"
    worst = max(ratios, key=ratios.__getitem__)
    above = sorted(name for name, ratio in ratios.items() if ratio > 1.0)
    median = statistics.median(ratios.values())
    return (f"**Summary** over {len(ratios)} {label} models (the `_dynamic` variants left "
            f"out): tensorplan / ExecuTorch best median **{median:.2f}x** (target <= "
            f"{TARGET_MEDIAN:.2f}x: {'met' if median <= TARGET_MEDIAN else 'missed'}), max "
            f"{ratios[worst]:.2f}x ({worst}), {len(above)} above 1.00x"
            f"{': ' + ', '.join(above) if above else ''} (target: none).\n")


def report(rows: Sequence[Row], with_executorch: bool, runs: int) -> str:
    """The summary line and the four tables with their notes."""
    parts = [summary(rows) + "\n"] if with_executorch else []
    parts += [
        "Baseline bound: the bytes live at the busiest step of the exported order with one "
        "buffer per value (the bound before the bound-lowering stage). Arena: the default "
        "`tp.compile` (reuse, reorder and fold on). ExecuTorch best: its smallest arena among "
        "the configurations whose program loads and, where it runs, equals eager (all of them "
        "in the last table; † marks a best configuration whose run fails in a kernel, as every "
        "configuration's does on that model); \"same, arena + constants\" compares arena plus "
        "constant bytes, since folding trades one for the other. "
        "Constants: bytes the runs read, before and after folding. Latency: eager's median ms "
        f"over {runs} calls on the example inputs, then `Program.run` / eager with the lowering "
        "off and on (one thread, `torch.no_grad()`, calls interleaved).\n\n",
        comparison_table(rows, with_executorch),
        "\nWhat each technique gives: the arena with the lowering off (one buffer per value, "
        "exported order, nothing folded), with each switch alone, and with all three; in "
        "brackets the ratio to the lowering off.\n\n",
        techniques_table(rows),
        "\nThe default plan: storages, its lower bound (for the chosen order and reuse: no plan "
        "of this program can be smaller), the arena's gap to it, compile time, and the largest "
        "storages live at the peak step.\n\n",
        details_table(rows)]
    if with_executorch:
        parts += ["\nEvery ExecuTorch configuration (`benchmarks/common.py`): arena / constant "
                  "buffer bytes, and why it did not lower, load, run or equal eager.\n\n",
                  executorch_table(rows)]
    return "".join(parts)


# --- entry point -----------------------------------------------------------------------------
def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown tables to this file")
    common.add_model_arguments(parser)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS,
                        help=f"timed calls of eager and each program (default {DEFAULT_RUNS})")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the chosen models, print the tables, write them to ``--out``; 0 on success."""
    options = _arguments(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    names = common.chosen_models(options)
    with_executorch = common.executorch_installed()
    warm_up()
    rows = [measure(name, with_executorch, options.runs) for name in names]
    common.emit(common.selection_note(names) + report(rows, with_executorch, options.runs),
                options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
