"""The ``tensorplan`` console command: one function pair (add parser, run) per subcommand.

Every error tensorplan raises on purpose is printed as one line on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.table import Table

from tensorplan.dsa import load_instance, write_solution
from tensorplan.errors import TensorPlanError
from tensorplan.planners import Placement, plan_buffers
from tensorplan.planners.dispatch import PLANNERS

EXIT_ERROR = 2  # exit code for a TensorPlanError (and argparse usage errors)


def _placement_table(title: str, buffers: int, placement: Placement, seconds: float) -> Table:
    """A one-row rich table: the numbers a user wants from one planning run."""
    table = Table(title=title)
    for name in ("buffers", "algorithm", "peak", "lower bound", "gap", "optimal", "seconds"):
        table.add_column(name, justify="right")
    table.add_row(
        f"{buffers:,}",
        placement.algorithm,
        f"{placement.peak:,}",
        f"{placement.lower_bound:,}",
        f"{100 * placement.gap:.2f} %",
        "yes" if placement.optimal else "no",
        f"{seconds:.2f}",
    )
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
    parser.set_defaults(run=run_dsa)


def run_dsa(args: argparse.Namespace) -> int:
    """Load, plan, print the result table, and optionally write the offsets."""
    instance = load_instance(args.file)
    started = time.perf_counter()
    placement = plan_buffers(
        instance.problem.buffers, algorithm=args.algorithm, time_limit=args.time_limit
    )
    seconds = time.perf_counter() - started
    buffers = len(instance.problem.buffers)
    Console().print(_placement_table(str(args.file), buffers, placement, seconds))
    if args.out:
        write_solution(args.out, instance, placement)
    return 0


COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (add_dsa_command,)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand in ``COMMANDS``."""
    parser = argparse.ArgumentParser(prog="tensorplan", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (2 on a tensorplan error, no traceback)."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except TensorPlanError as error:
        print(f"tensorplan {args.command}: error: {error}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
