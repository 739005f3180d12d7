"""Stage 4a'': a storage copied once between banks, when that lowers the traffic cost.

A storage read often early and rarely late (or the other way round) need not hold a fast bank
for its whole life: it can be written to the fast bank, read there, and copied to the slow one
before the steps where room is short (a spill), or written to the slow one and copied to the
fast one before its busy reads (a prefetch), as XLA's memory space assignment does. Each
storage still lives in one bank; the copy is a new storage in the other bank.

:func:`plan_moves` extends ``banks.assign``'s integer program: besides one option per bank,
an item whose accesses are known (``Item.accesses``) gets, at each gap between two accesses
and for each ordered pair of banks, an option that holds the source bank until the copy and
the target bank from the step before it (both are counted live across the copy), paying the
copy's read in the source bank and its write in the target. HiGHS picks one option per item.
Its dual bound is a bound for every assignment, with or without copies (the options without
a copy are among them).

Worked example: sram 1 KiB at cost 1, dram unbounded at cost 40; a 1 KiB value A written at
step 0, read ten times in steps 1-3 and once at step 9, and a 1 KiB value B written and read
ten times in steps 5-8. Without copies only one fits sram, and the other's 11 KiB moved cost
440. With A spilled after step 3 both use sram: the copy (1 KiB read at 1, written at 40) and
A's late read (40) cost 81 instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorplan.banks.choice import (
    Assignment,
    Bank,
    BankProblem,
    Item,
    Move,
    Option,
    check_capacity,
    constant_cost,
    found_assignment,
    solve_options,
    usable_capacities,
    whole_options,
)


def move_options(index: int, item: Item, banks: Sequence[Bank]) -> list[Option]:
    """The options of copying ``item`` once: at each gap between two of its accesses (the
    copy right after the first, or right before the second) and right after the start of each
    of its windows, within its windows, from each bank to each other."""
    if item.pinned is not None or not item.accesses:
        return []
    last = len(banks) - 1
    steps = sorted({step for step, _ in item.accesses})
    total = sum(nbytes for _, nbytes in item.accesses)
    gaps = {at for u, v in zip(steps, steps[1:], strict=False) for at in (u + 1, v)}
    gaps |= {lo + 1 for lo, _ in item.windows if steps[0] <= lo < steps[-1]}
    places = sorted(at for at in gaps if steps[0] < at <= steps[-1] and (
        not item.windows or any(lo < at <= hi for lo, hi in item.windows)))
    found = []
    for at in places:
        before = sum(nbytes for step, nbytes in item.accesses if step < at)
        after = total - before
        for source, a in enumerate(banks):
            for target, b in enumerate(banks):
                if source == target:
                    continue
                cost = before * a.cost + after * b.cost + item.size * (a.cost + b.cost)
                served = (before + item.size) * (source < last) + \
                    (after + item.size) * (target < last)
                pieces = ((source, item.start, at), (target, at - 1, item.end))
                found.append(Option(index, item.size, pieces, cost, float(served),
                                    Move(item.key, at, source, target)))
    return found


def plan_moves(all_items: Sequence[Item], problem: BankProblem) -> Assignment:
    """The bank of every item, and the items to copy once to another bank, minimising the
    traffic cost with every bounded bank's live bytes within its capacity (the arenas are not
    planned here: the caller inserts the copies, then plans with ``banks.assign`` and the
    banks chosen here as pins). ``bank_of`` gives a copied item's source bank. The cost bound
    holds for every assignment, with or without copies. Raises ``PlanError`` as
    ``banks.assign`` does."""
    check_capacity(all_items, problem)
    banks, time_limit = problem.banks, problem.time_limit
    capacities = usable_capacities(banks, problem.constants_in)
    fixed = constant_cost(problem)
    options = [o for i, it in enumerate(all_items)
               for o in whole_options(i, it, banks) + move_options(i, it, banks)]
    solved = solve_options(len(all_items), options, banks, capacities, "cost", time_limit)
    found_assignment(solved, all_items, banks, time_limit)
    served = solve_options(len(all_items), options, banks, capacities, "served", time_limit)
    cost = fixed + sum(o.cost for o in solved.chosen)
    return Assignment({it.key: o.pieces[0][0] for it, o in zip(all_items, solved.chosen,
                                                                strict=True)},
                      cost, min(cost, fixed + solved.bound), int(-served.bound),
                      tuple(o.move for o in solved.chosen if o.move is not None))
