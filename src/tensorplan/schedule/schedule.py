"""Stage 3 driver: lower the bound itself — folded constants, a node order, in-place reuse.

Given a program's specs and roles, ``schedule`` decides (each step can be switched off):

1. **fold** (``fold.py``): values computed from constants alone become constants, unless that
   grows arena + constants in total; a kept value whose constant costs more than it saves
   (a float mask made from a boolean one, a table not live at the peak) is left to run, its
   sources folded in its place;
2. **order** (``order.py``): each candidate order is taken with its own in-place reuse (which
   depends on the order) and planned greedily; the smallest arena wins, the exported order on
   a tie;
3. **reuse** (``reuse.py``): outputs written over arguments that die where they are read;
   then **concatenation in place** (``concat.py``): inputs of a ``cat`` made in its slices.

It also measures the *baseline*: today's bound, the exported order with one storage per value
and no folding, which ``MemoryPlan.baseline_bound_bytes`` reports beside the new bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.export import ExportedProgram

from tensorplan.analysis.alias import AliasTable, analyze
from tensorplan.analysis.liveness import lifetimes
from tensorplan.frontend.roles import Roles
from tensorplan.plan.plan import MemoryPlan, PlanOptions, draft_plan
from tensorplan.schedule.concat import concat_in_place
from tensorplan.schedule.fold import (
    NOTHING_FOLDED,
    Folded,
    constant_bytes,
    constant_tensors,
    fold_constants,
)
from tensorplan.schedule.order import Order, candidate_orders, exported_order
from tensorplan.schedule.reuse import Reuse, reuse_storages
from tensorplan.specs.spec import SpecTable


@dataclass(frozen=True)
class ScheduleOptions:
    """Which of the bound-lowering steps run (``compile(reuse=, reorder=, fold=)``)."""

    reuse: bool = True    # outputs take over the storage of arguments that die there
    reorder: bool = True  # pick the node order from a portfolio
    fold: bool = True     # compute values of constants at compile time


@dataclass(frozen=True)
class Schedule:
    """What the stage decided, and the figures it started from."""

    alias: AliasTable                # storages after in-place reuse
    order: Order                     # top-level node names in run order
    order_name: str                  # exported | memory-greedy | depth-first
    reuse: bool                      # in-place reuse ran (``reuses`` says what it found)
    reuses: tuple[Reuse, ...]        # outputs written over a dying argument
    folded: Folded                   # values computed at compile time
    baseline_bound_bytes: int = 0    # bound of the exported order, one storage per value
    constant_bytes: int = 0          # bytes of the constants the runs read
    baseline_constant_bytes: int = 0  # bytes of the program's constants before folding


def _plan(program: ExportedProgram, alias: AliasTable, order: Order | None,
          draft: PlanOptions) -> MemoryPlan:
    return draft_plan(lifetimes(program, alias, order), alias, draft)


Choice = tuple[Folded, AliasTable, int]  # what is folded, its alias table, constant bytes read

# Most kept values tried left unfolded, one compile each: enough for masks, rotary tables and
# position biases, bounded on a model with many foldable values.
MAX_UNFOLD_TRIALS = 24
MIN_UNFOLD_BYTES = 64  # a smaller kept value (a scalar) is not worth a trial


class _Trials:
    """Reuse along an order, and its greedy plan, each made once per (alias table, order):
    the folding trials and the order trials meet on the exported order of the folding kept."""

    def __init__(self, program: ExportedProgram, specs: SpecTable, reuse: bool,
                 draft: PlanOptions) -> None:
        self.program, self.specs, self.reuse, self.draft = program, specs, reuse, draft
        self._made: dict[tuple[int, tuple[str, ...]],
                         tuple[AliasTable, tuple[AliasTable, tuple[Reuse, ...]], MemoryPlan]] = {}

    def reused(self, alias: AliasTable, order: Order
               ) -> tuple[AliasTable, tuple[Reuse, ...], MemoryPlan]:
        """``_reuse`` of ``alias`` along ``order``, and the greedy plan of what it gives."""
        key = (id(alias), tuple(order))
        if key not in self._made or self._made[key][0] is not alias:  # an id used again
            table, reuses = _reuse(self.program, self.specs, alias, order, self.reuse,
                                   self.draft)
            plan = _plan(self.program, table, order, self.draft)
            self._made[key] = (alias, (table, reuses), plan)
        _, (table, reuses), plan = self._made[key]
        return table, reuses, plan


def _folding(program: ExportedProgram, specs: SpecTable, roles: Roles, fold: bool,
             trials: _Trials) -> list[Choice]:
    """The folding choices to compare: none, and (when asked and anything folds) the folded
    program with as few values left unfolded as lowers arena + constants; each with its alias
    table and the bytes of the constants its runs read."""
    constants = constant_tensors(program, roles)
    choices = [(NOTHING_FOLDED, analyze(program, specs, roles), constant_bytes(constants))]
    users = {node.name: node.users for node in program.graph.nodes}

    def choice(unfolded: frozenset[str]) -> Choice:
        folded = fold_constants(program, specs, roles, unfolded)
        still_read = {name: t for name, t in constants.items()
                      if any(u.name not in folded.computed for u in users[name])}
        return (folded, analyze(program, specs, roles, folded.computed),
                constant_bytes({**still_read, **folded.kept}))

    order = exported_order(program.graph)

    def cost(made: Choice) -> tuple[int, int]:
        arena = trials.reused(made[1], order)[2].arena_bytes
        return arena + made[2], arena

    folded = choice(frozenset()) if fold else choices[0]
    if folded[0].computed:
        choices.append(_fewer_folds(folded, choice, cost))
    return choices


def _fewer_folds(first: Choice, choice: Callable[[frozenset[str]], Choice],
                 cost: Callable[[Choice], tuple[int, int]]) -> Choice:
    """``first`` with kept values left unfolded, largest first, one at a time, while that
    lowers (arena + constants, arena) of the exported order: a float mask computed from a
    boolean one costs 4x its source as a constant, a table read long after the peak costs its
    bytes for nothing. A value left unfolded leaves its sources folded: the cut moves up to
    them. Values kept as one tensor (equal per-layer masks) are left unfolded together."""
    best, best_cost, tried = first, cost(first), set()
    while len(tried) < MAX_UNFOLD_TRIALS:
        kept = [name for name, value in best[0].kept.items()
                if name not in tried and _nbytes(value) >= MIN_UNFOLD_BYTES]
        if not kept:
            break
        name = max(kept, key=lambda n: _nbytes(best[0].kept[n]))
        same = {n for n, value in best[0].kept.items() if value is best[0].kept[name]}
        tried.update(same)  # equal values are kept once: they are left unfolded together
        candidate = choice(best[0].unfolded | same)
        candidate_cost = cost(candidate)
        if candidate_cost < best_cost:
            best, best_cost = candidate, candidate_cost
    return best


def _nbytes(value: object) -> int:
    return value.nbytes if isinstance(value, torch.Tensor) else 0


def _reuse(program: ExportedProgram, specs: SpecTable, alias: AliasTable, order: Order,
           reuse: bool, plan: PlanOptions) -> tuple[AliasTable, tuple[Reuse, ...]]:
    """In-place reuse, then concatenation in place (judged with the user inputs counted as
    ``plan`` counts them), along ``order`` (both off without ``reuse``)."""
    if not reuse:
        return alias, ()
    reused, reuses = reuse_storages(program, specs, alias, order)
    return concat_in_place(program, specs, reused, order,
                           inputs_in_arena=plan.inputs_in_arena), reuses


@dataclass(frozen=True)
class Decided:
    """A schedule's choices, as a saved program keeps them for ``replay``."""

    order: tuple[str, ...] | None  # top-level node names in run order (None: graph order)
    order_name: str                # exported | memory-greedy | depth-first
    reuse: bool                    # in-place reuse ran
    fold: bool                     # constants were folded
    unfolded: frozenset[str] = frozenset()  # foldable nodes left to run


def replay(program: ExportedProgram, specs: SpecTable, roles: Roles,
           decided: Decided, plan: PlanOptions) -> Schedule:
    """A schedule decided before (a saved program), made again: fold when ``decided.fold``
    (all but its ``unfolded``), then reuse along its order when ``decided.reuse`` (with the
    user inputs counted as the program's ``plan`` counts them).
    Deterministic; plans nothing (the baseline and constant figures are left at 0)."""
    folded = fold_constants(program, specs, roles, decided.unfolded) if decided.fold \
        else NOTHING_FOLDED
    alias = analyze(program, specs, roles, folded.computed)
    order = decided.order if decided.order is not None else exported_order(program.graph)
    reused, reuses = _reuse(program, specs, alias, order, decided.reuse, plan)
    return Schedule(reused, order, decided.order_name, decided.reuse, reuses, folded)


def schedule(program: ExportedProgram, specs: SpecTable, roles: Roles,
             options: ScheduleOptions, plan: PlanOptions) -> Schedule:
    """Fold, order and reuse ``program`` so that its planned arena is as small as this stage
    can make it; never larger than the exported order's greedy plan, and folding only where
    it does not grow constants + arena in total. The arena is counted as ``plan`` (the
    options of the plan that follows) will count it: greedy at its alignment, the user inputs
    in it or not (``PlanOptions.drafted``).

    Pure: reads the program, its specs and roles; returns new tables.
    """
    draft = plan.drafted()
    trials = _Trials(program, specs, options.reuse, draft)
    choices = _folding(program, specs, roles, options.fold, trials)
    baseline = choices[0][1]
    baseline_bound = _plan(program, baseline, None, draft).lower_bound_bytes
    exported = {"exported": exported_order(program.graph)}
    best = None
    for folded, alias, constants in choices:
        orders = candidate_orders(program.graph, alias) if options.reorder else exported
        for name, order in orders.items():
            reused, reuses, plan = trials.reused(alias, order)
            key = (plan.arena_bytes + constants, plan.arena_bytes, plan.lower_bound_bytes)
            if best is None or key < best[0]:
                best = (key, Schedule(reused, order, name, options.reuse, reuses, folded,
                                      baseline_bound, constants, choices[0][2]))
    return best[1]
