"""``tensorplan diff OLD NEW``: compare two plans storage by storage."""

from __future__ import annotations

import argparse

from tensorplan.cli import options


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``diff`` subcommand and its arguments."""
    parser = commands.add_parser(
        "diff", help="compare two saved programs or plan JSON files: what grew, what shrank"
    )
    parser.add_argument("old", help="a saved program (--save) or a plan JSON file (--json)")
    parser.add_argument("new", help="the same, after the change")
    options.add_top(parser, "changes of each kind")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print arena, bound, constants and the storages that grew, shrank, appeared or vanished
    (the ``--top`` largest of each), after a warning when the programs share no structure."""
    from tensorplan.report.diff import diff_plans, diff_report, read_plan_file

    diff = diff_plans(read_plan_file(args.old), read_plan_file(args.new))
    console = options.console()
    console.print(f"{args.old} -> {args.new}")
    console.print(diff_report(diff, args.top))
    return 0
