"""``PlannerParams``: every tuning constant of the planners and every pruning rule's switch.

One frozen dataclass, like MiniMalloc's ``SolverParams``: each planner reads what it needs from
the instance it is given (``plan_buffers(..., params=...)``,
``tp.compile(..., planner_params=...)``), so nothing is a module global. The defaults are the
measured ones; budgets are counted in search steps, so two runs with the same params give the
same plan (unless the wall clock, a safety net, runs out first).

>>> PlannerParams().steps_per_second, PlannerParams(dominance=False).dominance
(120000, False)
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from tensorplan.errors import PlanError

BRANCHING_KEYS = "WAT"  # letters of a branching order: Width, Area, section Total
# fields that divide or pace the search: 0 would stall it
POSITIVE = frozenset({"pass_chunk", "turn_steps", "race_turn_steps", "step_members",
                      "step_buffers"})


@dataclass(frozen=True)
class PlannerParams:
    """Knobs of every planner, with their defaults (see the module)."""

    # --- budgets of the search (algorithm="optimal" and "auto") ---
    optimal_seconds: float = 30.0  # budget of algorithm="optimal" when no time_limit is given
    auto_seconds: float = 1.0  # budget of algorithm="auto" for its first 1,000 buffers ...
    auto_seconds_per_1000: float = 1.0  # ... plus this much per further 1,000 buffers
    auto_max_seconds: float = 5.0  # ... and never more than this
    steps_per_second: int = 120_000  # search steps one second of budget buys (repeatable runs;
    # the search makes 115-175k a second on challenging_* here with the other core busy)

    # --- the greedy portfolio (greedy/portfolio.py) ---
    classic_order_limit: int = 1_000  # up to this many buffers greedy also runs the classic
    # orders (size, area, length, load) through the occupancy index, 60-100 us a buffer against
    # ~10 us for a peak sweep; above it only the sweeps run (greedy < ~0.5 s up to 10,000)
    wide_orders: tuple[str, ...] = ("length", "load")  # classic orders the search's greedy keeps
    # above the limit: they win on large traces ("load": pangu_2.6B, tiny_bert; "length":
    # iopddl_S_1), "size" and "area" never beat both there
    pass_chunk: int = 512  # buffers a portfolio pass places before the next pass takes its turn

    # --- squeaky-wheel repair (greedy/repair.py) ---
    repair_min_buffers: int = 1_000  # from this size: repair, then window probes (exact/windows.py)
    repair_share: float = 0.5  # most of the budget the first repair may take ...
    repair_patience: int = 1  # ... as it stops after this many passes without a better plan
    steps_per_placement: int = 10  # budget steps one best-fit placement costs (~80 us)

    # --- the capacity ladder (exact/optimal.py) ---
    turn_steps: int = 4096  # budget steps a probe of the ladder runs in one turn
    epoch_turns: int = 16  # turns the ladder stays put without news ...
    epoch_growth: int = 4  # ... twice as many after this many epochs

    # --- window probes (exact/windows.py) ---
    max_pairs: int = 2_000_000  # time-overlapping pairs above which a window is not searched

    # --- the branch and bound (exact/branch_and_bound.py) ---
    branching_orders: tuple[str, ...] = ("WAT", "TAW", "TWA")  # rank keys of the racing
    # searches, in priority: W lifetime width, A area, T section total
    race_turn_steps: int = 1024  # budget steps one racing search runs before the next one's turn
    step_members: int = 256  # section members scanned per budget step (plus one per placement)
    step_buffers: int = 16  # unplaced buffers scanned per budget step (plus one per node)

    # --- pruning rules of the branch and bound: each one off is still exact, only slower ---
    canonical_order: bool = True  # place buffers in nondecreasing offset (ties by rank)
    dominance: bool = True  # skip offsets some unplaced buffer would fit entirely below
    section_bounds: bool = True  # a section's level plus its unplaced size must fit the capacity
    decomposition: bool = True  # solve parts no unplaced buffer crosses one after the other

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.type == "bool" and not isinstance(value, bool):
                raise PlanError(f"PlannerParams.{field.name} must be True or False, "
                                f"got {value!r}")
            least = 1 if field.name in POSITIVE else 0
            if field.type in ("int", "float") and (
                    isinstance(value, bool) or not isinstance(value, (int, float))
                    or not value >= least):
                raise PlanError(f"PlannerParams.{field.name} must be a number >= {least}, "
                                f"got {value!r}")
        if not self.branching_orders or any(
                not order or set(order) - set(BRANCHING_KEYS) for order in self.branching_orders):
            raise PlanError(f"PlannerParams.branching_orders must be strings of the letters "
                            f"{BRANCHING_KEYS}, got {self.branching_orders!r}")
