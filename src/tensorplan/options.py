"""``tp.CompileOptions``: everything ``tp.compile`` is asked to do, in one frozen object.

``tp.compile`` builds it once from its keywords (or takes it whole, ``options=``), keeps it on
the ``Program`` (``prog.options``; saved and loaded with it) and hands each stage its own
group: the rewrites, the schedule's switches, the banks, the planning stage's options. The
command line builds the same object.

>>> options = CompileOptions.of(chunks="auto", reuse=False, algorithm="greedy")
>>> options.rewrite.chunks, options.schedule.reuse, options.plan.algorithm
('auto', False, 'greedy')
>>> CompileOptions.of() == CompileOptions()
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tensorplan.banks.choice import Bank, BankOptions
from tensorplan.errors import InputError
from tensorplan.plan.plan import PlanOptions
from tensorplan.plan.planners import PlannerParams
from tensorplan.rewrite.options import MAX_PATCH_OVERHEAD, RewriteOptions
from tensorplan.schedule.schedule import ScheduleOptions


@dataclass(frozen=True)
class CompileOptions:
    """How a program is compiled, grouped as the stages read them (a comment per field in
    each group's own class)."""

    rewrite: RewriteOptions = RewriteOptions()     # patches and chunks tried before planning
    schedule: ScheduleOptions = ScheduleOptions()  # in-place reuse, node order, folding
    banks: BankOptions = BankOptions()             # memory banks and pins (default: one arena)
    plan: PlanOptions = PlanOptions()              # planner, alignment, budget, inputs' place

    @classmethod
    def of(cls, *, algorithm: str = "auto", alignment: int = 16,
           time_limit: float | None = None, reuse: bool = True, reorder: bool = True,
           fold: bool = True, planner_params: PlannerParams | None = None,
           max_arena_bytes: int | None = None, patches: str | tuple[int, int] | None = None,
           max_overhead: float = MAX_PATCH_OVERHEAD, chunks: str | int | None = None,
           banks: Sequence[Bank] | None = None, pin: Mapping[str, str] | None = None,
           constants_bank: str | None = None, inputs_in_arena: bool = True
           ) -> CompileOptions:
        """The options ``tp.compile``'s keywords of the same names ask for (see there)."""
        return cls(
            RewriteOptions(patches, max_overhead, chunks),
            ScheduleOptions(reuse, reorder, fold),
            BankOptions(None if banks is None else tuple(banks), tuple((pin or {}).items()),
                        constants_bank),
            PlanOptions(algorithm, alignment, time_limit,
                        PlannerParams() if planner_params is None else planner_params,
                        inputs_in_arena, max_arena_bytes))


def chosen_options(keywords: CompileOptions, options: CompileOptions | None,
                   caller: str) -> CompileOptions:
    """The options a call runs with: ``options`` when given (the call's keywords, made into
    ``keywords``, then at their defaults), else ``keywords``. Raises ``InputError`` naming
    ``caller`` when both are given."""
    if options is None:
        return keywords
    if keywords != CompileOptions():
        raise InputError(f"{caller}: give the options either as keywords or as options=, not "
                         "both (dataclasses.replace the object to change a field)")
    return options
