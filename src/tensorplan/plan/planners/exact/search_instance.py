"""``SearchInstance``: an instance with the lookups the branch and bound reads at every node."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from tensorplan.plan.planners.problem.instance import Instance, section_loads


@dataclass(frozen=True)
class SearchInstance:
    """An instance plus what the search derives from it once (read-only)."""

    sizes: tuple[int, ...]  # size of each buffer, in units
    starts: tuple[int, ...]  # first section of each buffer
    ends: tuple[int, ...]  # first section after each buffer
    widths: tuple[int, ...]  # lifetime length in original steps, for the branching order
    neighbours: tuple[tuple[int, ...], ...]  # buffers live at some common section, per buffer
    members: tuple[tuple[int, ...], ...]  # buffers live in each section
    loads: tuple[int, ...]  # total size live in each section


def overlap_lists(inst: Instance) -> tuple[tuple[int, ...], ...]:
    """For each buffer, the buffers whose lifetimes share a section with it (one sweep).

    >>> overlap_lists(Instance((1, 1, 1), (0, 1, 2), (2, 3, 3), 3, (0, 1, 2)))
    ((1,), (0, 2), (1,))
    """
    n = len(inst.sizes)
    found: list[list[int]] = [[] for _ in range(n)]
    live: list[int] = []
    for i in sorted(range(n), key=lambda k: inst.starts[k]):
        live = [j for j in live if inst.ends[j] > inst.starts[i]]
        for j in live:
            found[i].append(j)
            found[j].append(i)
        live.append(i)
    return tuple(tuple(sorted(row)) for row in found)


def section_members(inst: Instance) -> tuple[tuple[int, ...], ...]:
    """The buffers live in each section.

    >>> section_members(Instance((1, 1), (0, 1), (2, 3), 3, (0, 1)))
    ((0,), (0, 1), (1,))
    """
    members: list[list[int]] = [[] for _ in range(inst.sections)]
    for i, (start, end) in enumerate(zip(inst.starts, inst.ends, strict=True)):
        for s in range(start, end):
            members[s].append(i)
    return tuple(tuple(row) for row in members)


def to_search_instance(inst: Instance) -> SearchInstance:
    """``inst`` with its lookups; O(n log n + overlapping pairs + total span)."""
    return SearchInstance(
        sizes=inst.sizes,
        starts=inst.starts,
        ends=inst.ends,
        widths=tuple(inst.width(i) for i in range(len(inst.sizes))),
        neighbours=overlap_lists(inst),
        members=section_members(inst),
        loads=tuple(section_loads(inst)),
    )


def overlapping_pairs(inst: Instance) -> int:
    """How many pairs of buffers share a section, counted in O(n log n) without listing them.

    >>> overlapping_pairs(Instance((1, 1, 1), (0, 1, 2), (2, 3, 3), 3, (0, 1, 2)))
    2
    """
    starts, ends = sorted(inst.starts), sorted(inst.ends)
    total = 0
    for start, end in zip(inst.starts, inst.ends, strict=True):
        total += bisect_left(starts, end) - bisect_right(ends, start)
    return (total - len(inst.sizes)) // 2
