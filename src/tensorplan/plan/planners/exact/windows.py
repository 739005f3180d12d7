"""Window probes: the decision search on the part of a large instance where memory is tight.

On model traces the load comes close to the capacity in a few sections only; elsewhere there
is room to spare, and the whole instance is far too big to search. A window probe searches
the buffers live in a window of sections around the tight ones, their lifetimes clipped to the
window (a relaxation: if they do not fit there, no plan fits), keeps the offsets it found, and
places every other buffer around them by best fit. When that completion goes over the
capacity, the window grows to cover the buffers that stuck out and the probe runs again.

A section is *tight* when some buffer live in it is larger than the room the capacity leaves
there (capacity minus load): where every buffer fits in the spare room, best fit does not need
the search's help.
"""

from __future__ import annotations

from collections import deque

from tensorplan.plan.planners.budget import Budget
from tensorplan.plan.planners.exact.branch_and_bound import Probe, Verdict
from tensorplan.plan.planners.exact.search_instance import (
    SearchInstance,
    overlapping_pairs,
    to_search_instance,
)
from tensorplan.plan.planners.greedy.best_fit import placement_steps
from tensorplan.plan.planners.params import PlannerParams
from tensorplan.plan.planners.problem.instance import Instance, section_loads


def largest_live(inst: Instance) -> list[int]:
    """The largest size live in each section (0 where nothing is), largest buffers first.

    Each section is written once: ``skip`` jumps over runs of sections already written.

    >>> largest_live(Instance((1, 5, 2), (0, 1, 3), (2, 3, 4), 5, (0, 1, 2)))
    [1, 5, 5, 2, 0]
    """
    largest = [0] * inst.sections
    skip = list(range(inst.sections + 1))  # skip[s]: first section >= s not yet written

    def unwritten(s: int) -> int:
        root = s
        while skip[root] != root:
            root = skip[root]
        while skip[s] != root:
            skip[s], s = root, skip[s]
        return root

    for i in sorted(range(len(inst.sizes)), key=lambda k: -inst.sizes[k]):
        s = unwritten(inst.starts[i])
        while s < inst.ends[i]:
            largest[s] = inst.sizes[i]
            skip[s] = s + 1
            s = unwritten(s + 1)
    return largest


def tight_span(loads: list[int], largest: list[int], cap: int) -> tuple[int, int]:
    """The sections ``[lo, hi)`` from the first tight section to the last (the fullest section
    alone when none is tight), given each section's load and largest live size.

    >>> tight_span([1, 6, 5, 2, 0], [1, 5, 5, 2, 0], 6)
    (1, 3)
    """
    tight = [s for s, (load, big) in enumerate(zip(loads, largest, strict=True))
             if big > cap - load]
    if not tight:
        fullest = max(range(len(loads)), key=loads.__getitem__)
        return fullest, fullest + 1
    return tight[0], tight[-1] + 1


def clip(inst: Instance, lo: int, hi: int) -> tuple[Instance, list[int]]:
    """The buffers live in sections ``[lo, hi)`` with lifetimes cut to them, and their indices.

    >>> part, inside = clip(Instance((1, 5, 2), (0, 1, 3), (2, 3, 4), 5, (0, 1, 2)), 1, 3)
    >>> part.sizes, part.starts, part.ends, part.sections, part.widths, inside
    ((1, 5), (0, 0), (1, 2), 2, (2, 2), [0, 1])
    """
    inside = [i for i in range(len(inst.sizes)) if inst.starts[i] < hi and inst.ends[i] > lo]
    part = Instance(
        sizes=tuple(inst.sizes[i] for i in inside),
        starts=tuple(max(inst.starts[i], lo) - lo for i in inside),
        ends=tuple(min(inst.ends[i], hi) - lo for i in inside),
        sections=hi - lo,
        source=tuple(inside),
        widths=tuple(inst.width(i) for i in inside),
        unit=inst.unit,
    )
    return part, inside


def complete(inst: Instance, fixed: dict[int, int], order: list[int]) -> list[int]:
    """Offsets of every buffer: ``fixed`` ones where they are, the others by best fit around
    them, in ``order``.

    >>> complete(Instance((2, 2, 1), (0, 1, 2), (2, 3, 3), 3, (0, 1, 2)), {1: 0}, [0, 1, 2])
    [2, 0, 2]
    """
    offsets = [0] * len(inst.sizes)
    rest = [i for i in order if i not in fixed]
    # a chunk longer than the order: the steps run to the end in one go
    deque(placement_steps(inst, rest, offsets, len(rest) + 1, fixed), maxlen=0)
    return offsets


class Windows:
    """The windows of one instance, each clipped once and shared by the probes at every
    capacity (near capacities mostly ask for the same window). ``order`` is the best-fit order
    of the completions; a window with more than ``params.max_pairs`` overlapping pairs is not
    searched (its probe ends unresolved). A probe's verdict is exhausted without a plan only
    when the buffers of a window cannot fit, so that no plan fits.

    >>> from tensorplan.plan.planners.exact.branch_and_bound import settle
    >>> inst = Instance((3, 3, 1, 2), (0, 3, 0, 1), (1, 5, 2, 4), 5, (0, 1, 2, 3))
    >>> from tensorplan.plan.planners.params import PlannerParams
    >>> windows = Windows(inst, [1, 0, 3, 2], PlannerParams(max_pairs=100))
    >>> settle(windows.probe(5, Budget(None))).offsets
    [0, 2, 3, 0]
    """

    def __init__(self, inst: Instance, order: list[int], params: PlannerParams) -> None:
        self.inst, self.order, self.params = inst, order, params
        self.loads, self.largest = section_loads(inst), largest_live(inst)
        self._clipped: dict[tuple[int, int], tuple[SearchInstance | None, list[int]]] = {}

    def clipped(
        self, lo: int, hi: int, budget: Budget
    ) -> tuple[SearchInstance | None, list[int]] | None:
        """The window ``[lo, hi)`` as a search instance (None if it holds more than
        ``max_pairs`` overlapping pairs) and the indices of its buffers; None if ``budget``
        runs out first.

        Clipping is charged to ``budget``: a step per ``step_buffers`` buffers or pairs.
        """
        per_step = self.params.step_buffers
        if (lo, hi) not in self._clipped:
            if not budget.spend(1 + len(self.inst.sizes) // per_step):
                return None
            part, inside = clip(self.inst, lo, hi)
            pairs = overlapping_pairs(part)
            if pairs > self.params.max_pairs:
                self._clipped[lo, hi] = None, inside
            elif not budget.spend(1 + pairs // per_step):
                return None
            else:
                self._clipped[lo, hi] = to_search_instance(part), inside
        return self._clipped[lo, hi]

    def probe(self, cap: int, budget: Budget) -> WindowProbe:
        """A window probe at ``cap``, starting from the tight sections' span."""
        return WindowProbe(self, cap, budget)


class WindowProbe:
    """A resumable window probe at one capacity (see the module); ``advance`` and ``close`` as
    for ``search.Probe``."""

    def __init__(self, windows: Windows, cap: int, budget: Budget) -> None:
        self.windows, self.cap, self.budget = windows, cap, budget
        self.verdict: Verdict | None = None
        self._search: Probe | None = None
        self._inside: list[int] = []
        self._span = 0, 0
        if budget.spend(1 + len(windows.loads) // windows.params.step_buffers):
            self._open(*tight_span(windows.loads, windows.largest, cap))
        else:
            self.verdict = Verdict(None, False)

    def _open(self, lo: int, hi: int) -> None:
        """Start searching the window ``[lo, hi)`` (unresolved if it holds too many pairs or
        the budget runs out)."""
        self._span = lo, hi
        clipped = self.windows.clipped(lo, hi, self.budget)
        if clipped is None or clipped[0] is None:
            self.verdict = Verdict(None, False)
        else:
            window, self._inside = clipped
            self._search = Probe(window, self.cap, self.budget, self.windows.params)

    def advance(self, steps: int) -> Verdict | None:
        """Search the current window for about ``steps`` budget steps; complete or grow it when
        its search is done."""
        if self.verdict is None and self._search is not None:
            found = self._search.advance(steps)
            if found is not None:
                self._search = None
                self._finish(found)
        return self.verdict

    def _finish(self, found: Verdict) -> None:
        """Complete the window's plan, or refute, or give up, or grow the window."""
        inst, cap, order = self.windows.inst, self.cap, self.windows.order
        if found.offsets is None:
            self.verdict = found
            return
        if not self.budget.spend(len(order) * self.windows.params.steps_per_placement):
            self.verdict = Verdict(None, False)
            return
        offsets = complete(inst, dict(zip(self._inside, found.offsets, strict=True)), order)
        out = [i for i in range(len(inst.sizes)) if offsets[i] + inst.sizes[i] > cap]
        if not out:
            self.verdict = Verdict(offsets, False)
            return
        lo, hi = self._span
        self._open(min(lo, *map(inst.starts.__getitem__, out)),
                   max(hi, *map(inst.ends.__getitem__, out)))

    def close(self) -> None:
        """Drop the paused search of the current window."""
        if self._search is not None:
            self._search.close()
            self._search = None
