"""``tensorplan dsa FILE.csv``: plan a dynamic-storage-allocation instance (torch-free unless a
picture or a page is asked for)."""

from __future__ import annotations

import argparse
import time

from rich.table import Table

from tensorplan.cli import options
from tensorplan.formats.dsa import load_instance, write_solution
from tensorplan.internal import stage
from tensorplan.plan.planners import Placement, plan_buffers
from tensorplan.plan.planners.dispatch import PLANNERS


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``dsa`` subcommand and its options."""
    parser = commands.add_parser("dsa", help="plan a CSV instance (id,lower,upper,size)")
    parser.add_argument("file", help="CSV instance with columns id,lower,upper,size")
    parser.add_argument("--algorithm", default="auto", choices=sorted(PLANNERS))
    parser.add_argument("--time-limit", type=float, default=None, metavar="S",
                        help="seconds for the optimal search (default: the planner's own)")
    parser.add_argument("--out", default=None, metavar="F",
                        help="write the rows with an offset column to this CSV")
    parser.add_argument("--html", metavar="F", help="write the interactive page of the placement")
    parser.add_argument("--timeline", metavar="F.png", help="draw the placement (.png, .svg)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load, plan, print the result table, and optionally write the offsets."""
    instance = load_instance(args.file)
    started = time.perf_counter()
    with stage("plan"):
        placement = plan_buffers(
            instance.problem.buffers, algorithm=args.algorithm, time_limit=args.time_limit
        )
    seconds = time.perf_counter() - started
    buffers = len(instance.problem.buffers)
    options.console().print(_placement_table(str(args.file), buffers, placement, seconds))
    if args.out:
        write_solution(args.out, instance, placement)
    if args.html or args.timeline:
        _draw(args, instance, placement)
    return 0


def _draw(args: argparse.Namespace, instance: object, placement: Placement) -> None:
    """The page and the picture of the placement, as asked: titled by the file's base name,
    with the figures the table prints."""
    from tensorplan.report.html import placement_plan, write_page
    from tensorplan.report.subject import instance_subject
    from tensorplan.report.timeline import plot_plan

    plan = placement_plan(instance, placement)
    subject = instance_subject(str(args.file), placement_rows(len(plan.storages), placement),
                               plan)
    if args.html:
        options.write(args.html, "page", lambda path: write_page(path, plan, subject))
    if args.timeline:
        options.write(args.timeline, "timeline", lambda path: plot_plan(plan, path, subject))


def placement_rows(buffers: int, placement: Placement) -> list[tuple[str, str]]:
    """The figures of one planning run as (label, text), each label a glossary term: what the
    table prints and the page shows."""
    gap = f"{100 * placement.gap:.2f} % (+{placement.peak - placement.lower_bound:,} B)"
    return [("buffers", f"{buffers:,}"), ("algorithm", placement.algorithm),
            ("peak", f"{placement.peak:,} B"), ("lower bound", f"{placement.lower_bound:,} B"),
            ("gap", gap), ("optimal", "yes" if placement.optimal else "no")]


def _placement_table(title: str, buffers: int, placement: Placement, seconds: float) -> Table:
    """A two-column rich table: the numbers a user wants from one planning run."""
    table = Table(title=title, show_header=False)
    table.add_column("field")
    table.add_column("value", justify="right")
    for field, value in (*placement_rows(buffers, placement), ("seconds", f"{seconds:.2f}")):
        table.add_row(field, value)
    return table
