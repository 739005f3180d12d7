"""Two benchmark reports side by side: every figure that got worse by more than its noise.

Usage: ``python benchmarks/compare.py OLD NEW`` (``make bench-compare OLD=<rev>``), where each
report is a ``RESULTS.md`` path or ``git:REV`` (``benchmarks/RESULTS.md`` at that commit).

A figure is one cell of a markdown table, keyed by its section (``## ...``), the table's header,
the row's first cell and the column. Its kind comes from the column's header (then the
cell's unit), with the direction that is better and the noise a change must pass to count:

- bytes (a header with ``(B)`` or ``bytes``, or a cell in ``B``): lower is better, exact;
- times (``ms``, ``(s)``, ``seconds``, ``compile``): lower is better, ``TIME_NOISE``;
- rates (``GFLOP/s``): higher is better, ``TIME_NOISE``;
- ratios (a cell ending in ``x``): lower is better, ``RATIO_NOISE`` and more than the last
  digit written; a ratio of run times (a cell in ``ms``) is a time;
- checks (a cell ``yes``): worse when it is no longer ``yes``.

A cell with several figures is read by its first ratio when it has one (a run's time over
another's, measured interleaved, holds under a load that moves both), else by its first
figure. Other cells (counts, names, links) are not compared. Rows or tables the new report
lacks are listed; figures it adds are not.

>>> old = "## S\\n\\n| model | arena (B) | run ms |\\n|---|---|---|\\n| a | 100 | 10.0 |\\n"
>>> new = "## S\\n\\n| model | arena (B) | run ms |\\n|---|---|---|\\n| a | 120 | 10.5 |\\n"
>>> [(r.row, r.column, r.old, r.new) for r in regressions(figures(old), figures(new))]
[('a', 'arena (B)', '100', '120')]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from run_all import sections

TIME_NOISE = 0.15   # a time or rate must change by more than this share to count
RATIO_NOISE = 0.03  # a ratio must grow by more than this share to count
REPORT = "benchmarks/RESULTS.md"
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_RATIO = re.compile(r"(-?\d[\d,]*(?:\.\d+)?)x\b")


@dataclass(frozen=True)
class Key:
    """Where a figure is: its section, its table (header and occurrence), row and column."""

    section: str
    table: tuple[str, ...]  # the table's header cells
    occurrence: int         # the how-manieth table with this header in the section
    row: str                # the row's first cell ("name (2)" for its second row so named)
    column: str


@dataclass(frozen=True)
class Regression:
    """A figure that got worse."""

    section: str
    row: str
    column: str
    old: str  # the cells as written
    new: str
    kind: str


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def figures(text: str) -> dict[Key, str]:
    """Every table cell of a markdown report (not a row's first cell), by its ``Key``."""
    found: dict[Key, str] = {}
    for section, body in sections(text).items():
        seen: dict[tuple[str, ...], int] = {}
        lines = body.splitlines()
        for i, line in enumerate(lines):
            if not (line.startswith("|") and i + 1 < len(lines)
                    and lines[i + 1].startswith("|---")):
                continue
            header = tuple(_cells(line))
            seen[header] = occurrence = seen.get(header, -1) + 1
            named: dict[str, int] = {}
            for row in _rows(lines[i + 2:]):
                named[row[0]] = named.get(row[0], 0) + 1  # the how-manieth row so named
                label = row[0] if named[row[0]] == 1 else f"{row[0]} ({named[row[0]]})"
                for column, cell in zip(header[1:], row[1:], strict=False):
                    found.setdefault(Key(section, header, occurrence, label, column), cell)
    return found


def _rows(lines: Sequence[str]) -> Iterator[list[str]]:
    for line in lines:
        if not line.startswith("|"):
            return
        yield _cells(line)


def _figure(cell: str) -> re.Match[str] | None:
    """The figure a cell is read by: its first ratio among several figures, else its first."""
    numbers = list(_NUMBER.finditer(cell))
    ratio = _RATIO.search(cell)
    return ratio if ratio is not None and len(numbers) > 1 else next(iter(numbers), None)


def kind(column: str, cell: str) -> str | None:
    """The kind of figure a cell holds (bytes, time, rate, ratio, check), or None."""
    header = column.lower()
    if cell == "yes":
        return "check"
    number = _figure(cell)
    if number is None:
        return None
    unit = cell[number.end(1 if number.re is _RATIO else 0):].lstrip()
    if "gflop/s" in header:
        return "rate"
    if "(b)" in header or "bytes" in header or unit.startswith("B"):
        return "bytes"
    if unit.startswith("ms") or " ms" in f" {header}" or "(s)" in header \
            or "compile" in header or "seconds" in header:
        return "time"
    if unit.startswith("x"):
        return "time" if " ms" in cell else "ratio"
    return None


def _value(cell: str) -> float | None:
    number = _figure(cell)
    return float(number.group(1 if number.re is _RATIO else 0).replace(",", "")) \
        if number else None


def worse(kind_: str, old: str, new: str) -> bool:
    """Whether ``new`` is worse than ``old`` by more than the noise of their kind."""
    if kind_ == "check":
        return new != "yes"
    before, after = _value(old), _value(new)
    if before is None or after is None:
        return False
    if kind_ == "bytes":
        return after > before
    if kind_ == "rate":
        return after < before * (1 - TIME_NOISE)
    if kind_ == "time":
        return after > before * (1 + TIME_NOISE)
    return after > before * (1 + RATIO_NOISE) and after - before > 0.011


def regressions(old: Mapping[Key, str], new: Mapping[Key, str]) -> list[Regression]:
    """The figures of ``old`` that ``new`` holds worse, in ``old``'s order."""
    found = []
    for key, before in old.items():
        after = new.get(key)
        figure = kind(key.column, before)
        if after is None or figure is None or not worse(figure, before, after):
            continue
        found.append(Regression(key.section, key.row, key.column, before, after, figure))
    return found


def missing(old: Mapping[Key, str], new: Mapping[Key, str]) -> list[tuple[str, str]]:
    """(section, row) of ``old``'s rows that ``new`` has no longer."""
    rows = {(k.section, k.table, k.row) for k in new}
    return sorted({(k.section, k.row) for k in old if (k.section, k.table, k.row) not in rows})


def read(report: str) -> str:
    """The text of a report: a path, or ``git:REV`` for ``REPORT`` at commit ``REV``."""
    if report.startswith("git:"):
        return subprocess.run(["git", "show", f"{report[4:]}:{REPORT}"], check=True,
                              capture_output=True, text=True).stdout
    with open(report, encoding="utf-8") as file:
        return file.read()


def render(found: Sequence[Regression], gone: Sequence[tuple[str, str]], compared: int) -> str:
    """The comparison as markdown: the regressions, then the rows no longer reported."""
    lines = [f"{len(found)} of {compared} figures worse than the noise "
             f"(times and rates {TIME_NOISE:.0%}, ratios {RATIO_NOISE:.0%}, bytes exact)."]
    if found:
        lines += ["", "| section | row | column | old | new |", "|---|---|---|---|---|"]
        lines += [f"| {r.section} | {r.row} | {r.column} | {r.old} | {r.new} |" for r in found]
    if gone:
        lines += ["", f"{len(gone)} rows no longer reported:"]
        lines += [f"- {section}: {row}" for section, row in gone]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the comparison; 1 when a figure got worse, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help=f"a report, or git:REV for {REPORT} at that commit")
    parser.add_argument("new", help="a report, or git:REV")
    options = parser.parse_args(argv)
    old, new = figures(read(options.old)), figures(read(options.new))
    compared = sum(1 for key, cell in old.items() if key in new and kind(key.column, cell))
    found = regressions(old, new)
    sys.stdout.write(render(found, missing(old, new), compared))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
