"""A search budget: a deadline on the monotonic clock plus a cap on search steps."""

from __future__ import annotations

import time


class Budget:
    """Counts search steps and says when either the step cap or the deadline is reached.

    The clock is read only every ``CHECK_EVERY`` steps, so asking is cheap.

    >>> budget = Budget(seconds=None, steps=3)
    >>> [budget.spend() for _ in range(4)]
    [True, True, True, False]
    """

    CHECK_EVERY = 256  # steps between two reads of the clock

    def __init__(self, seconds: float | None, steps: int | None = None) -> None:
        self.started = time.perf_counter()
        self.deadline = None if seconds is None else self.started + seconds
        self.cap = steps
        self.steps = 0
        self.expired = False

    def spend(self, steps: int = 1) -> bool:
        """Count ``steps``; False once the budget is used up (and from then on)."""
        self.steps += steps
        if self.cap is not None and self.steps > self.cap:
            self.expired = True
        elif self.deadline is not None and self.steps % self.CHECK_EVERY < steps:
            self.expired = time.perf_counter() >= self.deadline
        return not self.expired

    def left(self) -> float | None:
        """Seconds until the deadline (never negative), or None without one."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.perf_counter())

    def elapsed(self) -> float:
        """Seconds since the budget was made."""
        return time.perf_counter() - self.started
