"""The independent plan checker: are live buffers disjoint and every offset aligned?

It shares no code with the planners (DESIGN rule 8), so a planner bug cannot hide in a shared
helper. Lifetimes are half-open ``[start, end)``: buffers ending at step t and starting at t may
share bytes. The check is one sweep over time with the live buffers kept sorted by offset, so a
newcomer only has to be compared with its two neighbours: O(n log n + n * live) with a small
constant, about a second for 30,000 buffers.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from tensorplan.errors import PlanError

MAX_REPORTED = 5  # problems listed in a PlanError message


def _bad_offsets(offsets: Sequence[int], alignment: int) -> list[str]:
    """Negative or misaligned offsets, one message each."""
    problems = []
    for i, offset in enumerate(offsets):
        if offset < 0:
            problems.append(f"buffer {i}: offset {offset} is negative")
        elif offset % alignment:
            problems.append(f"buffer {i}: offset {offset} is not a multiple of {alignment}")
    return problems


def _describe(i: int, sizes, starts, ends, offsets) -> str:
    """One buffer as 'buffer i bytes [lo, hi) live [start, end)'."""
    lo = offsets[i]
    return f"buffer {i} bytes [{lo}, {lo + sizes[i]}) live [{starts[i]}, {ends[i]})"


def _collisions(sizes, starts, ends, offsets) -> list[str]:
    """Pairs of buffers live at the same step whose byte ranges overlap."""
    events = sorted(
        (t, kind, i)
        for i in range(len(sizes))
        if sizes[i] > 0
        for t, kind in ((starts[i], 1), (ends[i], 0))
    )
    live: list[tuple[int, int]] = []  # (offset, buffer), sorted
    problems = []
    for _, kind, i in events:
        key = (offsets[i], i)
        if kind == 0:
            del live[bisect_left(live, key)]
            continue
        at = bisect_left(live, key)
        for j in (live[at - 1][1] if at else None, live[at][1] if at < len(live) else None):
            if j is not None and _bytes_overlap(i, j, sizes, offsets):
                problems.append(
                    f"{_describe(j, sizes, starts, ends, offsets)} overlaps "
                    f"{_describe(i, sizes, starts, ends, offsets)}"
                )
        live.insert(at, key)
    return problems


def _bytes_overlap(i: int, j: int, sizes, offsets) -> bool:
    return offsets[i] < offsets[j] + sizes[j] and offsets[j] < offsets[i] + sizes[i]


def find_overlaps(
    sizes: Sequence[int],
    starts: Sequence[int],
    ends: Sequence[int],
    offsets: Sequence[int],
    alignment: int = 1,
) -> list[str]:
    """Every problem found in a plan, as readable lines; [] means the plan is valid.

    Buffer i holds bytes ``[offsets[i], offsets[i] + sizes[i])`` during steps
    ``[starts[i], ends[i])``. Zero-size buffers hold no bytes.

    >>> find_overlaps([4, 4], [0, 2], [2, 4], [0, 0])
    []
    >>> find_overlaps([4, 4], [0, 1], [2, 4], [0, 2])
    ['buffer 0 bytes [0, 4) live [0, 2) overlaps buffer 1 bytes [2, 6) live [1, 4)']
    >>> find_overlaps([4], [0], [1], [6], alignment=4)
    ['buffer 0: offset 6 is not a multiple of 4']
    """
    if not len(sizes) == len(starts) == len(ends) == len(offsets):
        return [
            f"length mismatch: {len(sizes)} sizes, {len(starts)} starts, "
            f"{len(ends)} ends, {len(offsets)} offsets"
        ]
    return _bad_offsets(offsets, alignment) + _collisions(sizes, starts, ends, offsets)


def check_placement(
    sizes: Sequence[int],
    starts: Sequence[int],
    ends: Sequence[int],
    offsets: Sequence[int],
    alignment: int = 1,
    peak: int | None = None,
) -> None:
    """Raise PlanError listing the first problems if the plan is invalid (or exceeds ``peak``).

    >>> check_placement([4, 4], [0, 1], [2, 4], [0, 4], peak=8)
    >>> try:
    ...     check_placement([4, 4], [0, 1], [2, 4], [0, 4], peak=6)
    ... except PlanError as error:
    ...     print(error)
    invalid memory plan (1 problem): buffer 1 ends at byte 8, above the reported peak 6
    """
    problems = find_overlaps(sizes, starts, ends, offsets, alignment)
    if peak is not None:
        problems += [
            f"buffer {i} ends at byte {offsets[i] + sizes[i]}, above the reported peak {peak}"
            for i in range(len(sizes))
            if offsets[i] + sizes[i] > peak
        ]
    if problems:
        shown = "; ".join(problems[:MAX_REPORTED])
        hidden = len(problems) - MAX_REPORTED
        more = f"; ... and {hidden} more" if hidden > 0 else ""
        noun = "problem" if len(problems) == 1 else "problems"
        raise PlanError(f"invalid memory plan ({len(problems)} {noun}): {shown}{more}")
