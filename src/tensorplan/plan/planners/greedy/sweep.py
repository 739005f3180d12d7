"""Best-fit placement as a sweep over time, outward from the most loaded section.

When buffers are placed in order of their start, the placed buffers a new one overlaps in time
are exactly those still live at its start: best fit needs only the free gaps of the live set,
kept up to date as buffers begin and end (``FreeSpace``). That makes a pass cost a few list
operations per buffer instead of a query over a two-dimensional index.

A *peak sweep* first stacks the buffers live in the most loaded section (they all overlap, so
they stack into exactly the lower bound there), then sweeps right from that section in start
order and left from it in end order (time mirrored). The two sides never overlap in time, and
every buffer a side's sweep meets is either stacked or placed before it by that sweep, so the
offsets equal best fit (``OccupancyIndex.place``) over the order stack + left + right.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator

from tensorplan.plan.planners.problem.instance import Instance, section_loads


class FreeSpace:
    """Live offset ranges and the free gaps between them, for best fit as buffers come and go.

    >>> space = FreeSpace()
    >>> [space.place(size) for size in (4, 2, 3)]
    [0, 4, 6]
    >>> space.free(0, 4); space.place(3), space.place(1), space.place(2)
    (0, 3, 9)
    """

    def __init__(self) -> None:
        self._bounds: list[int] = []  # live ranges [lo0, hi0, lo1, hi1, ...], sorted, may touch
        self._gaps: list[tuple[int, int]] = []  # (length, lo) of every free run below the top
        self._top = 0  # first offset above every live range

    def place(self, size: int) -> int:
        """Take ``size`` units at the lowest offset of the smallest gap that holds them, else
        on top; return that offset."""
        gaps = self._gaps
        k = bisect_left(gaps, (size, -1))
        if k < len(gaps):
            length, lo = gaps.pop(k)
            if length > size:
                insort(gaps, (length - size, lo + size))
        else:
            lo = self._top
            self._top = lo + size
        bounds = self._bounds
        i = bisect_right(bounds, lo)
        bounds[i:i] = (lo, lo + size)
        return lo

    def free(self, lo: int, hi: int) -> None:
        """Give back the live range ``[lo, hi)``, joining the gaps on either side of it."""
        bounds, gaps = self._bounds, self._gaps
        i = bisect_left(bounds, lo)
        i += i & 1  # a range ending at ``lo`` comes first: ``lo`` is the next boundary
        below = bounds[i - 1] if i else 0
        above = bounds[i + 2] if i + 2 < len(bounds) else None
        del bounds[i : i + 2]
        if lo > below:
            del gaps[bisect_left(gaps, (lo - below, below))]
        if above is None:
            self._top = below
            return
        if above > hi:
            del gaps[bisect_left(gaps, (above - hi, hi))]
        insort(gaps, (above - below, below))


MidKey = Callable[[Instance, int, int], tuple[int, ...]]


def _by_length(inst: Instance, i: int, peak: int) -> tuple[int, ...]:
    return (inst.starts[i] - inst.ends[i], -inst.sizes[i], i)


def _by_reach(inst: Instance, i: int, peak: int) -> tuple[int, ...]:
    return (-max(peak - inst.starts[i], inst.ends[i] - 1 - peak), -inst.sizes[i], i)


def _by_start(inst: Instance, i: int, peak: int) -> tuple[int, ...]:
    return (inst.starts[i], -inst.ends[i], -inst.sizes[i], i)


# how a peak sweep stacks the buffers live in the peak section, bottom first
STACK_ORDERS: dict[str, MidKey] = {
    "longest": _by_length,  # the longest lifetimes lowest
    "reach": _by_reach,  # those reaching farthest from the peak to one side lowest
    "earliest": _by_start,  # the earliest starts lowest (then the latest ends)
}


def sweep_order(inst: Instance, stack_key: MidKey) -> tuple[list[int], list[int], list[int]]:
    """The stacked buffers (bottom first), the left side (latest end first) and the right side
    (earliest start first) of a peak sweep; ties go to the longer, then the larger buffer.

    >>> sweep_order(Instance((1, 2, 3), (0, 0, 2), (1, 3, 3), 3, (0, 1, 2)), _by_length)
    ([1, 2], [0], [])
    """
    loads = section_loads(inst)
    peak = loads.index(max(loads)) if loads else 0
    starts, ends, sizes = inst.starts, inst.ends, inst.sizes
    stack, left, right = [], [], []
    for i in range(len(sizes)):
        (stack if starts[i] <= peak < ends[i] else left if ends[i] <= peak else right).append(i)
    stack.sort(key=lambda i: stack_key(inst, i, peak))
    left.sort(key=lambda i: (-ends[i], starts[i] - ends[i], -sizes[i], i))
    right.sort(key=lambda i: (starts[i], starts[i] - ends[i], -sizes[i], i))
    return stack, left, right


def sweep_steps(
    inst: Instance, sides: tuple[list[int], list[int], list[int]], offsets: list[int], chunk: int
) -> Iterator[tuple[int, bool]]:
    """Place every buffer by the peak sweep ``sides`` (from ``sweep_order``) into ``offsets``.

    Yields (running peak, finished) every ``chunk`` buffers and once, with ``finished=True``,
    at the end.

    >>> offsets = [0, 0, 0]
    >>> inst = Instance((1, 2, 3), (0, 0, 2), (1, 3, 3), 3, (0, 1, 2))
    >>> list(sweep_steps(inst, sweep_order(inst, _by_length), offsets, 512)), offsets
    ([(5, True)], [2, 0, 2])
    """
    stack, left, right = sides
    starts, ends, sizes = inst.starts, inst.ends, inst.sizes
    # the left side runs on mirrored time: it starts where a buffer ends and goes backwards
    runs = (
        (right, starts, ends),
        (left, [-end for end in ends], [-start for start in starts]),
    )
    peak = placed = 0
    for side, begin, finish in runs:
        space, live = FreeSpace(), []
        for i in stack:
            lo = space.place(sizes[i])
            offsets[i] = lo
            live.append((finish[i], lo, lo + sizes[i]))
            peak = max(peak, lo + sizes[i])
        heapq.heapify(live)
        for i in side:
            begins = begin[i]
            while live and live[0][0] <= begins:
                _, lo, hi = heapq.heappop(live)
                space.free(lo, hi)
            lo = space.place(sizes[i])
            offsets[i] = lo
            heapq.heappush(live, (finish[i], lo, lo + sizes[i]))
            if lo + sizes[i] > peak:
                peak = lo + sizes[i]
            placed += 1
            if placed % chunk == 0:
                yield peak, False
    yield peak, True
