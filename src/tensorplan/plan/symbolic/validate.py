"""The checker of a symbolic plan: a proof over the whole range of the dims, not a sample.

It shares no code with ``stack.py``, which builds the plan (DESIGN rule 8); the arithmetic
and the proofs of ``a >= b`` over a box of dim ranges are ``sizes.py``'s. The rules:

- every storage and region of a graph is proven, over the whole box, to sit entirely above
  or entirely below every other one live at a common step of that graph (the *same* order
  at every size: a sufficient condition, the one the planner meets);
- every offset takes only multiples of the alignment and is never negative;
- every storage reserves at least what its largest value needs, at every size;
- the arena is proven to hold every storage and region; a subgraph's storage is proven to
  stay inside its region.

When a pair cannot be proven apart, a size where the two share bytes is searched for (the
box's corners, a sweep, every size of a small one-dim range) and named; a pair with neither
a proof nor such a size is still a violation ("cannot be proven disjoint").
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from tensorplan.plan.symbolic.sizes import Box, SizeExpr
from tensorplan.plan.validate import Violation, ViolationKind

SWEEP = 9             # sizes per dim searched for a witness (beside every corner)
EXHAUSTIVE = 4096     # a one-dim range up to this many sizes is searched at every size


@dataclass(frozen=True)
class Placed:
    """One storage or region as the checker sees it."""

    label: int | str     # storage id or region node
    name: str            # how messages name it
    graph: str           # the graph whose steps start/end count
    start: int           # first step live
    end: int             # first step no longer live
    offset: SizeExpr     # byte offset in the arena
    size: SizeExpr       # bytes reserved
    need: SizeExpr | None = None   # bytes its largest value takes (None: a region)
    region: str | None = None      # label of the region it must stay inside (subgraphs)


def sweep_points(box: Box, extra: Sequence[Mapping[str, int]] = (),
                 exhaustive: bool = False) -> list[dict[str, int]]:
    """Sizes to test a plan at: every corner, ``extra``, and ``SWEEP`` sizes spread over each
    dim's range (the others at their upper bound); with ``exhaustive``, every size of a
    one-dim box of at most ``EXHAUSTIVE`` sizes."""
    dims = sorted(box.ranges)
    points = box.corners(dims) + [dict(p) for p in extra]
    for dim in dims:
        lo, hi = box.ranges[dim]
        every = exhaustive and len(dims) == 1 and hi - lo <= EXHAUSTIVE
        spread = range(lo, hi + 1) if every else \
            {lo + (hi - lo) * i // (SWEEP - 1) for i in range(SWEEP)}
        points += [{**box.upper, dim: size} for size in sorted(spread)]
    unique = {tuple(sorted(p.items())): p for p in points}
    return list(unique.values())


def _where(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{d}={v}" for d, v in sorted(sizes.items()))


def _meeting(a: Placed, b: Placed, points: Sequence[Mapping[str, int]]) -> dict[str, int] | None:
    """A size at which the two share a byte (None: none among ``points``)."""
    for sizes in points:
        a0, b0 = a.offset.evaluate(sizes), b.offset.evaluate(sizes)
        a1, b1 = a0 + a.size.evaluate(sizes), b0 + b.size.evaluate(sizes)
        if a0 < b1 and b0 < a1 and a1 > a0 and b1 > b0:
            return dict(sizes)
    return None


def _apart(a: Placed, b: Placed, box: Box) -> bool:
    """Proof that one of the two is above the other at every size."""
    upper = box.upper
    pairs = [(a, b), (b, a)]
    pairs.sort(key=lambda p: p[0].offset.evaluate(upper) < p[1].offset.evaluate(upper))
    return any(high.offset.at_least(low.offset.plus(low.size, box), box) for high, low in pairs)


def _live_pairs(items: Sequence[Placed]) -> Iterator[tuple[Placed, Placed]]:
    """Pairs of one graph's items live at a common step (items that never take a byte
    collide with nothing)."""
    by_graph: dict[str, list[Placed]] = {}
    for item in items:
        if item.size.is_constant and item.size.evaluate({}) == 0:
            continue
        by_graph.setdefault(item.graph, []).append(item)
    for members in by_graph.values():
        members.sort(key=lambda p: p.start)
        for i, a in enumerate(members):
            for b in itertools.islice(members, i + 1, None):
                if b.start >= a.end:
                    break
                yield a, b


def _item_violations(item: Placed, arena: SizeExpr, alignment: int, box: Box,
                     regions: Mapping[str, Placed]) -> list[Violation]:
    found = []
    zero = SizeExpr.constant(0)
    if not item.offset.aligned_to(alignment):
        found.append(Violation(ViolationKind.ALIGNMENT, (item.label,),
                               f"{item.name}: offset {item.offset.text()} is not a multiple of "
                               f"{alignment} at every size"))
    if not item.offset.at_least(zero, box):
        found.append(Violation(ViolationKind.OUT_OF_ARENA, (item.label,),
                               f"{item.name}: offset {item.offset.text()} is not proven >= 0"))
    if item.need is not None and not item.size.at_least(item.need, box):
        found.append(Violation(ViolationKind.OUT_OF_ARENA, (item.label,),
                               f"{item.name}: reserves {item.size.text()} B, not proven to "
                               f"hold its largest value's {item.need.text()} B"))
    top = item.offset.plus(item.size, box)
    if item.region is None and not arena.at_least(top, box):
        found.append(Violation(ViolationKind.OUT_OF_ARENA, (item.label,),
                               f"{item.name}: ends at {top.text()}, not proven within the "
                               f"arena {arena.text()}"))
    if item.region is not None:
        region = regions[item.region]
        if not (item.offset.at_least(region.offset, box)
                and region.offset.plus(region.size, box).at_least(top, box)):
            found.append(Violation(ViolationKind.OUTSIDE_REGION, (item.label, region.label),
                                   f"{item.name}: [{item.offset.text()}, {top.text()}) is not "
                                   f"proven inside {region.name}"))
    return found


def symbolic_violations(items: Sequence[Placed], arena: SizeExpr, alignment: int, box: Box,
                        extra: Sequence[Mapping[str, int]] = ()) -> list[Violation]:
    """Every rule of the module docstring the plan is not proven to keep, typed; [] when the
    plan is proven at every size of ``box``. ``extra`` sizes join the witness search."""
    regions = {item.label: item for item in items if item.need is None}
    found = [v for item in items
             for v in _item_violations(item, arena, alignment, box, regions)]
    points: list[dict[str, int]] | None = None
    for a, b in _live_pairs(items):
        if _apart(a, b, box):
            continue
        points = points if points is not None else sweep_points(box, extra, exhaustive=True)
        meet = _meeting(a, b, points)
        if meet is None:
            message = (f"{a.name} at {a.offset.text()} and {b.name} at {b.offset.text()}, live "
                       f"together, cannot be proven disjoint at every size")
        else:
            message = (f"{a.name} [{a.offset.evaluate(meet)}, "
                       f"{a.offset.evaluate(meet) + a.size.evaluate(meet)}) and {b.name} "
                       f"[{b.offset.evaluate(meet)}, "
                       f"{b.offset.evaluate(meet) + b.size.evaluate(meet)}), live together, "
                       f"overlap at {_where(meet)}")
        found.append(Violation(ViolationKind.OVERLAP, (a.label, b.label), message))
    return found
