"""The arena against a byte budget (``compile(..., max_arena_bytes=N)``, ``--max-arena``).

A plan that does not fit raises ``PlanError`` saying by how much, where the peak is, what is
live there and what would fit: for each dynamic dim the largest size whose arena is within the
budget (the other dims at their upper bounds), the rewrites not asked for that lower the arena
(``Rewrite``: patches for a network with a high-resolution prefix, chunks for transformer
layers) with the arena each plans, and the optimal planner when the lower bound fits. The
remedies are written as options are where the error is read (``PYTHON``, ``COMMAND_LINE``).
One that fits has ``N - arena_bytes`` bytes of headroom. Every arena must also fit a 64-bit
signed size, budget or not.

Worked example: an arena of 96 B against a budget of 64 B is 32 B over; with a budget of 128 B
the headroom is 32 B. A plan whose arena is ``32 * seq`` B for seq in [2, 128], against a
budget of 1,000 B, fits at seq <= 31 (992 B).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tensorplan.errors import PlanError
from tensorplan.plan.peak import peak
from tensorplan.plan.plan import MemoryPlan
from tensorplan.plan.symbolic.dims import DimRange
from tensorplan.specs.spec import MAX_BYTES

_LISTED = 3  # values named in the error, largest first


@dataclass(frozen=True)
class Spelling:
    """How the remedies' options are written where the error is read."""

    patches: str  # the patches rewrite, "auto"
    chunks: str   # the chunks rewrite, "auto"
    optimal: str  # the optimal planner


PYTHON = Spelling('patches="auto"', 'chunks="auto"',
                  "algorithm='optimal' with a longer time_limit")
COMMAND_LINE = Spelling("--patches auto", "--chunks auto", "--algorithm optimal")


@dataclass(frozen=True)
class Rewrite:
    """A program rewrite not asked for, and the arena it plans (tensorplan's greedy)."""

    option: str       # "patches" or "chunks" (a field of ``Spelling``)
    arena_bytes: int  # the arena of the rewritten program


Rewrites = Callable[[], Sequence[Rewrite]]  # made only when the arena is over the budget


def check_arena(plan: MemoryPlan, max_arena_bytes: int | None = None,
                rewrites: Rewrites | None = None, spelling: Spelling = PYTHON) -> int | None:
    """The headroom ``max_arena_bytes - plan.arena_bytes`` (None without a budget).

    Raises ``PlanError`` when the arena is above the budget, naming how much, the peak step,
    the bytes live there, the largest values live there and what would fit (``rewrites()``
    gives the rewrites to suggest, written in ``spelling``), or when it does not fit 64 bits.

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
        found = () if rewrites is None else rewrites()
        raise PlanError(_over_budget(plan, max_arena_bytes, found, spelling))
    return headroom


def largest_fitting(plan: MemoryPlan, dim: DimRange, budget: int) -> int | None:
    """The largest size of ``dim`` whose arena (the other dims at their upper bounds) is within
    ``budget``, found by bisection (the arena grows with every dim in practice); None when even
    its lower bound is over."""
    if plan.arena_bytes_at(**{dim.name: dim.lower}) > budget:
        return None
    low, high = dim.lower, dim.upper  # arena(low) fits; the answer is in [low, high]
    while low < high:
        middle = (low + high + 1) // 2
        if plan.arena_bytes_at(**{dim.name: middle}) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def _dim_remedies(plan: MemoryPlan, budget: int) -> list[str]:
    """For each dynamic dim with a size that fits, the largest one and its arena."""
    found = []
    for dim in () if plan.symbolic is None else plan.symbolic.dims:
        size = largest_fitting(plan, dim, budget)
        if size is not None:
            arena = plan.arena_bytes_at(**{dim.name: size})
            found.append(f"at {dim.name} <= {size} the arena is {arena:,} B, within the "
                         f"budget: give {dim.name} max={size}")
    return found


def _rewrite_remedies(rewrites: Sequence[Rewrite], plan: MemoryPlan, budget: int,
                      spelling: Spelling) -> list[str]:
    """Each rewrite that lowers the arena, with what it plans, those that fit first."""
    lower = sorted((r for r in rewrites if r.arena_bytes < plan.arena_bytes),
                   key=lambda r: r.arena_bytes)
    return [f"{getattr(spelling, r.option)} plans {r.arena_bytes:,} B"
            f"{', within the budget' if r.arena_bytes <= budget else ' (still over)'}"
            for r in lower]


def _over_budget(plan: MemoryPlan, budget: int, rewrites: Sequence[Rewrite],
                 spelling: Spelling) -> str:
    top = peak(plan)
    largest = [plan.storages[s] for s in top.storages[:_LISTED]]
    live = ", ".join(f"{s.values[0]} {s.size:,} B" for s in largest) or "nothing"
    over = plan.arena_bytes - budget
    remedies = [*_dim_remedies(plan, budget),
                *_rewrite_remedies(rewrites, plan, budget, spelling)]
    if budget >= plan.lower_bound_bytes:
        bound = f"its lower bound of {plan.lower_bound_bytes:,} B fits: try {spelling.optimal}"
    else:
        bound = (f"no plan of this program as compiled fits: its lower bound is "
                 f"{plan.lower_bound_bytes:,} B")
        remedies = remedies or ["lower the batch or the input sizes, or split the model"]
    return (f"plan: the arena needs {plan.arena_bytes:,} B, {over:,} B over the budget of "
            f"{budget:,} B; the peak is at step {top.step}, {top.live_bytes:,} B live, the "
            f"largest there: {live}; {'; '.join([bound, *remedies])}")
