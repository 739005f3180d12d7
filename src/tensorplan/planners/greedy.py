"""The greedy portfolio: a few buffer orders, each placed by best fit; the smallest peak wins.

Two kinds of pass: peak sweeps (``sweep.py``), which compute best fit with a time sweep in a
few list operations per buffer, and the classic orders (by size, area, lifetime length, peak
load), which need the two-dimensional occupancy index and cost several times more per buffer.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping
from operator import sub

from tensorplan.planners.instance import Instance, section_loads
from tensorplan.planners.occupancy import OccupancyIndex
from tensorplan.planners.sweep import STACK_ORDERS, sweep_order, sweep_steps


def _by_size(inst: Instance, i: int, peak_load: list[int]) -> tuple[int, ...]:
    return (-inst.sizes[i], inst.starts[i] - inst.ends[i], inst.starts[i], i)


def _by_area(inst: Instance, i: int, peak_load: list[int]) -> tuple[int, ...]:
    return (inst.sizes[i] * (inst.starts[i] - inst.ends[i]), -inst.sizes[i], inst.starts[i], i)


def _by_length(inst: Instance, i: int, peak_load: list[int]) -> tuple[int, ...]:
    return (inst.starts[i] - inst.ends[i], -inst.sizes[i], inst.starts[i], i)


def _by_load(inst: Instance, i: int, peak_load: list[int]) -> tuple[int, ...]:
    return (-peak_load[i], -inst.sizes[i], inst.starts[i], i)


OrderKey = Callable[[Instance, int, list[int]], tuple[int, ...]]
# buffer orders placed through the occupancy index; ties broken by size, then start, then index
ORDERS: dict[str, OrderKey] = {
    "size": _by_size,  # largest first
    "area": _by_area,  # largest size x sections first
    "length": _by_length,  # most sections first
    "load": _by_load,  # those live in the most loaded section first
}


# Up to INDEXED buffers every pass runs. Above it greedy runs only the peak sweeps: an
# index pass costs 60-100 us a buffer on dense traces against ~10 us for a sweep, so greedy
# stays under ~0.5 s at any size up to 10,000 buffers. The wide portfolio of algorithm="auto"
# adds the index orders that win on large traces: "load" (pangu_2.6B, tiny_bert) and "length"
# (iopddl_S_1); "size" and "area" never beat both there.
INDEXED = 1_000
WIDE_ORDERS = ("length", "load")


def portfolio(n: int, wide: bool = False) -> list[str]:
    """Names of the passes run for ``n`` buffers, in rank order (the rank breaks ties).

    Peak sweeps are named ``sweep:<stack order>``; ``wide`` keeps the large-trace index orders
    above ``INDEXED`` buffers.

    >>> portfolio(10)
    ['sweep:longest', 'sweep:reach', 'sweep:earliest', 'size', 'area', 'length', 'load']
    >>> portfolio(INDEXED + 1), portfolio(INDEXED + 1, wide=True)[3:]
    (['sweep:longest', 'sweep:reach', 'sweep:earliest'], ['length', 'load'])
    """
    sweeps = [f"sweep:{name}" for name in STACK_ORDERS]
    if n <= INDEXED:
        return sweeps + list(ORDERS)
    return sweeps + list(WIDE_ORDERS if wide else ())


def peak_loads(inst: Instance) -> list[int]:
    """For each buffer, the highest total size live in any section of its lifetime.

    Range maxima come from a sparse table: level k holds the max of every 2**k sections.

    >>> peak_loads(Instance((2, 3, 4), (0, 1, 3), (2, 3, 4), 4, (0, 1, 2)))
    [5, 5, 4]
    """
    levels = [section_loads(inst)]
    while 2 ** len(levels) <= inst.sections:
        below, half = levels[-1], 2 ** (len(levels) - 1)
        levels.append(list(map(max, below[:-half], below[half:])))
    peaks = []
    for start, end in zip(inst.starts, inst.ends, strict=True):
        level = levels[(end - start).bit_length() - 1]
        peaks.append(max(level[start], level[end - (1 << ((end - start).bit_length() - 1))]))
    return peaks


CHUNK = 512  # buffers placed by one pass before the portfolio picks which pass to advance next


def placement_steps(
    inst: Instance, order: list[int], offsets: list[int], fixed: Mapping[int, int] | None = None
) -> Iterator[tuple[int, bool]]:
    """Place the buffers in ``order`` by best fit into ``offsets``, yielding (peak, finished).

    Each buffer goes into the smallest free gap left by the already placed buffers it overlaps in
    time (the lowest such gap on ties), or on top of them; ``fixed`` buffers (index: offset, not
    in ``order``) are in place from the start. The running peak of the buffers in ``order`` is
    yielded every ``CHUNK`` buffers and once, with ``finished=True``, at the end.

    >>> inst = Instance((4, 2, 2), (0, 0, 1), (2, 1, 2), 2, (0, 1, 2))
    >>> offsets = [0, 0, 0]
    >>> list(placement_steps(inst, [0, 1, 2], offsets)), offsets
    ([(6, True)], [0, 4, 4])
    >>> list(placement_steps(inst, [0, 2], offsets, {1: 0})), offsets
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
        if count % CHUNK == 0 and count < len(order):
            yield peak, False
    yield peak, True


Steps = Iterator[tuple[int, bool]]


def start_pass(
    inst: Instance, name: str, loads: list[int], offsets: list[int]
) -> tuple[list[int], Steps]:
    """The best-fit order of pass ``name`` and its steps, which fill ``offsets`` as they run.

    A sweep's order is its stack, then its left side, then its right side: best fit through
    the occupancy index in that order gives the sweep's offsets.
    """
    if name.startswith("sweep:"):
        sides = sweep_order(inst, STACK_ORDERS[name.removeprefix("sweep:")])
        return sides[0] + sides[1] + sides[2], sweep_steps(inst, sides, offsets, CHUNK)
    key = ORDERS[name]
    order = sorted(range(len(inst.sizes)), key=lambda i: key(inst, i, loads))
    return order, placement_steps(inst, order, offsets)


def plan_greedy(inst: Instance, bound: int) -> list[int]:
    """Offsets of the best plan over the portfolio of orders; stops early at ``bound``.

    >>> plan_greedy(Instance((4, 2, 2), (0, 0, 1), (2, 1, 2), 2, (0, 1, 2)), 6)
    [0, 4, 4]
    """
    return best_greedy(inst, bound)[0]


def best_greedy(inst: Instance, bound: int, wide: bool = False) -> tuple[list[int], list[int]]:
    """The best plan over the portfolio (``wide`` as in ``portfolio``) and the order behind it.

    The passes run interleaved, always advancing the one whose running peak is lowest, and a
    pass is dropped once its running peak reaches the best finished one: the peak is the same as
    running every pass in full, for a fraction of the work.

    >>> best_greedy(Instance((4, 2, 2), (0, 0, 1), (2, 1, 2), 2, (0, 1, 2)), 6)
    ([0, 4, 4], [0, 1, 2])
    """
    n = len(inst.sizes)
    names = portfolio(n, wide)
    loads = peak_loads(inst) if set(names) & set(ORDERS) else []
    passes = []
    for rank, name in enumerate(names):
        offsets = [0] * n
        order, steps = start_pass(inst, name, loads, offsets)
        passes.append((0, rank, steps, offsets, order))
    best, best_order, best_peak = passes[0][3], passes[0][4], None
    while passes:
        running, rank, steps, offsets, order = heapq.heappop(passes)
        if best_peak is not None and (running >= best_peak or best_peak <= bound):
            break
        peak, finished = next(steps)
        if not finished:
            heapq.heappush(passes, (peak, rank, steps, offsets, order))
        elif best_peak is None or peak < best_peak:
            best, best_order, best_peak = offsets, order, peak
    return best, best_order
