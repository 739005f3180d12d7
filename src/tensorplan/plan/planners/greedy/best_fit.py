"""Best fit in a given order: the pass that classic portfolio orders, repair and the window
completions of the exact search all run, through the occupancy index (``occupancy.py``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from operator import sub

from tensorplan.plan.planners.greedy.occupancy import OccupancyIndex
from tensorplan.plan.planners.problem.instance import Instance


def placement_steps(
    inst: Instance, order: list[int], offsets: list[int], chunk: int,
    fixed: Mapping[int, int] | None = None,
) -> Iterator[tuple[int, bool]]:
    """Place the buffers in ``order`` by best fit into ``offsets``, yielding (peak, finished).

    Each buffer goes into the smallest free gap left by the already placed buffers it overlaps in
    time (the lowest such gap on ties), or on top of them; ``fixed`` buffers (index: offset, not
    in ``order``) are in place from the start. The running peak of the buffers in ``order`` is
    yielded every ``chunk`` buffers and once, with ``finished=True``, at the end.

    >>> inst = Instance((4, 2, 2), (0, 0, 1), (2, 1, 2), 2, (0, 1, 2))
    >>> offsets = [0, 0, 0]
    >>> list(placement_steps(inst, [0, 1, 2], offsets, 2)), offsets
    ([(6, False), (6, True)], [0, 4, 4])
    >>> list(placement_steps(inst, [0, 2], offsets, 512, {1: 0})), offsets
    ([(6, True)], [2, 0, 0])
    """
    starts, ends, sizes = inst.starts, inst.ends, inst.sizes
    longest = max(map(sub, ends, starts), default=1)
    index = OccupancyIndex(inst.sections, longest)
    for i, offset in (fixed or {}).items():
        offsets[i] = offset
        index.add(offset, offset + sizes[i], starts[i], ends[i])
    place = index.place
    peak = 0
    for count, i in enumerate(order, 1):
        size = sizes[i]
        offset = place(starts[i], ends[i], size)
        offsets[i] = offset
        if offset + size > peak:
            peak = offset + size
        if count % chunk == 0 and count < len(order):
            yield peak, False
    yield peak, True
