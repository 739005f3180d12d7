"""The ``.pte`` tensorplan ships (``integrations.executorch.to_executorch``) vs ExecuTorch's own,
every program run in ExecuTorch's runtime.

Usage: ``python benchmarks/bench_pte.py [--out FILE] [--models a,b | --full] [--runs N]``

For each model of ``common.REPRESENTATIVE`` (every zoo model with ``--full``) and each of
``common.FRESH``'s the script exports the example (``torch.export.export``, strict=False) and
lowers it with each ExecuTorch configuration of ``common.EXECUTORCH_CONFIGS``; it compiles the
example with ``tp.compile`` (the Python plan) and ships that program with ``to_executorch``
(defaults: reuse, reorder, fold, algorithm "auto"), as a user does (a model ``tp.compile``
fails on is shipped from its export, the Python plan's cell giving the reason); it loads every
program in ExecuTorch's runtime, runs it on the example inputs and compares the outputs with
eager PyTorch. Where the ``.pte``'s arena is above the Python plan's, it names the ExecuTorch
kernels that keep it there (``integrations.executorch.gap``). ExecuTorch's best configuration is
``common.best_result``'s (smallest arena among those that load and, where they run, equal eager;
the same rule as ``bench_plan.py``). Run time: median ms of ``method.execute`` of tensorplan's
``.pte`` and of the best configuration's, calls interleaved, in the same runtime.

``common.FRESH`` holds configs the zoo does not (built there, seeded): transformers of the zoo's
families at other widths, depths and lengths, and CNNs of families the zoo lacks (MobileNetV3,
EfficientNet, MnasNet) at resolutions it does not use; the summary gives their figures beside
the zoo's.

It prints a summary line (median and max of the ``.pte`` arena over ExecuTorch's best, the
``_dynamic`` variants left out as in ``bench_plan.py``) and a markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from common import EXECUTORCH_CONFIGS, ExecuTorchResult, one_line, quiet

import tensorplan as tp
from tensorplan.integrations.executorch import Shipped, lower
from tensorplan.integrations.executorch.gap import describe, pte_gap
from tensorplan.zoo import Example

REASON_CHARS = 90   # longest failure reason printed in a table cell
DEFAULT_RUNS = 10   # timed calls of each program
TARGET_MEDIAN = 0.75  # the target for the median .pte arena / ExecuTorch best


@dataclass(frozen=True)
class Row:
    """One model's measurements."""

    model: str
    executorch: tuple[ExecuTorchResult, ...]  # one per EXECUTORCH_CONFIGS entry
    shipped: Shipped | None  # tensorplan's lowering (its manager dropped), None if it failed
    result: ExecuTorchResult  # tensorplan's .pte loaded, run and compared with eager
    seconds: float  # to_executorch wall time
    times: dict[str, float] | None  # median ms: "tensorplan", "eager", (when its program
    #                                 runs) "executorch", the best configuration's, and (when
    #                                 it keeps another folding) "time", prefer="time"'s
    python_arena: int | None = None  # tp.compile's plan.arena_bytes, None if it failed
    gap: str = ""  # gap.describe of what keeps the .pte above the Python plan ("": nothing)
    by_time: str = ""  # the folding lower(prefer="time") keeps where it differs ("": the same)


def _export(example: Example) -> torch.export.ExportedProgram:
    return torch.export.export(example.model, example.args, example.kwargs,
                               dynamic_shapes=example.dynamic_shapes, strict=False)


def _lower_config(example: Example, config: str) -> tuple[Any, str | None]:
    try:
        return common.lower_to_executorch(example, config), None
    except Exception as error:  # any lowering failure becomes the table cell, not a crash
        return None, one_line(error, REASON_CHARS)


def _times(example: Example, ours: Any, theirs: Any | None, by_time: Any | None,
           runs: int) -> dict[str, float]:
    """Median ms of tensorplan's ``.pte``, of the best configuration's (when one runs), of
    prefer="time"'s (when given) and of eager PyTorch, calls interleaved."""
    programs = {"tensorplan": common.load_executorch(ours)}
    if theirs is not None:
        programs["executorch"] = common.load_executorch(theirs)
    if by_time is not None:
        programs["time"] = common.load_executorch(by_time)
    calls = {name: common.executorch_call(program, example.args, example.kwargs)
             for name, program in programs.items()}
    calls["eager"] = lambda: example.model(*example.args, **example.kwargs)
    return common.medians(calls, runs)


def measure(name: str, runs: int) -> Row:
    """Lower model ``name`` (the zoo's or ``common.FRESH``'s) with every ExecuTorch
    configuration and with tensorplan."""
    example = common.example(name)
    with torch.no_grad():
        expected = example.model(*example.args, **example.kwargs)
    lowered, results = {}, []
    for config in EXECUTORCH_CONFIGS:
        program, reason = _lower_config(example, config)
        if program is None:
            results.append(ExecuTorchResult(config, None, None, "lower", reason))
            continue
        lowered[config] = program
        results.append(common.check_executorch(config, program, example, expected,
                                               REASON_CHARS))
    program, compile_failed = _compiled(example)
    source = program if program is not None else _export(example)
    start = time.perf_counter()
    try:
        with torch.no_grad(), quiet():
            shipped = lower(source)
    except Exception as error:  # a failure becomes the table cell, not a crash
        failed = ExecuTorchResult("tensorplan", None, None, "lower", one_line(error, REASON_CHARS))
        return Row(name, tuple(results), None, failed, time.perf_counter() - start, None)
    seconds = time.perf_counter() - start
    python_arena, gap = (program.plan.arena_bytes, describe(pte_gap(program, shipped))) \
        if program is not None else (None, compile_failed)
    ours = common.check_executorch("tensorplan", shipped.manager, example, expected,
                                   REASON_CHARS)
    chosen = common.best_result(results)
    theirs = lowered[chosen.config] if chosen is not None and chosen.failed is None else None
    by_time = _by_time(source, shipped) if ours.failed is None else None
    times = _times(example, shipped.manager, theirs, by_time and by_time.manager,
                   runs) if ours.failed is None else None
    return Row(name, tuple(results), dataclasses.replace(shipped, manager=None), ours, seconds,
               times, python_arena, gap, by_time.folding if by_time else "")


def _by_time(source: Any, shipped: Shipped) -> Shipped | None:
    """``lower(prefer="time")`` of what was shipped where it may keep another folding than
    ``shipped`` (another folding tried gave the same arena) and does; else None."""
    if not any(choice.name != shipped.folding and choice.arena_bytes == shipped.arena_bytes
               for choice in shipped.folds):
        return None
    with torch.no_grad(), quiet():
        by_time = lower(source, prefer="time")
    return by_time if by_time.folding != shipped.folding else None


def _compiled(example: Example) -> tuple[tp.Program | None, str]:
    """``tp.compile`` of the example (the Python plan, and the program shipped), or None and
    the reason it failed."""
    try:
        with quiet():
            return tp.compile(example.model, example.args, example.kwargs,
                              dynamic_shapes=example.dynamic_shapes), ""
    except Exception as error:  # a failure becomes the table cell, not a crash
        return None, f"compile: {one_line(error, REASON_CHARS)}"


def _equal_cell(result: ExecuTorchResult) -> str:
    return "yes" if result.failed is None else f"{result.failed}: {result.reason}"


def _time_cell(row: Row) -> str:
    times = row.times
    if times is None:
        return "n/a"
    ours = times["tensorplan"]
    best = (f"{times['executorch']:.2f} ms, {common.ratio(ours, times['executorch'])}"
            if "executorch" in times else "does not run")
    by_time = (f"; prefer=\"time\" ({row.by_time}): {times['time']:.2f} ms, "
               f"{common.ratio(times['time'], times['executorch'])} of the best's"
               if "time" in times and "executorch" in times else "")
    return (f"{ours:.2f} ms / best's {best} / eager {times['eager']:.2f} ms, "
            f"{common.ratio(ours, times['eager'])}{by_time}")


def run_summary(rows: Sequence[Row]) -> str:
    """Median and max of the ``.pte``'s run time over the best configuration's and over
    eager's (the ``_dynamic`` variants left out)."""
    timed = [r for r in rows if r.times and not r.model.endswith("_dynamic")]
    best = {r.model: r.times["tensorplan"] / r.times["executorch"] for r in timed
            if "executorch" in r.times}
    eager = {r.model: r.times["tensorplan"] / r.times["eager"] for r in timed}
    if not eager:
        return "no `.pte` ran"
    slowest = max(best, key=best.__getitem__) if best else None
    above = sorted(model for model, value in best.items() if value > 1.0)
    by_time = {**best, **{r.model: r.times["time"] / r.times["executorch"] for r in timed
                          if "time" in r.times and "executorch" in r.times}}
    above_by_time = sorted(model for model, value in by_time.items() if value > 1.0)
    by_time_median = statistics.median(by_time.values()) if by_time else float("nan")
    return (f"run time of the `.pte` / the best configuration's `.pte` median "
            f"{statistics.median(best.values()) if best else float('nan'):.2f}x, max "
            f"{best[slowest] if slowest else float('nan'):.2f}x ({slowest}), slower than it: "
            f"{', '.join(above) or 'none'} (with prefer=\"time\" where it keeps another "
            f"folding: median {by_time_median:.2f}x, "
            f"slower: {', '.join(above_by_time) or 'none'}); / eager median "
            f"{statistics.median(eager.values()):.2f}x, max {max(eager.values()):.2f}x "
            f"({max(eager, key=eager.__getitem__)})")


def _plan_cells(shipped: Shipped) -> list[str]:
    plans = list(shipped.methods.values())
    return [str(shipped.arena_bytes), str(sum(p.lower_bound_bytes for p in plans)),
            str(shipped.constant_bytes), shipped.folding, ", ".join(p.order for p in plans),
            f"{sum(p.in_place for p in plans)} / {sum(p.concat for p in plans)}"]


def table(rows: Sequence[Row]) -> str:
    """One line per model: the .pte's plan, ExecuTorch's greedy and best, ratios, run."""
    header = ["model", ".pte arena (B)", "lower bound (B)", "constants (B)", "folding", "order",
              "in-place / concat links", "Python plan (B)", ".pte above the Python plan because",
              "ExecuTorch greedy (B)", "ExecuTorch best (B)",
              "best config", ".pte / best", "arena + constants / best's",
              "equals eager in ExecuTorch's runtime", "run: .pte / best's .pte / eager",
              "to_executorch (s)"]
    cells = []
    for row in rows:
        greedy, chosen = row.executorch[0], common.best_result(row.executorch)
        plan = _plan_cells(row.shipped) if row.shipped else ["n/a"] * 6
        best_arena = chosen.arena if chosen else None
        line = [row.model, *plan,
                str(row.python_arena) if row.python_arena is not None else "n/a",
                row.gap or "-",
                str(greedy.arena) if greedy.arena is not None else f"{greedy.failed} failed",
                str(best_arena) if chosen else "none loads",
                chosen.config + (" (†)" if chosen.failed else "") if chosen else "n/a",
                common.ratio(row.shipped.arena_bytes if row.shipped else None, best_arena),
                common.ratio(row.shipped.arena_bytes + row.shipped.constant_bytes
                       if row.shipped else None,
                       (best_arena or 0) + (chosen.constants or 0) if chosen else None),
                _equal_cell(row.result), _time_cell(row), f"{row.seconds:.1f}"]
        cells.append(line)
    return common.markdown(header, cells)


def summary(rows: Sequence[Row]) -> str:
    """``group_summary`` of the zoo's rows, then of the fresh configs' (when any ran)."""
    labels = {"zoo": "zoo", "fresh": "fresh-config"}
    return "".join(group_summary(group, labels[key]) for key, group in
                   common.by_group(rows, lambda row: row.model).items())


def group_summary(rows: Sequence[Row], label: str) -> str:
    """Over ``rows`` (the ``label`` models): median and max of the .pte arena over ExecuTorch's
    best, models above 1.00x, totals above the best's, .pte programs that differ from eager,
    those above the Python plan, and the run-time figures."""
    ratios, totals = {}, {}
    for row in rows:
        chosen = common.best_result(row.executorch)
        if row.model.endswith("_dynamic") or not row.shipped or not chosen or not chosen.arena:
            continue
        ratios[row.model] = row.shipped.arena_bytes / chosen.arena
        totals[row.model] = (row.shipped.arena_bytes + row.shipped.constant_bytes) / \
            (chosen.arena + (chosen.constants or 0))
    if not ratios:
        return f"No {label} model lowered: no summary.\n\n"
    median, worst = statistics.median(ratios.values()), max(ratios, key=ratios.__getitem__)
    above = sorted(name for name, ratio in ratios.items() if ratio > 1.0)
    heavier = sorted(name for name, ratio in totals.items() if ratio > 1.0)
    differ = sorted(row.model for row in rows if row.result.failed is not None
                    and (chosen := common.best_result(row.executorch)) is not None
                    and chosen.failed is None)
    both = sorted(row.model for row in rows if row.result.failed is not None
                  and row.model not in differ)
    above_python = sorted(row.model for row in rows if row.shipped and row.python_arena is not None
                          and row.shipped.arena_bytes > row.python_arena)
    return (f"**Summary** over {len(ratios)} {label} models (the `_dynamic` variants left "
            f"out): `.pte` arena / ExecuTorch best median **{median:.2f}x** (target <= "
            f"{TARGET_MEDIAN:.2f}x: "
            f"{'met' if median <= TARGET_MEDIAN else 'missed'}), max {ratios[worst]:.2f}x "
            f"({worst}); above 1.00x: {', '.join(above) or 'none'}; arena + constants above "
            f"the best's: {', '.join(heavier) or 'none'}; `.pte` not equal to eager in "
            f"ExecuTorch's runtime where ExecuTorch's own program is: {', '.join(differ) or 'none'}"
            f" (both fail or differ in the runtime's kernels: {', '.join(both) or 'none'}); "
            f"`.pte` arena above the Python plan's: {', '.join(above_python) or 'none'}; "
            f"{run_summary(rows)}.\n\n")


def report(rows: Sequence[Row], runs: int) -> str:
    """The summary line and the table with its notes."""
    return "".join([
        summary(rows),
        "`.pte` arena: the planned bytes of tensorplan's program (ExecuTorch's non-constant "
        "buffers), with its lower bound for the chosen order and links; folding: the one kept "
        "by default (the smallest arena, then arena + constants); links: outputs written over "
        "a dying argument by a measured kernel / "
        "`cat` inputs made in their slices and pad inputs in the tail of the pad's output. "
        "Python plan: `tp.compile`'s arena for the same example, the program the `.pte` "
        "ships (to_executorch (s): its lowering); where the `.pte`'s is above "
        "it, the ExecuTorch kernels that hold apart, at the `.pte`'s busiest step, an input "
        "and an output the Python plan holds in one storage, with the input's bytes "
        "(`integrations.executorch.gap`). ExecuTorch best: the configuration of "
        "`common.EXECUTORCH_CONFIGS` with the smallest arena among those that load and, where "
        "they run, equal eager († marks one whose run fails in a kernel, as every "
        "configuration's does on that model). Equals eager: tensorplan's `.pte` loaded by "
        f"ExecuTorch's runtime, run on the example inputs. Run: median ms over {runs} calls of "
        "`method.execute`, tensorplan's `.pte` and the best configuration's, and of eager "
        "PyTorch's model, interleaved, one thread; where another folding tried gave the same "
        "arena, the program of `lower(prefer=\"time\")` (the smallest arena, then the fewest "
        "instructions run at each call) is timed beside them when it keeps another folding.\n\n",
        table(rows)])


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown table to this file")
    common.add_model_arguments(parser)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS,
                        help=f"timed calls of each program (default {DEFAULT_RUNS})")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the chosen models, print the table, write it to ``--out``; 0 on success."""
    options = _arguments(argv)
    if not common.executorch_installed():
        common.emit("executorch is not installed: no `.pte` to measure.\n", options.out)
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    names = common.chosen_models(options)
    rows = []
    for name in names:
        rows.append(measure(name, options.runs))
        print(f"{name}: done", file=sys.stderr, flush=True)
    common.emit(common.selection_note(names) + report(rows, options.runs), options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
