"""``tensorplan bench TARGET...``: plan each target with several algorithms and measure
(the rows are made by ``measure.py``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING

from rich.table import Table

from tensorplan.cli import options
from tensorplan.errors import TensorPlanError

if TYPE_CHECKING:
    from tensorplan.cli.measure import BenchRow

_COLUMNS = ("target", "algorithm", "buffers", "arena (B)", "lower bound (B)", "gap", "optimal",
            "plan s", "run ms", "eager ms", "matches eager")


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``bench`` subcommand and its options."""
    parser = commands.add_parser(
        "bench", help="plan models or CSV instances with several planners; time and compare"
    )
    parser.add_argument("targets", nargs="+", help=f"{options.FORMS}, or a .csv instance")
    parser.add_argument("--algorithms", default="greedy,auto", metavar="A,B",
                        help="comma-separated planners (default greedy,auto)")
    parser.add_argument("--runs", type=options.positive_int, default=10, metavar="N",
                        help="timed runs per model plan")
    parser.add_argument("--time-limit", type=float, default=None, metavar="S",
                        help="seconds per optimal search")
    options.add_threads(parser)
    parser.add_argument("--json", metavar="F", help="write the rows as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Bench every target; exit 1 if a model's run does not match eager PyTorch."""
    from tensorplan.cli.measure import bench_target, check_algorithms

    threads = options.set_threads(args.threads)
    algorithms = [name.strip() for name in args.algorithms.split(",") if name.strip()]
    check_algorithms(algorithms)
    rows = []
    for target in args.targets:
        rows += bench_target(target, algorithms, args.runs, args.time_limit)
    options.console().print(_table(rows, f"run ms and eager ms: medians of {args.runs} runs "
                                         f"on {threads}"))
    if args.json:
        records = [dataclasses.asdict(row) | {"gap": row.gap} for row in rows]
        try:
            options.write_text(args.json, json.dumps(records, indent=1))
        except OSError as error:
            raise TensorPlanError(f"cannot write {args.json}: {error.strerror or error}") from None
        print(f"wrote {len(rows)} rows to {args.json}")
    return 1 if any(row.matches is False for row in rows) else 0


def _table(rows: list[BenchRow], caption: str) -> Table:
    table = Table(title="tensorplan bench", caption=caption)
    for name in _COLUMNS:
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
