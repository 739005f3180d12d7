"""The independent plan checker: are live buffers disjoint, every offset aligned and in place?

It shares no code with the planners (DESIGN rule 8), so a planner bug cannot hide in a shared
helper. Lifetimes are half-open ``[start, end)``: buffers ending at step t and starting at t may
share bytes. The overlap check is one sweep over time with the live buffers kept sorted by
offset, so a newcomer only has to be compared with its two neighbours: O(n log n + n * live)
with a small constant, about a second for 30,000 buffers.

Every problem is a typed ``Violation`` (its ``kind``, the buffers involved, a readable
``message``); ``plan_error`` turns a list of them into the ``PlanError`` callers raise.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from tensorplan.errors import PlanError

MAX_REPORTED = 5  # problems listed in a PlanError message


class ViolationKind(Enum):
    """The rule a plan breaks."""

    OVERLAP = "overlap"  # two buffers live at one step share bytes
    ALIGNMENT = "alignment"  # an offset is not a multiple of the alignment
    OUT_OF_ARENA = "out of arena"  # bytes below 0 (a negative offset) or above the arena's end
    OUTSIDE_REGION = "outside region"  # a subgraph's buffer leaves its control-flow region
    LENGTH_MISMATCH = "length mismatch"  # the plan's columns do not have one entry per buffer


@dataclass(frozen=True)
class Violation:
    """One problem found in a plan.

    >>> find_violations([4], [0], [1], [6], alignment=4)[0].kind
    <ViolationKind.ALIGNMENT: 'alignment'>
    """

    kind: ViolationKind  # the rule it breaks
    buffers: tuple[int | str, ...]  # the buffers involved, by label (their index by default)
    message: str  # what is wrong, readable: the buffers' bytes, lifetimes and the rule


class _Named:
    """How the checker reports each buffer: its label (in ``Violation.buffers``) and its name
    (in messages)."""

    def __init__(self, n: int, labels: Sequence[int | str] | None,
                 names: Sequence[str] | None) -> None:
        self.labels = list(range(n)) if labels is None else labels
        self.names = [f"buffer {i}" for i in range(n)] if names is None else names

    def violation(self, kind: ViolationKind, buffers: tuple[int, ...], message: str) -> Violation:
        return Violation(kind, tuple(self.labels[i] for i in buffers), message)


def _bad_offsets(named: _Named, offsets: Sequence[int], alignment: int) -> list[Violation]:
    """Negative or misaligned offsets, one violation each."""
    found = []
    for i, offset in enumerate(offsets):
        if offset < 0:
            found.append(named.violation(ViolationKind.OUT_OF_ARENA, (i,),
                                         f"{named.names[i]}: offset {offset} is negative"))
        elif offset % alignment:
            found.append(named.violation(
                ViolationKind.ALIGNMENT, (i,),
                f"{named.names[i]}: offset {offset} is not a multiple of {alignment}"))
    return found


def _collisions(named: _Named, sizes, starts, ends, offsets) -> list[Violation]:
    """Pairs of buffers live at the same step whose byte ranges overlap."""
    events = sorted(
        (t, kind, i)
        for i in range(len(sizes))
        if sizes[i] > 0
        for t, kind in ((starts[i], 1), (ends[i], 0))
    )

    def describe(i: int) -> str:
        lo = offsets[i]
        return f"{named.names[i]} bytes [{lo}, {lo + sizes[i]}) live [{starts[i]}, {ends[i]})"

    live: list[tuple[int, int]] = []  # (offset, buffer), sorted
    found = []
    for _, kind, i in events:
        key = (offsets[i], i)
        if kind == 0:
            del live[bisect_left(live, key)]
            continue
        at = bisect_left(live, key)
        for j in (live[at - 1][1] if at else None, live[at][1] if at < len(live) else None):
            if j is not None and _bytes_overlap(i, j, sizes, offsets):
                found.append(named.violation(ViolationKind.OVERLAP, (j, i),
                                             f"{describe(j)} overlaps {describe(i)}"))
        live.insert(at, key)
    return found


def _bytes_overlap(i: int, j: int, sizes, offsets) -> bool:
    return offsets[i] < offsets[j] + sizes[j] and offsets[j] < offsets[i] + sizes[i]


def _above(named: _Named, sizes, offsets, peak: int) -> list[Violation]:
    """Buffers whose bytes end above the arena."""
    return [
        named.violation(ViolationKind.OUT_OF_ARENA, (i,),
                        f"{named.names[i]} ends at byte {end}, above the reported peak {peak}")
        for i, end in enumerate(o + s for o, s in zip(offsets, sizes, strict=True))
        if end > peak
    ]


def find_violations(
    sizes: Sequence[int],
    starts: Sequence[int],
    ends: Sequence[int],
    offsets: Sequence[int],
    alignment: int = 1,
    peak: int | None = None,
    *,
    labels: Sequence[int | str] | None = None,
    names: Sequence[str] | None = None,
) -> list[Violation]:
    """Every problem found in a plan; [] means the plan is valid.

    Buffer i holds bytes ``[offsets[i], offsets[i] + sizes[i])`` during steps
    ``[starts[i], ends[i])``. Zero-size buffers hold no bytes. With ``peak``, bytes must also
    end at or below it. ``labels[i]`` is how a violation's ``buffers`` name buffer i (default
    its index), ``names[i]`` how its message does (default ``"buffer i"``).

    >>> find_violations([4, 4], [0, 2], [2, 4], [0, 0])
    []
    >>> [v.message for v in find_violations([4, 4], [0, 1], [2, 4], [0, 2])]
    ['buffer 0 bytes [0, 4) live [0, 2) overlaps buffer 1 bytes [2, 6) live [1, 4)']
    >>> find_violations([4, 4], [0, 1], [2, 4], [0, 4], peak=6)[0].buffers
    (1,)
    """
    columns = (sizes, starts, ends, offsets, *(c for c in (labels, names) if c is not None))
    if len({len(column) for column in columns}) > 1:
        return [Violation(ViolationKind.LENGTH_MISMATCH, (),
                          f"length mismatch: {len(sizes)} sizes, {len(starts)} starts, "
                          f"{len(ends)} ends, {len(offsets)} offsets")]
    named = _Named(len(sizes), labels, names)
    found = _bad_offsets(named, offsets, alignment) + _collisions(named, sizes, starts, ends,
                                                                  offsets)
    return found if peak is None else found + _above(named, sizes, offsets, peak)


def find_escapes(
    region: tuple[int, int],
    region_name: str,
    sizes: Sequence[int],
    offsets: Sequence[int],
    *,
    labels: Sequence[int | str] | None = None,
    names: Sequence[str] | None = None,
) -> list[Violation]:
    """Buffers whose bytes leave ``region`` (``[lo, hi)``, called ``region_name``), one
    OUTSIDE_REGION violation each; ``labels`` and ``names`` as for ``find_violations``.

    >>> [v.message for v in find_escapes((16, 32), "region 'cond'", [8, 8], [16, 28])]
    ["buffer 1 at [28, 36) leaves region 'cond' at [16, 32)"]
    """
    lo, hi = region
    named = _Named(len(sizes), labels, names)
    return [
        named.violation(ViolationKind.OUTSIDE_REGION, (i,),
                        f"{named.names[i]} at [{offset}, {offset + size}) leaves {region_name} "
                        f"at [{lo}, {hi})")
        for i, (size, offset) in enumerate(zip(sizes, offsets, strict=True))
        if not lo <= offset <= offset + size <= hi
    ]


def plan_error(violations: Sequence[Violation], stage: str = "") -> PlanError:
    """The PlanError listing the first violations (``stage`` prefixes the message).

    >>> print(plan_error(find_violations([4, 4], [0, 1], [2, 4], [0, 4], peak=6)))
    invalid memory plan (1 problem): buffer 1 ends at byte 8, above the reported peak 6
    """
    shown = "; ".join(v.message for v in violations[:MAX_REPORTED])
    hidden = len(violations) - MAX_REPORTED
    more = f"; ... and {hidden} more" if hidden > 0 else ""
    noun = "problem" if len(violations) == 1 else "problems"
    prefix = f"{stage}: " if stage else ""
    return PlanError(f"{prefix}invalid memory plan ({len(violations)} {noun}): {shown}{more}")


def check_placement(sizes: Sequence[int], starts: Sequence[int], ends: Sequence[int],
                    offsets: Sequence[int], alignment: int = 1, peak: int | None = None) -> None:
    """Raise PlanError listing the first problems if the plan is invalid (or exceeds ``peak``).

    >>> check_placement([4, 4], [0, 1], [2, 4], [0, 4], peak=8)
    >>> try:
    ...     check_placement([4, 4], [0, 1], [2, 4], [0, 4], peak=6)
    ... except PlanError as error:
    ...     print(error)
    invalid memory plan (1 problem): buffer 1 ends at byte 8, above the reported peak 6
    """
    violations = find_violations(sizes, starts, ends, offsets, alignment, peak)
    if violations:
        raise plan_error(violations)
