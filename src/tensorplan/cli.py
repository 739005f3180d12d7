"""The ``tensorplan`` console command: one function pair (add parser, run) per subcommand.

Every error tensorplan raises on purpose is printed as one line on stderr with exit code 2;
an ``InternalError`` (a bug in tensorplan) as one line and the node it failed at, exit code 3
(with ``TENSORPLAN_DEBUG=1``, the full traceback first).
What a user sees first is ``DESCRIPTION`` and ``EXAMPLES`` (``tensorplan --help``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import textwrap
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from tensorplan import zoo
from tensorplan.arena_budget import check_arena, parse_bytes
from tensorplan.banks import Bank
from tensorplan.bench import BenchRow, bench_target, check_algorithms
from tensorplan.capture import capture
from tensorplan.dsa import load_instance, write_solution
from tensorplan.errors import InternalError, TensorPlanError
from tensorplan.internal import stage, versions
from tensorplan.plan import PlanOptions
from tensorplan.planners import Placement, plan_buffers
from tensorplan.planners.dispatch import PLANNERS
from tensorplan.program import Program
from tensorplan.report import (
    plan_summary,
    plan_to_c_header,
    plan_to_json,
    plot_timeline,
    spec_table,
)
from tensorplan.report.banks import bank_table
from tensorplan.report.compare import compare
from tensorplan.report.diff import diff_plans, diff_report, read_plan_file
from tensorplan.report.html import placement_plan, write_html, write_page
from tensorplan.report.patches import patching_table
from tensorplan.report.pte import pte_tables
from tensorplan.report.symbolic import symbolic_summary
from tensorplan.report.timeline import plot_plan
from tensorplan.runtime.lower import explain
from tensorplan.schedule import ScheduleOptions
from tensorplan.targets import (
    FORMS,
    CompileOptions,
    load_example,
    load_exported,
    load_target,
    target_name,
)

EXIT_ERROR = 2  # exit code for a TensorPlanError (and argparse usage errors)
EXIT_INTERNAL = 3  # exit code for an InternalError: a bug in tensorplan
WIDE = 160  # console width when stdout is not a terminal (files, pipes, tests)

DESCRIPTION = """\
Take a PyTorch model to a fixed, verified memory plan: the shape bound, dtype and layout of
every tensor, one arena for all of them, and where each one lives in it. Then run the model
out of that arena, or hand the plan to a device as JSON or a C header.

A TARGET is zoo:NAME (a built-in model), package.module:factory (a function of yours that
returns (model, args[, kwargs, dynamic_shapes]); the current directory is importable), or a
.pt2 file (torch.export.save) or a program saved with --save."""

EXAMPLES = """\
examples:
  tensorplan plan zoo:tiny_gpt --html plan.html   plan a built-in model; open plan.html
  tensorplan plan mymodels:make_model --specs --timeline plan.png --header plan.h --json plan.json
  tensorplan plan zoo:mlp --save mlp.tplan        save the program with its plan
  tensorplan run zoo:tiny_gpt                     run out of the arena, compare with eager
  tensorplan dsa benchmarks/dsa/challenging_A.csv --html dsa.html
                                                  plan a CSV instance (id,lower,upper,size)
  tensorplan bench zoo:mlp benchmarks/dsa/resnet50.csv --algorithms greedy,auto
                                                  time and compare the planners
  tensorplan diff old.tplan new.tplan             what a model change cost in memory
  tensorplan pte zoo:tiny_gpt -o tiny_gpt.pte     an ExecuTorch program with tensorplan's plan

built-in models: {models}
`tensorplan COMMAND --help` lists a command's options."""


def _placement_table(title: str, buffers: int, placement: Placement, seconds: float) -> Table:
    """A two-column rich table: the numbers a user wants from one planning run."""
    table = Table(title=title, show_header=False)
    table.add_column("field")
    table.add_column("value", justify="right")
    for field, value in (
        ("buffers", f"{buffers:,}"),
        ("algorithm", placement.algorithm),
        ("peak", f"{placement.peak:,}"),
        ("lower bound", f"{placement.lower_bound:,}"),
        ("gap", f"{100 * placement.gap:.2f} % (+{placement.peak - placement.lower_bound:,} B)"),
        ("optimal", "yes" if placement.optimal else "no"),
        ("seconds", f"{seconds:.2f}"),
    ):
        table.add_row(field, value)
    return table


def add_dsa_command(commands: argparse._SubParsersAction) -> None:
    """``tensorplan dsa FILE.csv``: plan a dynamic-storage-allocation instance."""
    parser = commands.add_parser("dsa", help="plan a CSV instance (id,lower,upper,size)")
    parser.add_argument("file", help="CSV instance with columns id,lower,upper,size")
    parser.add_argument("--algorithm", default="auto", choices=sorted(PLANNERS))
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="S",
        help="seconds for the optimal search (default: the planner's own)",
    )
    parser.add_argument(
        "--out", default=None, metavar="F", help="write the rows with an offset column to this CSV"
    )
    parser.add_argument("--html", metavar="F", help="write the interactive page of the placement")
    parser.add_argument("--timeline", metavar="F.png", help="draw the placement (.png, .svg)")
    parser.set_defaults(run=run_dsa)


def run_dsa(args: argparse.Namespace) -> int:
    """Load, plan, print the result table, and optionally write the offsets."""
    instance = load_instance(args.file)
    started = time.perf_counter()
    with stage("plan"):
        placement = plan_buffers(
            instance.problem.buffers, algorithm=args.algorithm, time_limit=args.time_limit
        )
    seconds = time.perf_counter() - started
    buffers = len(instance.problem.buffers)
    Console().print(_placement_table(str(args.file), buffers, placement, seconds))
    if args.out:
        write_solution(args.out, instance, placement)
    plan = placement_plan(instance, placement)
    if args.html:
        _write(args.html, "page", lambda path: write_page(path, f"{args.file}: placement", plan,
                                                          {}))
    if args.timeline:
        _write(args.timeline, "timeline", lambda path: plot_plan(plan, path, str(args.file)))
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _target_command(commands: argparse._SubParsersAction, name: str,
                    summary: str) -> argparse.ArgumentParser:
    """A subcommand that takes one TARGET (zoo:NAME, module:factory or a file)."""
    parser = commands.add_parser(name, help=summary)
    parser.add_argument("target", help=FORMS)
    return parser


def _byte_count(text: str) -> int:
    try:
        return parse_bytes(text)
    except TensorPlanError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_plan_command(commands: argparse._SubParsersAction) -> None:
    """``tensorplan plan TARGET``: compile a model, print its plan, write the files asked for."""
    parser = _target_command(commands, "plan", "compile a model and print its memory plan")
    parser.add_argument(
        "--algorithm",
        default=None,
        choices=sorted(PLANNERS),
        help="planner (default auto; a tensorplan file keeps its saved plan)",
    )
    parser.add_argument(
        "--alignment",
        type=_positive_int,
        default=None,
        metavar="N",
        help="offset alignment in bytes (default 16)",
    )
    parser.add_argument(
        "--max-arena",
        type=_byte_count,
        default=None,
        metavar="N",
        help="fail (exit 2) unless the arena fits N bytes (262144, 256KiB, 1.5MB)",
    )
    for switch, what in (("reuse", "in-place reuse of dying inputs"),
                         ("reorder", "the memory-aware node order"),
                         ("fold", "folding values of constants at compile time")):
        parser.add_argument(f"--no-{switch}", dest=switch, action="store_false",
                            help=f"plan without {what}")
    parser.add_argument(
        "--patches",
        type=_patches,
        default=None,
        metavar="auto|RxC",
        help="run the high-resolution prefix patch by patch: auto, or a grid such as 4x4",
    )
    _add_bank_options(parser)
    parser.add_argument("--specs", action="store_true", help="print the spec table first")
    parser.add_argument("--at", type=_sizes, default=None, metavar="DIM=N[,DIM=N]",
                        help="print (and draw, with --timeline) the plan at these sizes of the "
                             "dynamic dims (seq=16); dims not given are at their upper bound")
    parser.add_argument("--json", metavar="F", help="write the plan and specs as JSON")
    parser.add_argument("--header", metavar="F", help="write the plan as a C header")
    parser.add_argument("--timeline", metavar="F.png", help="draw the plan over time (.png, .svg)")
    parser.add_argument("--html", metavar="F", help="write the interactive page of the plan")
    parser.add_argument("--save", metavar="F", help="save the compiled program (tp.load reads it)")
    parser.set_defaults(run=run_plan)


def _sizes(text: str) -> dict[str, int]:
    """``DIM=N[,DIM=N]``: sizes of dynamic dims by name."""
    sizes = {}
    for part in text.split(","):
        dim, equals, size = part.partition("=")
        if not (dim and equals and size.isdigit()):
            raise argparse.ArgumentTypeError(f"expected DIM=N[,DIM=N] such as seq=16, got {text}")
        sizes[dim.strip()] = int(size)
    return sizes


def _patches(text: str) -> str | tuple[int, int]:
    """``auto`` or a grid ``RxC`` (``4x4``)."""
    if text == "auto":
        return text
    rows, x, cols = text.partition("x")
    if not (x and rows.isdigit() and cols.isdigit() and int(rows) >= 1 and int(cols) >= 1):
        raise argparse.ArgumentTypeError(f"expected auto or ROWSxCOLS such as 4x4, got {text}")
    return int(rows), int(cols)


def _add_bank_options(parser: argparse.ArgumentParser) -> None:
    """``--bank`` (repeated, fastest first) and ``--pin``."""
    parser.add_argument(
        "--bank",
        type=_bank,
        action="append",
        default=None,
        metavar="NAME[=CAPACITY][@COST]",
        help="a memory bank, fastest first, repeated (sram=256KiB dram): each bank's cost "
             "defaults to 10x the one before's, its capacity to unbounded",
    )
    parser.add_argument("--pin", type=_pin, action="append", default=[], metavar="VALUE=BANK",
                        help="keep a value (input, output, state, constant) in a bank")


def _bank(text: str) -> tuple[str, int | None, float | None]:
    """``NAME[=CAPACITY][@COST]``: a bank's name, capacity (None: unbounded), cost (None: the
    default)."""
    match = re.fullmatch(r"([A-Za-z_][\w.-]*)(?:=([^@]+))?(?:@([0-9.]+))?", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"expected NAME[=CAPACITY][@COST] such as "
                                         f"sram=256KiB@1 or dram, got {text}")
    capacity = _byte_count(match.group(2)) if match.group(2) else None
    return match.group(1), capacity, float(match.group(3)) if match.group(3) else None


def _pin(text: str) -> tuple[str, str]:
    value, equals, bank = text.partition("=")
    if not (value and equals and bank):
        raise argparse.ArgumentTypeError(f"expected VALUE=BANK such as b_k_cache=dram, got {text}")
    return value, bank


BANK_COST_STEP = 10.0  # a bank given without @COST costs this much more than the one before


def _banks(given: list[tuple[str, int | None, float | None]] | None) -> tuple[Bank, ...] | None:
    if not given:
        return None
    banks, cost = [], 1.0
    for name, capacity, price in given:
        cost = price if price is not None else (cost * BANK_COST_STEP if banks else 1.0)
        banks.append(Bank(name, capacity, cost))
    return tuple(banks)


def _params(args: argparse.Namespace) -> CompileOptions | None:
    """Compile options given on the command line, or None when none was given."""
    given = {
        key: value
        for key in ("algorithm", "alignment")
        if (value := getattr(args, key)) is not None
    }
    switches = ScheduleOptions(args.reuse, args.reorder, args.fold)
    banks = _banks(getattr(args, "bank", None))
    pins = tuple(getattr(args, "pin", ()))
    if not given and switches == ScheduleOptions() and args.patches is None and banks is None \
            and not pins:
        return None
    return CompileOptions(dataclasses.replace(PlanOptions(), **given), switches, args.patches,
                          banks, pins)


def _write_outputs(program: Program, args: argparse.Namespace) -> None:
    name = target_name(args.target)
    writers = (
        (
            args.json,
            "plan JSON",
            lambda path: _write_text(path, json.dumps(plan_to_json(program, name), indent=1)),
        ),
        (args.header, "C header", lambda path: _write_text(path, plan_to_c_header(program, name))),
        (args.timeline, "timeline", lambda path: _timeline(program, path, name, args.at)),
        (args.html, "page", lambda path: write_html(program, path, name)),
        (args.save, "program", program.save),
    )
    for path, what, write in writers:
        if path:
            _write(path, what, write)


def _timeline(program: Program, path: str, name: str, at: dict[str, int] | None) -> None:
    """The picture of the plan, at the sizes ``--at`` gives (the upper bounds without)."""
    if at is None:
        plot_timeline(program, path, name)
    else:
        plot_plan(program.plan.at(**at), path, f"{name} {_at_title(at)}")


def _write(path: str, what: str, write: Callable[[str], None]) -> None:
    """``write(path)``; a file that cannot be written becomes one ``TensorPlanError`` line."""
    try:
        write(path)
    except (OSError, ValueError) as error:  # ValueError: an image format unknown
        message = error.strerror if isinstance(error, OSError) else None
        raise TensorPlanError(f"cannot write {path}: {message or error}") from None
    print(f"wrote {what} to {path}")


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def run_plan(args: argparse.Namespace) -> int:
    """Compile (or load) the target, print the spec table if asked and the plan, write files."""
    with warnings.catch_warnings():  # torch's own deprecation notices are not the user's
        warnings.simplefilter("ignore", FutureWarning)
        program = load_target(args.target, _params(args))
    with stage("report", program.exported_program):
        _report_plan(program, args)
    return 0


def _report_plan(program: Program, args: argparse.Namespace) -> None:
    """The spec table if asked, the plan, the budget's headroom, and the files asked for."""
    console = Console() if sys.stdout.isatty() else Console(width=WIDE)
    if args.specs:
        console.print(spec_table(program.specs))
    if program.patching is not None:
        console.print(patching_table(program.patching))
    if args.at is not None:
        console.print(plan_summary(program.plan.at(**args.at), title=_at_title(args.at)))
    else:
        console.print(plan_summary(program))
    if program.plan.symbolic is not None:
        console.print(symbolic_summary(program.plan, args.at))
    if program.plan.banks:
        console.print(bank_table(program.plan))
    headroom = check_arena(program.plan, args.max_arena)
    if headroom is not None:
        print(f"fits the budget of {args.max_arena:,} B with {headroom:,} B to spare")
    _write_outputs(program, args)


def _at_title(sizes: dict[str, int]) -> str:
    return "at " + ", ".join(f"{dim}={size}" for dim, size in sorted(sizes.items()))


def add_run_command(commands: argparse._SubParsersAction) -> None:
    """``tensorplan run TARGET``: run a model out of its arena and compare it with eager."""
    parser = _target_command(commands, "run", "run a model out of its arena, compare with eager")
    parser.add_argument(
        "--runs",
        type=_positive_int,
        default=20,
        metavar="N",
        help="timed runs of each (default 20; the median is shown)",
    )
    parser.add_argument(
        "--explain", action="store_true", help="first print how every node runs (lowering table)"
    )
    parser.set_defaults(run=run_run)


def _inputs(program: Program, example: zoo.Example | None) -> tuple[tuple, dict]:
    if example is not None:
        return example.args, example.kwargs
    inputs = program.exported_program.example_inputs
    if inputs is None:
        raise TensorPlanError(
            "run: the file holds no example inputs; run it from Python with Program.run(*inputs)"
        )
    return inputs


def run_run(args: argparse.Namespace) -> int:
    """Run the target on its example inputs; exit 1 if it does not match eager PyTorch."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        example = load_example(args.target)
        program = load_target(args.target, example=example)
    if args.explain:
        print(explain(program.lowering()))
    inputs, kwargs = _inputs(program, example)
    eager = None if example is None else (lambda: example.model(*inputs, **kwargs))
    result = compare(lambda: program.run(*inputs, **kwargs), eager, args.runs)
    table = Table(
        title=f"{target_name(args.target)}: run out of a {program.plan.arena_bytes:,} B arena"
    )
    for name in ("outputs", "max |error|", "matches eager", "run ms", "eager ms", "fallbacks"):
        table.add_column(name)
    table.add_row(
        ", ".join(result.outputs),
        "-" if result.max_abs_error is None else f"{result.max_abs_error:.3g}",
        {None: "-", True: "yes", False: "NO"}[result.matches],
        f"{result.run_ms:.3f}",
        "-" if result.eager_ms is None else f"{result.eager_ms:.3f}",
        ", ".join(f"{op} x{n}" for op, n in program.stats.items()) or "none",
    )
    (Console() if sys.stdout.isatty() else Console(width=WIDE)).print(table)
    return 1 if result.matches is False else 0


def add_pte_command(commands: argparse._SubParsersAction) -> None:
    """``tensorplan pte TARGET -o F``: an ExecuTorch program carrying tensorplan's plan."""
    parser = _target_command(commands, "pte",
                             "write an ExecuTorch .pte that carries tensorplan's plan")
    parser.add_argument("-o", "--output", required=True, metavar="F.pte",
                        help="where to write the program")
    parser.add_argument("--algorithm", default="auto", choices=sorted(PLANNERS),
                        help="planner (default auto)")
    for switch, what in (("reuse", "in-place reuse and concatenation in place"),
                         ("reorder", "tensorplan's node order"),
                         ("fold", "choosing the folding of constants"),
                         ("moves", "copies between banks (with --bank)")):
        parser.add_argument(f"--no-{switch}", dest=switch, action="store_false",
                            help=f"lower without {what}")
    _add_bank_options(parser)
    parser.set_defaults(run=run_pte)


def _exported(target: str) -> Any:
    """The target's exported program (a model target is captured, a file is read)."""
    example = load_example(target)
    if example is None:
        return load_exported(target)
    return capture(example.model, example.args, example.kwargs,
                   dynamic_shapes=example.dynamic_shapes)


def run_pte(args: argparse.Namespace) -> int:
    """Lower the target with ``to_executorch``, write the ``.pte``, print what it holds."""
    from tensorplan.integrations.executorch import executorch_arena_bytes, lower

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported = _exported(args.target)
        banks = _banks(args.bank)
        shipped = lower(exported, reuse=args.reuse, reorder=args.reorder, fold=args.fold,
                        algorithm=args.algorithm, banks=banks, pin=dict(args.pin) or None,
                        moves=args.moves)
        greedy = executorch_arena_bytes(exported)
    _write(args.output, "program", lambda path: _write_bytes(path, shipped.manager.buffer))
    console = Console() if sys.stdout.isatty() else Console(width=WIDE)
    console.print(pte_tables(target_name(args.target), shipped, greedy))
    for method, plan in shipped.methods.items():
        for mem_id, (bank, arena) in enumerate(zip(banks or (), plan.bank_arenas, strict=False),
                                               start=1):
            room = "unbounded" if bank.capacity is None else f"{bank.capacity:,} B"
            print(f"{method}: bank {bank.name} (mem_id {mem_id}, {room}): arena {arena:,} B")
        if banks:
            print(f"{method}: traffic cost {plan.traffic_cost:,.0f} (proven bound "
                  f"{plan.traffic_cost_bound:,.0f}); copies between banks: {plan.bank_copies}")
    return 0


def _write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


def add_bench_command(commands: argparse._SubParsersAction) -> None:
    """``tensorplan bench TARGET...``: plan each target with several algorithms and measure."""
    parser = commands.add_parser(
        "bench", help="plan models or CSV instances with several planners; time and compare"
    )
    parser.add_argument("targets", nargs="+", help=f"{FORMS}, or a .csv instance")
    parser.add_argument(
        "--algorithms",
        default="greedy,auto",
        metavar="A,B",
        help="comma-separated planners (default greedy,auto)",
    )
    parser.add_argument(
        "--runs", type=_positive_int, default=10, metavar="N", help="timed runs per model plan"
    )
    parser.add_argument(
        "--time-limit", type=float, default=None, metavar="S", help="seconds per optimal search"
    )
    parser.add_argument("--json", metavar="F", help="write the rows as JSON")
    parser.set_defaults(run=run_bench)


def _bench_table(rows: list[BenchRow]) -> Table:
    table = Table(title="tensorplan bench")
    columns = ("target", "algorithm", "buffers", "arena (B)", "lower bound (B)", "gap",
               "optimal", "plan s", "run ms", "eager ms", "matches eager")
    for name in columns:
        table.add_column(name, justify="left" if name in ("target", "algorithm") else "right")
    for row in rows:
        chosen = row.algorithm if row.chosen == row.algorithm else f"{row.algorithm}->{row.chosen}"
        table.add_row(
            row.target, chosen, f"{row.buffers:,}", f"{row.arena_bytes:,}",
            f"{row.lower_bound_bytes:,}", f"{100 * row.gap:.2f} %",
            "yes" if row.optimal else "no", f"{row.plan_seconds:.2f}",
            "-" if row.run_ms is None else f"{row.run_ms:.3f}",
            "-" if row.eager_ms is None else f"{row.eager_ms:.3f}",
            {None: "-", True: "yes", False: "NO"}[row.matches],
        )
    return table


def run_bench(args: argparse.Namespace) -> int:
    """Bench every target; exit 1 if a model's run does not match eager PyTorch."""
    algorithms = [name.strip() for name in args.algorithms.split(",") if name.strip()]
    check_algorithms(algorithms)
    rows = []
    for target in args.targets:
        rows += bench_target(target, algorithms, args.runs, args.time_limit)
    (Console() if sys.stdout.isatty() else Console(width=WIDE)).print(_bench_table(rows))
    if args.json:
        records = [dataclasses.asdict(row) | {"gap": row.gap} for row in rows]
        try:
            _write_text(args.json, json.dumps(records, indent=1))
        except OSError as error:
            raise TensorPlanError(f"cannot write {args.json}: {error.strerror or error}") from None
        print(f"wrote {len(rows)} rows to {args.json}")
    return 1 if any(row.matches is False for row in rows) else 0


def add_diff_command(commands: argparse._SubParsersAction) -> None:
    """``tensorplan diff OLD NEW``: compare two plans storage by storage."""
    parser = commands.add_parser(
        "diff", help="compare two saved programs or plan JSON files: what grew, what shrank"
    )
    parser.add_argument("old", help="a saved program (--save) or a plan JSON file (--json)")
    parser.add_argument("new", help="the same, after the change")
    parser.set_defaults(run=run_diff)


def run_diff(args: argparse.Namespace) -> int:
    """Print arena, bound and the storages that grew, shrank, appeared or vanished."""
    diff = diff_plans(read_plan_file(args.old), read_plan_file(args.new))
    console = Console() if sys.stdout.isatty() else Console(width=WIDE)
    console.print(f"{args.old} -> {args.new}")
    console.print(diff_report(diff))
    return 0


COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    add_plan_command,
    add_run_command,
    add_dsa_command,
    add_bench_command,
    add_diff_command,
    add_pte_command,
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand in ``COMMANDS``, ``--help`` and ``--version``."""
    parser = argparse.ArgumentParser(
        prog="tensorplan", description=DESCRIPTION,
        epilog=EXAMPLES.format(models=textwrap.fill(", ".join(zoo.names()), width=80,
                                                    subsequent_indent="  ")),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=versions())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (2 on a tensorplan error, no traceback;
    3 on an internal error)."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except InternalError as error:
        if os.environ.get("TENSORPLAN_DEBUG") == "1":
            traceback.print_exception(error)
        print(f"tensorplan {args.command}: {error.summary}", file=sys.stderr)
        if error.node is not None:
            print(f"  at node {error.node}", file=sys.stderr)
        return EXIT_INTERNAL
    except TensorPlanError as error:
        text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        print(f"tensorplan {args.command}: error: {text}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
