"""Stage 4a': which memory bank each storage lives in (``compile(..., banks=[...])``).

A device has a small fast memory and a large slow one. Each top-level storage (and each
control-flow region, with the subgraph storages inside it) lives in one bank; each bank is
then planned as its own arena (``plan.py``). The choice is an optimisation:

- the *traffic* of a storage is the bytes its producers write plus the bytes each reader reads
  (from the program's ops and the values' sizes; a view is read through its base, a user input
  is written once when it is copied in);
- the *cost* of an assignment is the sum over storages of traffic x the cost of its bank;
- it is minimised subject to every bounded bank's live bytes staying within its capacity at
  every step: an integer program (HiGHS, through ``scipy.optimize.milp``) whose variables say
  which bank holds each storage; its constraints are one per bounded bank and step at which a
  storage starts (the live bytes only grow there). A bank whose planned arena comes out above
  its capacity (fragmentation: the planners reach the live-bytes bound almost always) is solved
  again with the capacity lowered by the excess.

``moves.py`` adds to the same program the option of copying a value once to another bank
(the ``.pte`` path inserts those copies).

Each plan says how far it is from the best possible: HiGHS's proven dual bound on that integer
program (at least as tight as its fractional relaxation, where a storage may be split between
banks, which the search starts from; equal to the solution when it is proven optimal) bounds
the cost of every assignment that fits, since an assignment fits only if its live bytes do;
a second solve, maximising the traffic outside the slowest bank, bounds the traffic any
assignment serves from the faster banks.

Pins (``pin={"b_k_cache": "dram"}``: inputs, outputs, state, any value by name; a view pins
its base) fix a storage's bank. Constants are not in an arena; they are read from
``constants_bank`` (the slowest by default), whose capacity they take their bytes from and whose
cost their reads pay.

Worked example: two banks, ``sram`` of 1 KiB at cost 1 and ``dram`` unbounded at cost 40; a 1 KiB
buffer read ten times and a 1 KiB buffer read once, live together: the first goes to ``sram``.
Largest-first (ExecuTorch's ``banked_greedy``) takes whichever comes first in its size order.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import torch
import torch.fx
from torch.export import ExportedProgram

from tensorplan.analysis.alias import AliasTable
from tensorplan.analysis.liveness import GraphLifetimes
from tensorplan.errors import InputError, PlanError
from tensorplan.ops.control_flow import graph_modules
from tensorplan.ops.schemas import is_view
from tensorplan.schedule.fold import Folded
from tensorplan.specs.spec import SpecTable, TensorSpec

MAX_RESOLVES = 8  # capacity tightenings tried when a bank's planned arena exceeds it
DEFAULT_TIME_LIMIT = 10.0  # seconds for the integer program (its best assignment is kept)


@dataclass(frozen=True)
class Bank:
    """One memory: a name, its capacity in bytes (None: unbounded) and the relative price of
    one byte moved to or from it. Banks are given fastest first."""

    name: str
    capacity: int | None = None
    cost: float = 1.0


class Scheduled(Protocol):
    """What the bank choice reads of the schedule stage's result (``schedule.Schedule``)."""

    @property
    def alias(self) -> AliasTable: ...      # the storages, after in-place reuse
    @property
    def folded(self) -> Folded: ...         # the values computed at compile time
    @property
    def constant_bytes(self) -> int: ...    # bytes of the constants the runs read


@dataclass(frozen=True)
class BankOptions:
    """The memories a compile places its storages in (``compile(banks=, pin=,
    constants_bank=)``); the defaults plan one arena."""

    banks: tuple[Bank, ...] | None = None  # memories fastest first; None: one arena
    pin: tuple[tuple[str, str], ...] = ()  # (value name, bank name): a value kept in a bank
    constants_bank: str | None = None      # the bank constants are read from (None: slowest)


@dataclass(frozen=True)
class BankProblem:
    """What a bank choice is solved over besides its items: the banks, the schedule's steps,
    the constants' bytes in each bank, and the solver's time."""

    banks: tuple[Bank, ...]             # fastest first
    steps: int                          # steps of the top-level schedule
    step_names: tuple[str, ...]         # the node at each step (named in errors)
    constant_reads: Mapping[int, int]   # bank index -> bytes of constants read from it per run
    constants_in: tuple[int, ...]       # bank index -> bytes of constants it holds
    time_limit: float = DEFAULT_TIME_LIMIT  # seconds each integer program may take


@dataclass(frozen=True)
class Item:
    """One thing a bank holds: a top-level storage, or a control-flow region."""

    key: int | str     # storage id, or the region's control-flow node
    size: int          # aligned bytes
    start: int         # first top-level step live
    end: int           # first top-level step no longer live
    traffic: int       # bytes written plus bytes read
    pinned: int | None = None  # bank index, when pinned
    accesses: tuple[tuple[int, int], ...] = ()  # (step, bytes) of each access, when the
    #                                             item may be copied to another bank once
    windows: tuple[tuple[int, int], ...] = ()  # a copy may go right before any step in one
    #                                             of these (after, until]; none: anywhere


@dataclass(frozen=True)
class Move:
    """An item copied once from one bank to another: accesses before step ``at`` use
    ``source``, the copy runs right before ``at``, accesses from ``at`` on use ``target``."""

    key: int | str
    at: int
    source: int
    target: int


@dataclass(frozen=True)
class Assignment:
    """The bank of every item, with the figures that judge it."""

    bank_of: Mapping[int | str, int]  # item key -> bank index
    cost: float                       # sum of traffic x bank cost (constants' reads included)
    cost_bound: float                 # no assignment that fits costs less (proven)
    served_bound: int                 # no assignment serves more traffic outside the last
    #                                   bank (proven)
    moves: tuple[Move, ...] = ()      # items copied once to another bank (moves.py)


@dataclass(frozen=True)
class BankRequest:
    """What ``compile(banks=...)`` asks of the planning stage."""

    banks: tuple[Bank, ...]
    pins: Mapping[int | str, int]         # storage id (or region node) -> bank index
    traffic: Mapping[int, int]            # storage id -> bytes moved per run
    constant_reads: Mapping[int, int]     # bank index -> bytes of constants read from it
    constants_in: tuple[int, ...]         # bank index -> bytes of constants it holds
    step_names: tuple[str, ...]           # the top-level node at each step
    time_limit: float


def bank_request(program: ExportedProgram, specs: SpecTable, chosen: Scheduled,
                 step_names: Sequence[str], options: BankOptions,
                 time_limit: float | None) -> BankRequest:
    """What the planning stage needs to assign banks: the banks checked, each pin turned into
    its storage (a view: its base; a constant: where its bytes are read from), the traffic of
    the ``chosen`` schedule's storages and constants.

    Raises ``InputError`` for a bank list that is not valid, or a pin naming no value or no
    bank, or a value inside a control-flow subgraph (pin its control-flow node's operands).
    """
    if options.banks is None:
        raise InputError("banks: pin= and constants_bank= need banks=[tp.Bank(...), ...] "
                         "(on the command line: --pin and --constants-bank need --bank)")
    banks, alias = check_banks(options.banks), chosen.alias
    moved, reads = traffic(program, specs, alias, chosen.folded.computed)
    default = len(banks) - 1 if options.constants_bank is None else \
        bank_index(banks, options.constants_bank, "constants_bank")
    constant_bank = dict.fromkeys(reads, default)
    pins: dict[int | str, int] = {}
    for value, name in options.pin:
        where = bank_index(banks, name, f"the pin of {value!r}")
        spec = specs.spec_of(value)
        if spec is not None and spec.const:
            constant_bank[value] = where
            continue
        ids = alias.storage_ids(value) if value in alias.storage_of else ()
        if not ids or alias.storages[ids[0]].graph:
            inputs = [s.arg.name for s in program.graph_signature.input_specs
                      if s.kind.name in ("USER_INPUT", "BUFFER")]
            raise InputError(f"banks: cannot pin {value!r}: it is not a value of the top-level "
                             "graph with a storage; pin an input or buffer "
                             f"({', '.join(inputs)}), a constant, or any computed value by its "
                             "node name")
        pins[ids[0]] = where
    read_from = [0] * len(banks)
    held = [0] * len(banks)
    for value, where in constant_bank.items():
        read_from[where] += reads[value]
        if where != default:
            held[where] += specs.spec_of(value).nbytes
    held[default] += max(chosen.constant_bytes - sum(held), 0)
    return BankRequest(banks, pins, moved, dict(enumerate(read_from)), tuple(held),
                       tuple(step_names), DEFAULT_TIME_LIMIT if time_limit is None else time_limit)


def check_banks(banks: Sequence[Bank]) -> tuple[Bank, ...]:
    """The banks, validated: at least one, unique names, capacities >= 0, costs > 0 and not
    decreasing (fastest first). Raises ``InputError`` naming what is wrong."""
    banks = tuple(banks)
    if not banks or not all(isinstance(b, Bank) for b in banks):
        raise InputError("banks: expected a non-empty list of tensorplan.Bank, fastest first, "
                         f"got {banks!r}")
    names = [b.name for b in banks]
    if len(set(names)) != len(names):
        raise InputError(f"banks: names must be unique, got {names}")
    for bank in banks:
        if bank.capacity is not None and (not isinstance(bank.capacity, int) or bank.capacity < 0):
            raise InputError(f"banks: {bank.name!r} has capacity {bank.capacity!r}; give bytes "
                             "(an int >= 0) or None for an unbounded bank")
        if not bank.cost > 0 or math.isinf(bank.cost):
            raise InputError(f"banks: {bank.name!r} has cost {bank.cost!r}; give a finite cost "
                             "> 0 (the relative price of one byte moved)")
    costs = [b.cost for b in banks]
    if costs != sorted(costs):
        raise InputError(f"banks: give the banks fastest first (costs not decreasing), got "
                         f"{', '.join(f'{b.name}={b.cost}' for b in banks)}")
    return tuple(replace(b, cost=float(b.cost)) for b in banks)


def bank_index(banks: Sequence[Bank], name: str, what: str) -> int:
    """The index of the bank called ``name``; ``InputError`` naming ``what`` asked for it."""
    for i, bank in enumerate(banks):
        if bank.name == name:
            return i
    raise InputError(f"banks: {what} names bank {name!r}, which is not one of "
                     f"{[b.name for b in banks]}")


def _entries(entry: object) -> tuple[TensorSpec | None, ...]:
    items = entry if isinstance(entry, tuple) else (entry,)
    return tuple(s if isinstance(s, TensorSpec) else None for s in items)


def _base(node: torch.fx.Node) -> torch.fx.Node:
    """The node a chain of views starts from (a view is read through its base)."""
    while node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
            and is_view(node.target) and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node


def traffic(program: ExportedProgram, specs: SpecTable, alias: AliasTable,
            folded: frozenset[str] = frozenset()) -> tuple[dict[int, int], dict[str, int]]:
    """Bytes moved per storage (written by its producers, read by its readers, a view read
    through its base, a user input written when copied in) and bytes read per constant, over
    every graph; folded nodes do not run."""
    per_storage: dict[int, int] = {}
    per_constant: dict[str, int] = {}

    def touch(value: str, nbytes: int) -> None:
        ids = alias.storage_ids(value) if value in alias.storage_of else ()
        if ids and ids[0] is not None:
            per_storage[ids[0]] = per_storage.get(ids[0], 0) + nbytes
        else:  # a constant, or a view of one (a weight's transpose)
            per_constant[value] = per_constant.get(value, 0) + nbytes

    for module, prefix in graph_modules(program.graph_module):
        for node in module.graph.nodes:
            name = prefix + node.name
            if name in folded or node.op not in ("placeholder", "call_function"):
                continue
            if node.op == "placeholder":
                spec = specs.spec_of(name)
                if not prefix and spec is not None and not spec.const:
                    touch(name, spec.nbytes)
                continue
            if node.target is operator.getitem:
                continue
            if isinstance(node.target, torch._ops.OpOverload) and is_view(node.target):
                continue
            for i, spec in enumerate(_entries(specs.get(name))):
                if spec is not None:
                    ids = alias.storage_ids(name)
                    if i < len(ids):
                        per_storage[ids[i]] = per_storage.get(ids[i], 0) + spec.nbytes
            for arg in node.all_input_nodes:
                spec = specs.spec_of(prefix + arg.name)
                if spec is not None:
                    touch(prefix + _base(arg).name, spec.nbytes)
    return per_storage, per_constant


def items(top: GraphLifetimes, alias: AliasTable, moved: Mapping[int, int],
          region_sizes: Sequence[int], alignment: int) -> list[Item]:
    """The top-level storages and regions as items (unpinned), with their traffic; a region
    carries the traffic of every subgraph storage inside it."""
    def aligned(n: int) -> int:
        return -(-n // alignment) * alignment

    found = [Item(lt.storage, aligned(alias.storages[lt.storage].nbytes), lt.start, lt.end,
                  moved.get(lt.storage, 0)) for lt in top.lifetimes]
    for region, size in zip(top.regions, region_sizes, strict=True):
        inside = sum(t for sid, t in moved.items()
                     if any(alias.storages[sid].graph.startswith(sub) for sub in region.subgraphs))
        found.append(Item(region.node, aligned(size), region.step, region.step + 1, inside))
    return found


def _load(chosen: Sequence[Item], steps: int) -> list[int]:
    load = [0] * (steps + 1)
    for item in chosen:
        for t in range(item.start, item.end):
            load[t] += item.size
    return load


def _read_elsewhere(banks: Sequence[Bank], full: int, constant_bytes: int) -> str:
    """How to read the constants from another bank than ``full``: from the first that holds
    ``constant_bytes``, in Python and on the command line."""
    room = [b.name for i, b in enumerate(banks)
            if i != full and (b.capacity is None or b.capacity >= constant_bytes)]
    if not room:
        return "add a bank that holds them"
    return (f"read them from {room[0]!r}: constants_bank={room[0]!r} "
            f"(--constants-bank {room[0]} on the command line)")


def constant_cost(problem: BankProblem) -> float:
    """The cost of reading the constants from the banks they are in, the same for every
    assignment."""
    return sum(problem.constant_reads.get(i, 0) * b.cost for i, b in enumerate(problem.banks))


def check_capacity(all_items: Sequence[Item], problem: BankProblem) -> None:
    """Raise ``PlanError`` when no assignment can fit: all banks bounded and more bytes live
    at one step than they hold together, or a bank's pins alone above its capacity."""
    banks, steps, step_names = problem.banks, problem.steps, problem.step_names
    constants_in = problem.constants_in
    usable = [None if b.capacity is None else b.capacity - constants_in[i]
              for i, b in enumerate(banks)]
    for i, bank in enumerate(banks):
        if usable[i] is not None and usable[i] < 0:
            raise PlanError(f"banks: the constants read from {bank.name!r} take "
                            f"{constants_in[i]} B of its {bank.capacity} B; give it more "
                            f"capacity or {_read_elsewhere(banks, i, constants_in[i])}")
        pinned = [it for it in all_items if it.pinned == i]
        _check_steps(_load(pinned, steps), usable[i], step_names,
                     f"the values pinned to {bank.name!r}", f"its {usable[i]} B")
    largest = max(usable, key=lambda u: math.inf if u is None else u, default=None)
    for item in all_items:
        if largest is not None and item.size > largest:
            raise PlanError(f"banks: storage {item.key!r} ({item.size} B, live from step "
                            f"{item.start}, {step_names[item.start]!r}) is larger than every "
                            f"bank (the largest holds {largest} B); no assignment fits: give "
                            "a bank more capacity (or add an unbounded bank)")
    if all(u is not None for u in usable):
        _check_steps(_load(all_items, steps), sum(usable), step_names, "the live values",
                     f"the {sum(usable)} B of all banks together")


def _check_steps(load: Sequence[int], capacity: int | None, step_names: Sequence[str],
                 what: str, room: str) -> None:
    if capacity is None:
        return
    step = max(range(len(load)), key=load.__getitem__, default=0)
    if load and load[step] > capacity:
        node = step_names[step] if step < len(step_names) else "the end"
        raise PlanError(f"banks: at step {step} ({node!r}) {what} take {load[step]} B, above "
                        f"{room}; no assignment fits: give the banks more capacity "
                        "(or an unbounded bank)")


@dataclass(frozen=True)
class Option:
    """One way to hold an item: the pieces ``(bank, first step, end step)`` it takes room in,
    its cost, the traffic it serves outside the last bank, and its copy (None: one bank)."""

    item: int                                # index of the item
    size: int                                # its aligned bytes
    pieces: tuple[tuple[int, int, int], ...]
    cost: float
    served: float
    move: Move | None = None


def whole_options(index: int, item: Item, banks: Sequence[Bank]) -> list[Option]:
    """The item held in one bank for its whole life: one option per bank it may use."""
    last = len(banks) - 1
    allowed = range(len(banks)) if item.pinned is None else (item.pinned,)
    return [Option(index, item.size, ((j, item.start, item.end),), item.traffic * banks[j].cost,
                   float(item.traffic) if j < last else 0.0) for j in allowed]


@dataclass(frozen=True)
class Solved:
    """One solve: the option chosen per item (None: none found) and the proven bound on the
    objective (HiGHS's dual bound: no choice among the options does better)."""

    chosen: list[Option] | None
    bound: float
    infeasible: bool = False  # proven: no choice meets the capacities


def solve_options(n: int, options: Sequence[Option], banks: Sequence[Bank],
                  capacities: Sequence[int | None], objective: str,
                  time_limit: float) -> Solved:
    """One option per item minimising cost (or maximising the traffic served outside the last
    bank, as a negative), subject to every bounded bank's live bytes within its capacity at
    every step one of its pieces starts (the live bytes only grow there)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    if n == 0:
        return Solved([], 0.0)
    m = len(options)
    c = np.array([o.cost if objective == "cost" else -o.served for o in options], dtype=float)
    starts = {j: sorted({s for o in options for b, s, _ in o.pieces if b == j})
              for j, cap in enumerate(capacities) if cap is not None}
    first_row = {}
    rows_used = n
    for j, points in starts.items():
        first_row[j] = rows_used
        rows_used += len(points)
    # one row per item (one option each), then one per bounded bank and start step
    row, col, val = [o.item for o in options], list(range(m)), [1.0] * m
    for i, option in enumerate(options):
        for j, start, end in option.pieces:
            if j not in starts:
                continue
            first, last = bisect_left(starts[j], start), bisect_left(starts[j], end)
            row += [first_row[j] + s for s in range(first, last)]
            col += [i] * (last - first)
            val += [float(option.size)] * (last - first)
    rows = coo_matrix((val, (row, col)), shape=(rows_used, m))
    row_upper = [float(capacities[j]) for j, points in starts.items() for _ in points]
    lo = np.concatenate([np.ones(n), np.full(len(row_upper), -np.inf)])
    hi = np.concatenate([np.ones(n), np.array(row_upper)])
    result = milp(c, constraints=LinearConstraint(rows.tocsr(), lo, hi),
                  integrality=np.ones(m), bounds=Bounds(np.zeros(m), np.ones(m)),
                  options={"time_limit": time_limit, "disp": False})
    if result.status == 2:  # proven infeasible
        return Solved(None, math.inf, True)
    bound = getattr(result, "mip_dual_bound", None)
    bound = float(result.fun if bound is None or math.isnan(bound) else bound) \
        if result.x is not None else -math.inf
    if result.x is None:
        return Solved(None, bound)
    best: dict[int, tuple[float, Option]] = {}
    for option, x in zip(options, result.x, strict=True):
        if option.item not in best or x > best[option.item][0]:
            best[option.item] = (float(x), option)
    return Solved([best[i][1] for i in range(n)], bound)


def assign(all_items: Sequence[Item], problem: BankProblem,
           arena_of: Callable[[Sequence[Item]], int]) -> Assignment:
    """The bank of every item minimising the traffic cost with every bank's planned arena
    within its capacity (``arena_of(items) -> bytes`` plans one bank's items), and the bounds.

    ``problem.constant_reads``: bytes read from each bank's constants (their cost is added);
    ``problem.constants_in``: bytes of constants held in each bank (taken from its capacity).
    Raises ``PlanError`` naming the step and the bytes when no assignment can fit.
    """
    banks, time_limit = problem.banks, problem.time_limit
    check_capacity(all_items, problem)
    capacities = usable_capacities(banks, problem.constants_in)
    fixed = constant_cost(problem)
    options = [o for i, it in enumerate(all_items) for o in whole_options(i, it, banks)]
    first = solve_options(len(all_items), options, banks, capacities, "cost", time_limit)
    found_assignment(first, all_items, banks, time_limit)
    cost_bound = fixed + first.bound
    served_bound = int(-solve_options(len(all_items), options, banks, capacities, "served",
                                      time_limit).bound)
    solved = first
    for _ in range(MAX_RESOLVES):
        if solved.chosen is None:
            break
        bank_of = {it.key: o.pieces[0][0] for it, o in zip(all_items, solved.chosen, strict=True)}
        over = _overflows(all_items, banks, capacities, bank_of, arena_of)
        if not over:
            cost = fixed + sum(o.cost for o in solved.chosen)
            return Assignment(bank_of, cost, min(cost_bound, cost), served_bound)
        for j, excess in over.items():
            capacities[j] -= excess
        solved = solve_options(len(all_items), options, banks, capacities, "cost", time_limit)
    raise PlanError(f"banks: no assignment of the {len(all_items)} storages found whose "
                    "planned arenas fit the capacities "
                    f"{[(b.name, b.capacity) for b in banks]} (the live bytes fit, the "
                    "packing does not); give the fast banks a little more capacity, or add an "
                    "unbounded bank — please report this with the program")


def usable_capacities(banks: Sequence[Bank], constants_in: Sequence[int]) -> list[int | None]:
    """Each bank's room for the arena: its capacity less the constants it holds (None:
    unbounded)."""
    return [None if b.capacity is None else b.capacity - constants_in[i]
            for i, b in enumerate(banks)]


def found_assignment(solved: Solved, all_items: Sequence[Item], banks: Sequence[Bank],
           time_limit: float) -> None:
    """Raise ``PlanError`` when a solve found no assignment (and say whether none exists)."""
    if solved.chosen is None:
        why = "proven: the live bytes cannot be split among the banks at some step" \
            if solved.infeasible else f"none found in {time_limit:g} s"
        raise PlanError(f"banks: no assignment of the {len(all_items)} storages fits the "
                        f"capacities {[(b.name, b.capacity) for b in banks]} ({why}); give "
                        "the banks more capacity")


def _overflows(all_items: Sequence[Item], banks: Sequence[Bank],
               capacities: Sequence[int | None], bank_of: Mapping[int | str, int],
               arena_of: object) -> dict[int, int]:
    """Bank index -> bytes its planned arena exceeds its capacity by (empty: all fit)."""
    over = {}
    for j, capacity in enumerate(capacities):
        if capacity is None:
            continue
        arena = arena_of([it for it in all_items if bank_of[it.key] == j])
        if arena > capacity:
            over[j] = arena - capacity
    return over
