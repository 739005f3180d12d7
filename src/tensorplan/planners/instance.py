"""The compact form every planner works on: sizes in alignment units, time compressed to sections.

A *section* is the span between two consecutive distinct lifetime endpoints; the set of live
buffers is constant inside one. Zero-size buffers are left out (they can sit at offset 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorplan.planners.problem import Problem


@dataclass(frozen=True)
class Instance:
    """A problem reduced to plain int tuples, indexed 0..n-1 over its non-empty buffers."""

    sizes: tuple[int, ...]  # size in alignment units (> 0)
    starts: tuple[int, ...]  # first section the buffer is live in
    ends: tuple[int, ...]  # first section after its lifetime (exclusive)
    sections: int  # number of sections; every end is <= sections
    source: tuple[int, ...]  # index in the problem's buffers of each entry
    widths: tuple[int, ...] = ()  # lifetime length in original steps; () means use sections

    def width(self, i: int) -> int:
        """Lifetime length of buffer ``i`` in original steps (sections if unknown)."""
        return self.widths[i] if self.widths else self.ends[i] - self.starts[i]


def to_instance(problem: Problem) -> Instance:
    """Scale sizes to alignment units and number the sections.

    >>> from tensorplan.planners.problem import Buffer
    >>> inst = to_instance(Problem((Buffer(16, 10, 30), Buffer(0, 0, 5), Buffer(20, 20, 40)), 16))
    >>> inst.sizes, inst.starts, inst.ends, inst.sections, inst.source, inst.widths
    ((1, 2), (0, 1), (2, 3), 3, (0, 2), (20, 20))
    """
    a = problem.alignment
    kept = [i for i, b in enumerate(problem.buffers) if b.size > 0]
    points = sorted({t for i in kept for t in (problem.buffers[i].start, problem.buffers[i].end)})
    rank = {t: r for r, t in enumerate(points)}
    return Instance(
        sizes=tuple(-(-problem.buffers[i].size // a) for i in kept),
        starts=tuple(rank[problem.buffers[i].start] for i in kept),
        ends=tuple(rank[problem.buffers[i].end] for i in kept),
        sections=max(len(points) - 1, 0),
        source=tuple(kept),
        widths=tuple(problem.buffers[i].end - problem.buffers[i].start for i in kept),
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
    """Highest unit used by ``offsets`` (alignment units), 0 without buffers.

    >>> peak_of(Instance((2, 3), (0, 1), (2, 3), 3, (0, 1)), [0, 2])
    5
    """
    return max((o + s for o, s in zip(offsets, inst.sizes, strict=True)), default=0)
