"""Depth-first branch and bound for the decision problem: do the buffers fit under a capacity?

Ideas from MiniMalloc (Moffitt, ASPLOS 2023), re-derived here. Plans are built bottom-up in
*canonical* form: buffers are placed in nondecreasing order of offset (ties broken by a
branching rank), each at its *floor*, the highest top of the already placed buffers it
overlaps in time. Any plan can be pushed down into that form without raising its peak, so
nothing is lost. Pruning, each rule a switch of ``PlannerParams`` (on by default; off, the
search still answers exactly, only slower):

- ``canonical_order``: a buffer whose floor is below the last placed offset cannot come next,
  nor one of lower rank at the same offset;
- ``dominance``: placing b at x is pointless while some unplaced buffer u would fit entirely
  below x (floor(u) + size(u) <= x): moving u down there is a plan no worse, found in the branch
  that places u first;
- ``section_bounds``: a section's level is the highest top placed in it, raised to the lowest
  floor of the unplaced buffers live there; level (or the last offset, if higher) plus the
  unplaced size live there must stay within the capacity (off, only each placed top must);
- ``decomposition``: once no unplaced buffer crosses the boundary between two sections, the
  two sides are independent sub-problems, solved one after the other without re-branching.

A capacity below the lower bound (the fullest section) is refuted before any search.

Branching order: lowest floor first, then a static rank (by width, area and section total in
one of three orders, ``PlannerParams.branching_orders``). Which order finds a plan fast differs
wildly from instance to instance (challenging_B: 226k steps with one, more than 2M with the
others), so the three run as a race: each search is a generator that pauses at the first node
after its turn of ``PlannerParams.race_turn_steps`` budget steps, and the three take turns until
one of them finishes (the first runs alone for its first node per buffer, which is all an easy
instance needs). Nothing is searched twice,
unlike restarts under doubling node limits (challenging_B at its bound: 2.1M steps that way,
690k as a race).
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import compress, repeat
from operator import add, sub
from typing import Protocol

from tensorplan.plan.planners.budget import Budget
from tensorplan.plan.planners.exact.search_instance import SearchInstance
from tensorplan.plan.planners.params import PlannerParams

UNPLACED_NONE = 1 << 62  # stands for "no unplaced buffer" in a minimum over a section


@dataclass(frozen=True)
class Verdict:
    """The answer of one decision search."""

    offsets: list[int] | None  # a plan within the capacity (in units), if one was found
    exhausted: bool  # the search space was covered: with no offsets, no plan fits


@dataclass(frozen=True)
class Partition:
    """Buffers that can be solved on their own: none crosses the section range's ends."""

    buffers: tuple[int, ...]  # unplaced buffers of the range
    lo: int  # first section
    hi: int  # first section after the range


class _OutOfTime(Exception):
    """The caller's budget was used up."""


Paused = Generator[None, None, bool]  # a search step: yields to pause, returns whether it fit


class _Search:
    """One depth-first search at a capacity with one branching order, run as a generator that
    pauses at the first node once the budget has counted ``pause_at`` steps."""

    def __init__(self, inst: SearchInstance, cap: int, heuristic: str, budget: Budget,
                 params: PlannerParams):
        n, sections = len(inst.sizes), len(inst.loads)
        self.inst, self.cap, self.heuristic, self.budget = inst, cap, heuristic, budget
        self.params = params
        self.nodes = 0  # nodes visited so far
        self.pause_at = 0  # pause when the budget's steps reach it
        self.floor = [0] * n  # lowest offset each unplaced buffer may take
        self.open = [0] * n  # floor while unplaced, UNPLACED_NONE once placed
        self.offset = [-1] * n  # offset of each placed buffer, -1 while unplaced
        self.solution = [0] * n  # the offsets of the latest complete plan
        self.left = list(inst.loads)  # unplaced size per section
        # per section, a buffer that recently had the lowest floor there (a hint, never undone)
        self.witness = [members[0] if members else 0 for members in inst.members]
        self.crossing = [0] * max(sections - 1, 0)  # unplaced buffers over each boundary
        self.members_per_section = sum(map(len, inst.members)) // max(sections, 1)
        for start, end in zip(inst.starts, inst.ends, strict=True):
            for s in range(start, end - 1):
                self.crossing[s] += 1

    def solve(self) -> Paused:
        """True when every partition of the whole instance fits."""
        everyone = tuple(range(len(self.inst.sizes)))
        cuts = [s + 1 for s, count in enumerate(self.crossing) if count == 0]
        if not self.params.decomposition:
            cuts = []
        return (yield from self._solve_all(self._split(everyone, 0, len(self.left), cuts)))

    def _split(
        self, buffers: tuple[int, ...], lo: int, hi: int, cuts: list[int]
    ) -> list[Partition]:
        """The unplaced buffers of ``[lo, hi)`` grouped by the section ranges between cuts."""
        bounds = [lo, *cuts, hi]
        parts = []
        for a, b in zip(bounds, bounds[1:], strict=False):
            inside = tuple(i for i in buffers
                           if self.offset[i] < 0 and a <= self.inst.starts[i] < b)
            if inside:
                parts.append(Partition(inside, a, b))
        return parts

    def _rank(self, part: Partition) -> dict[int, int]:
        """Static branching rank of the partition's buffers under the attempt's heuristic."""
        inst, left = self.inst, self.left
        keys = {
            "W": lambda i: -inst.widths[i],
            "A": lambda i: -inst.widths[i] * inst.sizes[i],
            "T": lambda i: -max(left[inst.starts[i] : inst.ends[i]]),
        }
        order = sorted(part.buffers, key=lambda i: (*(keys[c](i) for c in self.heuristic), i))
        return {i: r for r, i in enumerate(order)}

    def _solve_all(self, parts: list[Partition]) -> Paused:
        """Solve independent partitions one after the other."""
        for part in parts:
            if not (yield from self._dfs(part, self._rank(part), 0, -1)):
                return False
        return True

    def _dfs(
        self, part: Partition, rank: dict[int, int], min_offset: int, min_rank: int
    ) -> Paused:
        """Place the partition's remaining buffers; True (with ``solution`` set) if they fit."""
        self.nodes += 1
        if self.budget.steps >= self.pause_at:
            yield
        floor, offset, canonical = self.floor, self.offset, self.params.canonical_order
        todo = [i for i in part.buffers if offset[i] < 0]
        if not todo:
            return True
        if not self.budget.spend(1 + len(todo) // self.params.step_buffers):
            raise _OutOfTime
        lowest, ceiling = min_offset if canonical else 0, self._ceiling(part, todo)
        choices = sorted((floor[i], rank[i], i) for i in todo if lowest <= floor[i] <= ceiling)
        if not self.params.section_bounds:  # they kept every top within cap: now check it
            sizes = self.inst.sizes
            choices = [(x, r, b) for x, r, b in choices if x + sizes[b] <= self.cap]
        for x, r, b in choices:
            if canonical and x == min_offset and r < min_rank:
                continue
            if (yield from self._try(part, rank, b, x)):
                return True
        return False

    def _ceiling(self, part: Partition, todo: list[int]) -> int:
        """The highest offset the next placement may take: dominance bounds it, and so does
        the fullest section (x + its unplaced size <= cap)."""
        ceiling = UNPLACED_NONE
        if self.params.dominance:
            floor, sizes = self.floor, self.inst.sizes
            ceiling = min(map(add, map(floor.__getitem__, todo), map(sizes.__getitem__, todo))) - 1
        if self.params.section_bounds:
            ceiling = min(ceiling, self.cap - max(self.left[part.lo : part.hi]))
        return ceiling

    def _try(self, part: Partition, rank: dict[int, int], b: int, x: int) -> Paused:
        """Place ``b`` at ``x``, search on if the sections allow, and undo."""
        raised, old = self._place(b, x)
        try:
            if self.params.section_bounds and not self._sections_ok(x, b, raised):
                return False
            return (yield from self._continue(part, rank, b, x))
        finally:
            self._unplace(b, raised, old)

    def _place(self, b: int, x: int) -> tuple[list[int], list[int]]:
        """Put ``b`` at ``x``; returns the buffers whose floor it raised, and their old floors."""
        inst, floor, opened, left = self.inst, self.floor, self.open, self.left
        size = inst.sizes[b]
        top = x + size
        self.offset[b] = self.solution[b] = x
        opened[b] = UNPLACED_NONE
        # a placed neighbour's open value is UNPLACED_NONE: only unplaced ones are below top
        raised = [u for u in inst.neighbours[b] if opened[u] < top]
        old = list(map(floor.__getitem__, raised))
        for u in raised:
            floor[u] = opened[u] = top
        lo, hi = inst.starts[b], inst.ends[b]
        left[lo:hi] = map(sub, left[lo:hi], repeat(size, hi - lo))
        return raised, old

    def _unplace(self, b: int, raised: list[int], old: list[int]) -> None:
        inst, floor, opened, left = self.inst, self.floor, self.open, self.left
        lo, hi = inst.starts[b], inst.ends[b]
        left[lo:hi] = map(add, left[lo:hi], repeat(inst.sizes[b], hi - lo))
        for u, value in zip(raised, old, strict=True):
            floor[u] = opened[u] = value
        self.offset[b] = -1
        opened[b] = floor[b]

    def _sections_ok(self, x: int, b: int, raised: list[int]) -> bool:
        """The sections next to ``b`` can still hold their unplaced buffers.

        A section's unplaced buffers all sit at or above the lowest of their floors, so that
        plus their total size must fit; the test holds in any section, so it is sound to ask it
        of more sections than changed. Asked: ``b``'s own sections with something unplaced, and
        the sections beside them, up to the ends of the raised buffers, whose unplaced size is
        above ``cap - top`` (elsewhere a raised buffer keeps the lowest floor at most ``top``,
        which fits).
        """
        inst, cap, left = self.inst, self.cap, self.left
        starts, ends = inst.starts, inst.ends
        top = x + inst.sizes[b]
        lo, hi = starts[b], ends[b]
        tight = list(compress(range(lo, hi), left[lo:hi]))
        if raised:
            room = cap - top  # sections whose unplaced size exceeds it are tight
            first = min(map(starts.__getitem__, raised))
            last = max(map(ends.__getitem__, raised))
            if first < lo:
                tight += compress(range(first, lo), map(room.__lt__, left[first:lo]))
            if last > hi:
                tight += compress(range(hi, last), map(room.__lt__, left[hi:last]))
        per_step = self.params.step_members
        if not self.budget.spend(1 + len(tight) * self.members_per_section // per_step):
            raise _OutOfTime
        # some unplaced buffer of each tight section must have its floor within cap - left:
        # the buffer that answered last time is asked first, the section is scanned only if
        # it no longer qualifies
        opened, witness, members = self.open, self.witness, inst.members
        for s in tight:
            room = cap - left[s]
            if opened[witness[s]] <= room:
                continue
            lowest = min(members[s], key=opened.__getitem__)
            witness[s] = lowest
            if opened[lowest] > room:
                return False
        return True

    def _continue(self, part: Partition, rank: dict[int, int], b: int, x: int) -> Paused:
        """Search on after placing ``b``; split the partition where ``b`` was the last bridge."""
        if not self.params.decomposition:
            return (yield from self._dfs(part, rank, x, rank[b]))
        inst, crossing = self.inst, self.crossing
        cuts = []
        for s in range(inst.starts[b], inst.ends[b] - 1):
            crossing[s] -= 1
            if crossing[s] == 0:
                cuts.append(s + 1)
        try:
            if not cuts:
                return (yield from self._dfs(part, rank, x, rank[b]))
            parts = self._split(part.buffers, part.lo, part.hi, cuts)
            return (yield from self._solve_all(parts))
        finally:
            for s in range(inst.starts[b], inst.ends[b] - 1):
                crossing[s] += 1


class Probe:
    """A resumable decision search at one capacity: the branching orders race (see the module).

    ``advance`` runs it for a number of budget steps and says what it found; a probe can be
    left paused and advanced again later, at no cost but the memory of its search.

    >>> from tensorplan.plan.planners.problem.instance import Instance
    >>> from tensorplan.plan.planners.exact.search_instance import to_search_instance
    >>> inst = to_search_instance(Instance((2, 1, 1, 2), (0, 0, 1, 1), (1, 2, 3, 3), 3,
    ...                                    (0, 1, 2, 3)))
    >>> params = PlannerParams()
    >>> settle(Probe(inst, 4, Budget(None), params)).offsets
    [0, 2, 3, 0]
    >>> settle(Probe(inst, 3, Budget(None), params))
    Verdict(offsets=None, exhausted=True)
    """

    def __init__(
        self, inst: SearchInstance, cap: int, budget: Budget, params: PlannerParams
    ) -> None:
        self.verdict = Verdict(None, True) if max(inst.loads, default=0) > cap else None
        if self.verdict is None and not budget.spend(1 + len(inst.sizes) // params.step_buffers):
            self.verdict = Verdict(None, False)  # the searches' set-up is charged too
        self._searches = [_Search(inst, cap, order, budget, params)
                          for order in params.branching_orders]
        self._budget = budget
        self._turn_steps = params.race_turn_steps
        self._runs = [search.solve() for search in self._searches]
        self._depth = 4 * len(inst.sizes) + 1000  # the search recurses once per buffer
        self._dive = len(inst.sizes) + 1

    def advance(self, steps: int) -> Verdict | None:
        """Search on until about ``steps`` more budget steps are spent; the verdict once there is
        one, else None. The verdict is unresolved (no plan, not exhausted) when the budget runs
        out.
        """
        if self.verdict is not None:
            return self.verdict
        target = self._budget.steps + steps
        with _recursion_depth(self._depth):
            while self._budget.steps < target and self.verdict is None:
                # the first order runs alone for its first node per buffer: on easy instances
                # it places everything without a backtrack, at a third of the cost of a race
                racing = self._searches[0].nodes >= self._dive
                for search, run in zip(self._searches, self._runs, strict=True):
                    search.pause_at = self._budget.steps + self._turn_steps
                    try:
                        next(run)
                    except StopIteration as done:
                        found = search.solution if done.value else None
                        self.verdict = Verdict(found, True)
                    except _OutOfTime:
                        self.verdict = Verdict(None, False)
                    if self.verdict is not None or not racing:
                        break
            if self.verdict is not None:
                self._close()
        return self.verdict

    def close(self) -> None:
        """Drop the paused searches (a probe no longer needed)."""
        with _recursion_depth(self._depth):
            self._close()

    def _close(self) -> None:
        for run in self._runs:
            run.close()  # unwinds the search's frames, undoing its placements on the way
        self._runs = []
        self._searches = []


class Resumable(Protocol):
    """What the capacity search needs of a probe (``Probe``, ``window.WindowProbe``)."""

    def advance(self, steps: int) -> Verdict | None: ...

    def close(self) -> None: ...


def settle(probe: Resumable) -> Verdict:
    """Advance ``probe`` until it has a verdict."""
    verdict = None
    while verdict is None:
        verdict = probe.advance(1 << 20)
    return verdict


@contextmanager
def _recursion_depth(depth: int) -> Iterator[None]:
    """Let Python recurse ``depth`` frames deep for a while (the search recurses per buffer)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, depth))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)
