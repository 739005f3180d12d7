"""The planner's data model: buffers with half-open lifetimes, a problem, and a placement.

Lifetimes are half-open: a buffer with ``start=2, end=5`` is live at steps 2, 3 and 4, so it may
share bytes with a buffer that ends at 2 or starts at 5. Everything here is plain ints (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorplan.errors import PlanError


@dataclass(frozen=True)
class Buffer:
    """One block of memory that must stay in place from ``start`` to ``end``.

    >>> Buffer(size=64, start=0, end=3)
    Buffer(size=64, start=0, end=3)
    >>> Buffer(size=64, start=3, end=3)
    Traceback (most recent call last):
    ...
    tensorplan.errors.PlanError: buffer lifetime [3, 3) is empty: start must be < end
    """

    size: int  # bytes it needs, >= 0
    start: int  # first step at which it is live
    end: int  # first step at which it is no longer live (exclusive)

    def __post_init__(self) -> None:
        for name in ("size", "start", "end"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise PlanError(f"buffer {name} must be an int, got {value!r}")
        if self.size < 0:
            raise PlanError(f"buffer size {self.size} is negative: sizes must be >= 0")
        if self.start >= self.end:
            raise PlanError(
                f"buffer lifetime [{self.start}, {self.end}) is empty: start must be < end"
            )


@dataclass(frozen=True)
class Problem:
    """A set of buffers to place in one arena, with every offset a multiple of ``alignment``.

    >>> Problem((Buffer(8, 0, 2), Buffer(8, 1, 3)), alignment=16).aligned_sizes
    (16, 16)
    """

    buffers: tuple[Buffer, ...]  # the buffers, in the caller's order
    alignment: int = 1  # every offset is a multiple of it; sizes are rounded up to it

    def __post_init__(self) -> None:
        if not isinstance(self.alignment, int) or isinstance(self.alignment, bool) \
                or self.alignment < 1:
            raise PlanError(f"alignment must be a positive int, got {self.alignment!r}")
        object.__setattr__(self, "buffers", tuple(self.buffers))
        for index, buffer in enumerate(self.buffers):
            if not isinstance(buffer, Buffer):
                raise PlanError(f"buffers[{index}] is {type(buffer).__name__}, not a Buffer")

    @property
    def aligned_sizes(self) -> tuple[int, ...]:
        """Each buffer's size rounded up to a multiple of the alignment."""
        a = self.alignment
        return tuple(-(-b.size // a) * a for b in self.buffers)


@dataclass(frozen=True)
class Placement:
    """Where each buffer sits: ``offsets[i]`` is the byte offset of ``buffers[i]``.

    >>> Placement(offsets=(0, 8), peak=16, lower_bound=16, optimal=True, algorithm="greedy").gap
    0.0
    """

    offsets: tuple[int, ...]  # byte offset of each buffer, in the problem's order
    peak: int  # arena bytes: max(offset + aligned size), 0 without buffers
    lower_bound: int  # largest total of aligned sizes live at one step; no plan beats it
    optimal: bool  # True only when proven: peak == lower_bound or the search was exhaustive
    algorithm: str  # the planner that produced the offsets: naive, greedy or optimal
    search_seconds: float = 0.0  # wall time of the optimal planner, greedy included (else 0)

    @property
    def gap(self) -> float:
        """How far the peak is above the lower bound, as a fraction of the bound."""
        if self.lower_bound == 0:
            return 0.0
        return (self.peak - self.lower_bound) / self.lower_bound
