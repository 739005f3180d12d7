"""``tensorplan run TARGET``: run a model out of its arena and compare it with eager."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tensorplan.cli import options
from tensorplan.errors import TensorPlanError

if TYPE_CHECKING:
    from tensorplan import zoo
    from tensorplan.program import Program


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``run`` subcommand and its options."""
    parser = options.target_command(commands, "run",
                                    "run a model out of its arena, compare with eager")
    parser.add_argument("--runs", type=options.positive_int, default=20, metavar="N",
                        help="timed runs of each (default 20; the median is shown)")
    options.add_threads(parser)
    parser.add_argument("--explain", action="store_true",
                        help="first print how every node runs (lowering table)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the target on its example inputs; exit 1 if it does not match eager PyTorch."""
    from rich.table import Table

    from tensorplan.cli.targets import load_example, load_target, target_name
    from tensorplan.report.compare import compare
    from tensorplan.runtime.lower import explain

    threads = options.set_threads(args.threads)
    example = load_example(args.target)
    program = load_target(args.target, example=example, command=args.command)
    if args.explain:
        print(explain(program.lowering()))
    inputs, kwargs = _inputs(program, example)
    eager = None if example is None else (lambda: example.model(*inputs, **kwargs))
    result = compare(lambda: program.run(*inputs, **kwargs), eager, args.runs)
    table = Table(
        title=f"{target_name(args.target)}: run out of {_arena_text(program)}",
        caption=f"medians of {args.runs} runs on {threads}; fallbacks: ops run functionally "
                "and copied into their planned storage, per run",
    )
    for name in ("outputs", "max |error|", "matches eager", "run ms", "eager ms",
                 "fallbacks per run"):
        table.add_column(name)
    table.add_row(
        ", ".join(result.outputs),
        "-" if result.max_abs_error is None else f"{result.max_abs_error:.3g}",
        {None: "-", True: "yes", False: "NO"}[result.matches],
        f"{result.run_ms:.3f}",
        "-" if result.eager_ms is None else f"{result.eager_ms:.3f}",
        _per_run(program.stats, program.default_runner.stats.runs),
    )
    options.console().print(table)
    return 1 if result.matches is False else 0


def _arena_text(program: Program) -> str:
    """The arena the example inputs run in: with dynamic dims, at the example's sizes, and the
    arena at the upper bounds beside it."""
    plan = program.plan
    if plan.symbolic is None:
        return f"a {plan.arena_bytes:,} B arena"
    sizes = {d.name: d.example for d in plan.symbolic.dims}
    shown = ", ".join(f"{name}={size}" for name, size in sizes.items())
    return (f"a {plan.arena_bytes_at(**sizes):,} B arena at {shown} "
            f"({plan.arena_bytes:,} B at the upper bounds)")


def _per_run(fallbacks: dict[str, int], runs: int) -> str:
    """``op xN`` for each op, N its functional runs in one run of the program."""
    return ", ".join(f"{op} x{count / runs:g}" for op, count in fallbacks.items()) or "none"


def _inputs(program: Program, example: zoo.Example | None) -> tuple[tuple, dict]:
    if example is not None:
        return example.args, example.kwargs
    inputs = program.exported_program.example_inputs
    if inputs is None:
        raise TensorPlanError(
            "run: the file holds no example inputs; run it from Python with Program.run(*inputs)"
        )
    return inputs
