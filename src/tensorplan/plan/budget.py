"""The arena against a byte budget (``compile(..., max_arena_bytes=N)``, ``--max-arena``).

A plan that does not fit raises ``PlanError`` saying by how much, where the peak is and what
is live there; one that fits has ``N - arena_bytes`` bytes of headroom. Every arena must also
fit a 64-bit signed size, budget or not.

Worked example: an arena of 96 B against a budget of 64 B is 32 B over; with a budget of 128 B
the headroom is 32 B.
"""

from __future__ import annotations

from tensorplan.errors import PlanError
from tensorplan.plan.peak import peak
from tensorplan.plan.plan import MemoryPlan
from tensorplan.specs.spec import MAX_BYTES

_LISTED = 3  # values named in the error, largest first


def check_arena(plan: MemoryPlan, max_arena_bytes: int | None = None) -> int | None:
    """The headroom ``max_arena_bytes - plan.arena_bytes`` (None without a budget).

    Raises ``PlanError`` when the arena is above the budget, naming how much, the peak step,
    the bytes live there and the largest values live there, or when it does not fit 64 bits.

    >>> from tensorplan.plan.plan import PlannedStorage
    >>> a = PlannedStorage(0, 0, 64, 0, 2, "input", "", ("x",))
    >>> b = PlannedStorage(1, 64, 32, 1, 3, "activation", "", ("relu",))
    >>> check_arena(MemoryPlan(96, 96, "greedy", 16, True, {0: a, 1: b}, ()), 128)
    32
    """
    if plan.arena_bytes > MAX_BYTES:
        raise PlanError(f"plan: the arena needs {plan.arena_bytes:,} B, more than a 64-bit "
                        "size holds; lower the Dim maxima or the torch._check bounds")
    if max_arena_bytes is None:
        return None
    if not isinstance(max_arena_bytes, int) or max_arena_bytes < 0:
        raise PlanError(f"plan: max_arena_bytes must be a number of bytes, got "
                        f"{max_arena_bytes!r}")
    headroom = max_arena_bytes - plan.arena_bytes
    if headroom < 0:
        raise PlanError(_over_budget(plan, max_arena_bytes))
    return headroom


def _over_budget(plan: MemoryPlan, budget: int) -> str:
    top = peak(plan)
    largest = [plan.storages[s] for s in top.storages[:_LISTED]]
    live = ", ".join(f"{s.values[0]} {s.size:,} B" for s in largest) or "nothing"
    over = plan.arena_bytes - budget
    if budget < plan.lower_bound_bytes:
        what_to_do = (f"no plan of this program fits: its lower bound is "
                      f"{plan.lower_bound_bytes:,} B; lower the Dim maxima or the batch, or "
                      "split the model")
    else:
        what_to_do = (f"its lower bound of {plan.lower_bound_bytes:,} B fits: try "
                      "algorithm='optimal' with a longer time_limit")
    return (f"plan: the arena needs {plan.arena_bytes:,} B, {over:,} B over the budget of "
            f"{budget:,} B; the peak is at step {top.step}, {top.live_bytes:,} B live, the "
            f"largest there: {live}; {what_to_do}")

