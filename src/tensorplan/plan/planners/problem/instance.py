"""The compact form every planner works on: sizes in units, time compressed to sections.

A *unit* is the alignment times the greatest common divisor of the aligned sizes: every offset
a planner makes is 0 or a sum of sizes (a buffer sits at 0 or on top of another), so nothing is
lost by counting in units, and the numbers stay small. A *section* is the span between two
consecutive distinct lifetime endpoints; the set of live buffers is constant inside one.
Zero-size buffers are left out (they can sit at offset 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from tensorplan.plan.planners.problem.data import Problem


@dataclass(frozen=True)
class Instance:
    """A problem reduced to plain int tuples, indexed 0..n-1 over its non-empty buffers."""

    sizes: tuple[int, ...]  # size in units (> 0)
    starts: tuple[int, ...]  # first section the buffer is live in
    ends: tuple[int, ...]  # first section after its lifetime (exclusive)
    sections: int  # number of sections; every end is <= sections
    source: tuple[int, ...]  # index in the problem's buffers of each entry
    widths: tuple[int, ...] = ()  # lifetime length in original steps; () means use sections
    unit: int = 1  # bytes per size unit: the alignment times the gcd of the aligned sizes

    def width(self, i: int) -> int:
        """Lifetime length of buffer ``i`` in original steps (sections if unknown)."""
        return self.widths[i] if self.widths else self.ends[i] - self.starts[i]


class Placed(NamedTuple):
    """A plan of an instance and the placement order that gave it."""

    offsets: list[int]  # each buffer's offset, in units
    order: list[int]    # the buffers in the order they were placed


def to_instance(problem: Problem) -> Instance:
    """Scale sizes to units and number the sections.

    >>> from tensorplan.plan.planners.problem.data import Buffer
    >>> inst = to_instance(Problem((Buffer(16, 10, 30), Buffer(0, 0, 5), Buffer(20, 20, 40)), 16))
    >>> inst.sizes, inst.starts, inst.ends, inst.sections, inst.source, inst.widths, inst.unit
    ((1, 2), (0, 1), (2, 3), 3, (0, 2), (20, 20), 16)
    >>> to_instance(Problem((Buffer(3072, 0, 1), Buffer(1024, 0, 1)))).sizes
    (3, 1)
    """
    a = problem.alignment
    kept = [i for i, b in enumerate(problem.buffers) if b.size > 0]
    aligned = [-(-problem.buffers[i].size // a) for i in kept]
    common = math.gcd(*aligned) or 1
    points = sorted({t for i in kept for t in (problem.buffers[i].start, problem.buffers[i].end)})
    rank = {t: r for r, t in enumerate(points)}
    return Instance(
        sizes=tuple(size // common for size in aligned),
        starts=tuple(rank[problem.buffers[i].start] for i in kept),
        ends=tuple(rank[problem.buffers[i].end] for i in kept),
        sections=max(len(points) - 1, 0),
        source=tuple(kept),
        widths=tuple(problem.buffers[i].end - problem.buffers[i].start for i in kept),
        unit=a * common,
    )


def section_loads(inst: Instance) -> list[int]:
    """Total size live in each section (a difference array swept once).

    >>> section_loads(Instance((2, 3), (0, 1), (2, 3), 3, (0, 1)))
    [2, 5, 3]
    """
    delta = [0] * (inst.sections + 1)
    for size, start, end in zip(inst.sizes, inst.starts, inst.ends, strict=True):
        delta[start] += size
        delta[end] -= size
    loads, running = [], 0
    for change in delta[:-1]:
        running += change
        loads.append(running)
    return loads


def peak_of(inst: Instance, offsets: list[int]) -> int:
    """Highest unit used by ``offsets`` (in units), 0 without buffers.

    >>> peak_of(Instance((2, 3), (0, 1), (2, 3), 3, (0, 1)), [0, 2])
    5
    """
    return max((o + s for o, s in zip(offsets, inst.sizes, strict=True)), default=0)
