"""The greedy portfolio: a few buffer orders, each placed by best fit; the smallest peak wins.

Two kinds of pass: peak sweeps (``sweep.py``), which compute best fit with a time sweep in a
few list operations per buffer, and the classic orders (by size, area, lifetime length, peak
load), which need the two-dimensional occupancy index and cost several times more per buffer.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from tensorplan.errors import PlanError
from tensorplan.plan.planners.greedy.best_fit import placement_steps
from tensorplan.plan.planners.greedy.sweep import STACK_ORDERS, sweep_order, sweep_steps
from tensorplan.plan.planners.params import PlannerParams
from tensorplan.plan.planners.problem.instance import Instance, Placed, section_loads


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


def portfolio(n: int, params: PlannerParams, wide: bool = False) -> list[str]:
    """Names of the passes run for ``n`` buffers, in rank order (the rank breaks ties).

    Peak sweeps are named ``sweep:<stack order>``; up to ``params.classic_order_limit`` buffers
    the classic orders run too, and ``wide`` keeps ``params.wide_orders`` above it.

    >>> params = PlannerParams()
    >>> portfolio(10, params)
    ['sweep:longest', 'sweep:reach', 'sweep:earliest', 'size', 'area', 'length', 'load']
    >>> portfolio(1_001, params), portfolio(1_001, params, wide=True)[3:]
    (['sweep:longest', 'sweep:reach', 'sweep:earliest'], ['length', 'load'])
    """
    unknown = [name for name in params.wide_orders if name not in ORDERS]
    if unknown:
        raise PlanError(f"PlannerParams.wide_orders: unknown orders {unknown}; "
                        f"choose from {', '.join(ORDERS)}")
    sweeps = [f"sweep:{name}" for name in STACK_ORDERS]
    if n <= params.classic_order_limit:
        return sweeps + list(ORDERS)
    return sweeps + list(params.wide_orders if wide else ())


def peak_loads(inst: Instance) -> list[int]:
    """For each buffer, the highest total size live in any section of its lifetime.

    Range maxima come from levels of maxima (a sparse table): level k holds the max of every
    2**k sections.

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


Steps = Iterator[tuple[int, bool]]


def start_pass(
    inst: Instance, name: str, loads: list[int], offsets: list[int], chunk: int
) -> tuple[list[int], Steps]:
    """The best-fit order of pass ``name`` and its steps, which fill ``offsets`` as they run.

    A sweep's order is its stack, then its left side, then its right side: best fit through
    the occupancy index in that order gives the sweep's offsets. Steps yield every ``chunk``
    buffers.
    """
    if name.startswith("sweep:"):
        sides = sweep_order(inst, STACK_ORDERS[name.removeprefix("sweep:")])
        return sides[0] + sides[1] + sides[2], sweep_steps(inst, sides, offsets, chunk)
    key = ORDERS[name]
    order = sorted(range(len(inst.sizes)), key=lambda i: key(inst, i, loads))
    return order, placement_steps(inst, order, offsets, chunk)


def plan_greedy(inst: Instance, bound: int, params: PlannerParams) -> list[int]:
    """Offsets of the best plan over the portfolio of orders; stops early at ``bound``.

    >>> plan_greedy(Instance((4, 2, 2), (0, 0, 1), (2, 1, 2), 2, (0, 1, 2)), 6, PlannerParams())
    [0, 4, 4]
    """
    return best_greedy(inst, bound, params)[0]


def best_greedy(
    inst: Instance, bound: int, params: PlannerParams, wide: bool = False
) -> Placed:
    """The best plan over the portfolio (``wide`` as in ``portfolio``) and the order behind it.

    The passes run interleaved, always advancing the one whose running peak is lowest, and a
    pass is dropped once its running peak reaches the best finished one: the peak is the same as
    running every pass in full, for a fraction of the work.

    >>> best_greedy(Instance((4, 2, 2), (0, 0, 1), (2, 1, 2), 2, (0, 1, 2)), 6, PlannerParams())
    Placed(offsets=[0, 4, 4], order=[0, 1, 2])
    """
    n = len(inst.sizes)
    names = portfolio(n, params, wide)
    loads = peak_loads(inst) if set(names) & set(ORDERS) else []
    passes = []
    for rank, name in enumerate(names):
        offsets = [0] * n
        order, steps = start_pass(inst, name, loads, offsets, params.pass_chunk)
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
    return Placed(best, best_order)
