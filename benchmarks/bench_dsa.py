"""Plan every DSA instance with each algorithm and print a markdown table of the results.

    python benchmarks/bench_dsa.py                       # greedy, auto and optimal (30 s),
                                                         # files and 10,000 random buffers
    python benchmarks/bench_dsa.py --algorithms greedy --out results.md
    python benchmarks/bench_dsa.py --only challenging --time-limit 10 --synthetic 0
    python benchmarks/bench_dsa.py --only none --synthetic 10000 --algorithms greedy

Columns: instance, buffers, algorithm, lower bound, peak, gap to the bound, whether the plan is
proven optimal, wall-clock seconds, and for instances that carry a reference plan (IREE's
``offset`` column) that plan's peak.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tensorplan.formats.dsa import DsaInstance, load_instance
from tensorplan.plan.planners import Buffer, plan_buffers

HEADER = (
    "| instance | buffers | algorithm | lower bound | peak | gap | optimal | seconds "
    "| reference |\n|---|---:|---|---:|---:|---:|---|---:|---:|"
)


@dataclass(frozen=True)
class Row:
    """One instance planned by one algorithm."""

    instance: str  # file stem
    buffers: int  # number of buffers
    algorithm: str  # algorithm asked for
    lower_bound: int  # bytes
    peak: int  # bytes
    optimal: bool  # proven optimal
    seconds: float  # wall clock of plan_buffers
    reference: int | None  # peak of the plan stored in the file, if any

    def markdown(self) -> str:
        gap = 100 * (self.peak - self.lower_bound) / self.lower_bound if self.lower_bound else 0
        reference = f"{self.reference:,}" if self.reference is not None else ""
        return (
            f"| {self.instance} | {self.buffers:,} | {self.algorithm} | {self.lower_bound:,} "
            f"| {self.peak:,} | {gap:.2f} % | {'yes' if self.optimal else 'no'} "
            f"| {self.seconds:.2f} | {reference} |"
        )


def reference_peak(instance: DsaInstance) -> int | None:
    """Peak of the plan the file carries in its ``offset`` column, if it has one."""
    offsets = instance.column("offset")
    if offsets is None:
        return None
    sizes = [b.size for b in instance.problem.buffers]
    return max((o + s for o, s in zip(offsets, sizes, strict=True)), default=0)


def synthetic(n: int, seed: int = 0) -> list[Buffer]:
    """``n`` seeded random buffers: sizes up to 1 MiB, lifetimes up to 200 steps in 0..n/2."""
    rng = random.Random(seed)
    buffers = []
    for _ in range(n):
        start = rng.randrange(max(n // 2, 1))
        buffers.append(Buffer(rng.randint(1, 1 << 20), start, start + rng.randint(1, 200)))
    return buffers


def bench(
    name: str, buffers: list[Buffer], algorithm: str, time_limit: float | None,
    reference: int | None,
) -> Row:
    """Plan one instance with one algorithm and time it."""
    started = time.perf_counter()
    placement = plan_buffers(buffers, algorithm=algorithm, time_limit=time_limit)
    seconds = time.perf_counter() - started
    return Row(
        name,
        len(buffers),
        algorithm,
        placement.lower_bound,
        placement.peak,
        placement.optimal,
        seconds,
        reference,
    )


def instances(
    folder: Path, only: str, synthetic_sizes: list[int]
) -> Iterator[tuple[str, list[Buffer], int | None]]:
    """(name, buffers, reference peak) of the selected files, then of the synthetic sets."""
    for path in sorted(folder.glob("*.csv")):
        if only in path.stem:
            instance = load_instance(path)
            yield path.stem, list(instance.problem.buffers), reference_peak(instance)
    for n in synthetic_sizes:
        yield f"random_{n}", synthetic(n), None


def default_dir() -> Path:
    """The instances the repository keeps: ``benchmarks/dsa`` beside this file."""
    return Path(__file__).resolve().parent / "dsa"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=default_dir(), help="folder of CSV instances")
    parser.add_argument("--algorithms", default="greedy,auto,optimal", help="comma-separated list")
    parser.add_argument("--time-limit", type=float, default=30.0,
                        help="seconds per optimal search (auto keeps its own default budget)")
    parser.add_argument("--only", default="", help="plan only files whose name contains this")
    parser.add_argument("--out", type=Path, default=None, help="write the table here too")
    parser.add_argument(
        "--synthetic",
        type=int,
        action="append",
        default=None,
        metavar="N",
        help="also plan N seeded random buffers (repeatable; default 10000, 0 for none)",
    )
    args = parser.parse_args(argv)
    lines = [HEADER]
    print(HEADER, flush=True)
    sizes = [n for n in (args.synthetic or [10_000]) if n > 0]
    for name, buffers, reference in instances(args.dir, args.only, sizes):
        for algorithm in args.algorithms.split(","):
            limit = args.time_limit if algorithm == "optimal" else None
            line = bench(name, buffers, algorithm, limit, reference).markdown()
            lines.append(line)
            print(line, flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
