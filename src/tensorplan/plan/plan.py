"""Stage 4b: offsets for every storage, in one arena; the ``MemoryPlan`` and its verification.

Each graph is one planning problem (torch-free ``Buffer``s). Subgraphs are planned first; a
control-flow node then reserves a region as large as its largest subgraph plan, live only at
its step, and the subgraph storages sit inside that region. The graphs are planned unverified
and the whole ``MemoryPlan`` is checked once, by ``tensorplan.plan.validate``.

With memory banks (``tensorplan.banks``), the top-level storages and regions are first
assigned a bank each; every bank is then its own planning problem and its own arena (a
region's subgraph storages live in the region's bank), verified bank by bank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from tensorplan.analysis.alias import AliasTable, StorageKind
from tensorplan.analysis.liveness import GraphLifetimes
from tensorplan.banks.choice import BankProblem, BankRequest, Item, assign, items
from tensorplan.errors import InputError
from tensorplan.plan.planners import Buffer, Placement, PlannerParams, Problem
from tensorplan.plan.planners.dispatch import plan_unverified
from tensorplan.plan.symbolic.dims import SymbolicPlan
from tensorplan.plan.symbolic.sizes import SizeExpr
from tensorplan.plan.symbolic.validate import Placed, sweep_points, symbolic_violations
from tensorplan.plan.validate import (
    Violation,
    ViolationKind,
    find_escapes,
    find_violations,
    plan_error,
)


@dataclass(frozen=True)
class PlanOptions:
    """Options of the planning stage."""

    algorithm: str = "auto"         # naive | greedy | optimal | auto
    alignment: int = 16             # every offset is a multiple of it, sizes rounded up to it
    time_limit: float | None = None  # seconds for the optimal search (None: planner default)
    params: PlannerParams = PlannerParams()  # the planners' tuning constants and pruning switches
    inputs_in_arena: bool = True    # False: the user inputs in a buffer of their own after the
    #                                 arena (a camera's frame buffer), not counted in it
    max_arena_bytes: int | None = None  # a budget: a larger arena raises PlanError

    def drafted(self) -> PlanOptions:
        """The greedy plan a stage before planning ranks its trials by: this plan's alignment,
        its inputs counted in the arena or not, no budget."""
        return PlanOptions(algorithm="greedy", alignment=self.alignment,
                           inputs_in_arena=self.inputs_in_arena)


@dataclass(frozen=True)
class PlannedStorage:
    """Where one storage lives and when."""

    id: int                   # storage id (as in TensorSpec.storage)
    offset: int               # byte offset in the arena
    size: int                 # bytes reserved (aligned)
    start: int                # first step live, in its graph's schedule
    end: int                  # first step no longer live
    kind: StorageKind         # input, state or activation
    graph: str                # "" or the subgraph prefix whose schedule start/end refer to
    values: tuple[str, ...]   # the values that use it
    bank: str = ""            # the memory bank it lives in ("": the one arena, no banks)
    traffic: int = 0          # bytes its values move per run (counted with banks only)

    @property
    def first(self) -> int:
        """The first step at which the storage is live (its first definition)."""
        return self.start

    @property
    def last(self) -> int:
        """The last step at which the storage is live (its last use), inclusive."""
        return self.end - 1


@dataclass(frozen=True)
class PlannedRegion:
    """The region a control-flow node reserves for its subgraphs."""

    node: str                    # value name of the control-flow node
    graph: str                   # the graph the node belongs to
    offset: int                  # byte offset in the arena
    size: int                    # bytes (the largest subgraph plan)
    step: int                    # live for [step, step + 1) of its graph
    subgraphs: tuple[str, ...]   # prefixes of the subgraphs inside it
    bank: str = ""               # the memory bank it lives in ("": no banks)


@dataclass(frozen=True)
class BankPlan:
    """One memory bank's arena."""

    name: str
    capacity: int | None     # bytes (None: unbounded)
    cost: float              # relative price of one byte moved
    arena_bytes: int         # its planned arena
    lower_bound_bytes: int   # most bytes of its storages live at one step
    traffic_bytes: int       # bytes its storages (and constants read from it) move per run
    constant_bytes: int = 0  # bytes of the constants read from it (beside its arena)



@dataclass(frozen=True)
class MemoryPlan:
    """Every storage's offset in one arena, with the bound that no plan can beat."""

    arena_bytes: int                        # bytes of the activation arena (aligned)
    lower_bound_bytes: int                  # largest aligned bytes live at one top-level step,
    #                                         for the chosen order and reuse
    algorithm: str                          # the planner that placed the top-level graph
    alignment: int                          # offset alignment in bytes
    optimal: bool                           # proven minimal for this schedule
    storages: Mapping[int, PlannedStorage]  # storage id -> placement
    regions: tuple[PlannedRegion, ...]      # control-flow regions
    baseline_bound_bytes: int = 0           # the bound of the exported order with one storage
    #                                         per value and nothing folded (0: not measured)
    order: str = "exported"                 # the top-level node order the plan follows
    constant_bytes: int = 0                 # bytes of the constants the runs read
    baseline_constant_bytes: int = 0        # bytes of the program's constants before folding
    banks: tuple[BankPlan, ...] = ()        # the memory banks, fastest first (() : one arena;
    #                                         with banks ``arena_bytes`` is their sum)
    traffic_cost: float = 0.0               # sum of bytes moved x their bank's cost
    traffic_cost_bound: float = 0.0         # no bank assignment costs less
    served_bound_bytes: int = 0             # no assignment moves more bytes outside the
    #                                         slowest bank
    symbolic: SymbolicPlan | None = None    # offsets and arena as functions of the dynamic
    #                                         dims (None: a static program, or banks)
    input_bytes: int = 0                    # the user inputs' own buffer, right after the
    #                                         arena and not counted in it (0: the inputs are in
    #                                         the arena; ``PlanOptions.inputs_in_arena``)

    def __repr__(self) -> str:
        """One line: the arena and its bound, what was placed and how, the dims' ranges and
        each bank's arena (the storages themselves are in ``storages``)."""
        parts = [f"arena {self.arena_bytes:,} B", f"lower bound {self.lower_bound_bytes:,} B",
                 f"{len(self.storages)} storages", f"{len(self.regions)} regions",
                 f"{self.algorithm}{' (optimal)' if self.optimal else ''}",
                 f"order {self.order}"]
        if self.symbolic is not None:
            parts.append(f"dims {self.symbolic.listed()}")
        parts += [f"bank {bank.name} {bank.arena_bytes:,} B" for bank in self.banks]
        if self.input_bytes:
            parts.append(f"inputs outside the arena {self.input_bytes:,} B")
        return f"MemoryPlan({', '.join(parts)})"

    @property
    def buffer_bytes(self) -> int:
        """Bytes of the one buffer the Python runtime allocates: the arena (every bank's),
        then the inputs' own buffer when they are outside it."""
        return self.arena_bytes + self.input_bytes

    def at(self, **dims: int) -> MemoryPlan:
        """The concrete plan at these sizes, by Dim name (a dim not given: its upper bound):
        every storage and region at its offset and size there, the arena and the lower bound
        at those sizes. A static plan is its own at every size. Raises ``InputError`` for an
        unknown dim or a size outside its range."""
        if self.symbolic is None:
            if dims:
                raise InputError(f"plan: the program has no dynamic dim (given "
                                 f"{', '.join(sorted(dims))}): its plan holds at one size")
            return self
        sym = self.symbolic
        sizes = sym.sizes_at(dims)
        storages = {sid: replace(s, offset=sym.offsets[sid].evaluate(sizes),
                                 size=sym.sizes[sid].evaluate(sizes))
                    for sid, s in self.storages.items()}
        regions = tuple(replace(r, offset=sym.region_offsets[r.node].evaluate(sizes))
                        for r in self.regions)
        return replace(self, arena_bytes=sym.arena.evaluate(sizes),
                       lower_bound_bytes=self._live_peak(sizes), storages=storages,
                       regions=regions, optimal=False, symbolic=None)

    def arena_bytes_at(self, **dims: int) -> int:
        """Bytes of the arena a run at these sizes needs (by Dim name; see ``at``)."""
        return self.at(**dims).arena_bytes

    def lower_bound_at(self, **dims: int) -> int:
        """The most aligned bytes live at one top-level step at these sizes: no plan of this
        schedule needs less there (by Dim name; see ``at``)."""
        return self.at(**dims).lower_bound_bytes

    def _live_peak(self, sizes: Mapping[str, int]) -> int:
        """The most aligned bytes the top-level storages and regions need at one step, each
        storage at what its largest value takes at ``sizes``."""
        sym = self.symbolic
        steps: dict[int, int] = {}
        items = [(s.start, s.end, _aligned_bytes(sym.needs[s.id].evaluate(sizes), self.alignment))
                 for s in self.storages.values() if not s.graph]
        items += [(r.step, r.step + 1, r.size) for r in self.regions if not r.graph]
        for start, end, size in items:
            steps[start] = steps.get(start, 0) + size
            steps[end] = steps.get(end, 0) - size
        live = peak = 0
        for step in sorted(steps):
            live += steps[step]
            peak = max(peak, live)
        return peak

    def bank_of(self, value: str) -> str:
        """The bank the value lives in (a view: its base's; "" without banks). Raises
        ``KeyError`` for a value that has no storage (a constant, a size)."""
        for storage in self.storages.values():
            if value in storage.values:
                return storage.bank
        raise KeyError(f"{value!r} lives in no planned storage")

    def bank_base(self, bank: str) -> int:
        """Where the bank's arena starts in one buffer holding every bank, fastest first
        (0 without banks): how the Python runtime lays them out."""
        base = 0
        for planned in self.banks:
            if planned.name == bank:
                return base
            base += planned.arena_bytes
        return 0

    def address(self, storage: int) -> int:
        """The storage's byte offset in that one buffer (its offset without banks)."""
        placed = self.storages[storage]
        return self.bank_base(placed.bank) + placed.offset

    def verify(self) -> None:
        """Raise ``PlanError`` if two storages live at the same step of the same graph overlap,
        an offset breaks the alignment, a subgraph storage leaves its region, or anything
        exceeds the arena (``violations()`` lists them)."""
        violations = self.violations()
        if violations:
            raise plan_error(violations, "plan")

    def violations(self) -> list[Violation]:
        """Every problem of the plan, typed; [] when it is valid. A violation's ``buffers`` are
        storage ids, and the node names of control-flow regions."""
        found = []
        for graph in sorted({s.graph for s in self.storages.values()}
                            | {r.graph for r in self.regions}):
            for bank in self._banks_of(graph):
                found += self._graph_violations(graph, bank)
        found += self._input_violations()
        for bank in self.banks:
            if bank.capacity is not None and bank.arena_bytes + bank.constant_bytes \
                    > bank.capacity:
                found.append(Violation(ViolationKind.OUT_OF_ARENA, (bank.name,),
                                       f"bank {bank.name!r}: arena {bank.arena_bytes} B and "
                                       f"constants {bank.constant_bytes} B exceed its "
                                       f"capacity {bank.capacity} B"))
        if self.symbolic is not None:
            found += self._symbolic_violations()
        for region in self.regions:
            for sub in region.subgraphs:
                inside = [s for s in self.storages.values() if s.graph == sub]
                found += find_escapes(
                    (region.offset, region.offset + region.size), f"the region of {region.node!r}",
                    [s.size for s in inside], [s.offset for s in inside],
                    labels=[s.id for s in inside],
                    names=[f"storage {s.id} of {sub!r}" for s in inside])
        return found

    def _input_violations(self) -> list[Violation]:
        """With the inputs outside the arena: every input storage in their buffer (at or
        above ``arena_bytes``), every other storage below it."""
        if not self.input_bytes:
            return []
        found = []
        for s in self.storages.values():
            if not s.graph and (s.kind == "input") != (s.offset >= self.arena_bytes):
                where = "the inputs' buffer" if s.kind == "input" else "the arena"
                found.append(Violation(
                    ViolationKind.OUT_OF_ARENA, (s.id,),
                    f"storage {s.id} ({s.kind}, bytes {s.offset}..{s.offset + s.size}) is not "
                    f"in {where}: the arena ends at {self.arena_bytes}, the inputs' buffer at "
                    f"{self.buffer_bytes}"))
        return found

    def _symbolic_violations(self) -> list[Violation]:
        """The symbolic plan's proof over the whole range (``plan/symbolic/validate.py``), then the
        concrete plan's check at the corners, the example sizes and a sweep."""
        sym = self.symbolic
        region_of = {sub: r.node for r in self.regions for sub in r.subgraphs}
        items = [Placed(s.id, f"storage {s.id}", s.graph, s.start, s.end, sym.offsets[s.id],
                        sym.sizes[s.id], sym.needs[s.id], region_of.get(s.graph))
                 for s in self.storages.values()]
        items += [Placed(r.node, f"the region of {r.node!r}", r.graph, r.step, r.step + 1,
                         sym.region_offsets[r.node], SizeExpr.constant(r.size), None,
                         region_of.get(r.graph)) for r in self.regions]
        example = {d.name: d.example for d in sym.dims}
        found = symbolic_violations(items, sym.arena, self.alignment, sym.box, [example])
        for sizes in sweep_points(sym.box, [example]):
            where = ", ".join(f"{d}={v}" for d, v in sorted(sizes.items()))
            found += [replace(v, message=f"at {where}: {v.message}")
                      for v in self.at(**sizes).violations()]
        return found

    def _banks_of(self, graph: str) -> list[str]:
        return sorted({s.bank for s in self.storages.values() if s.graph == graph}
                      | {r.bank for r in self.regions if r.graph == graph})

    def _graph_violations(self, graph: str, bank: str) -> list[Violation]:
        """Overlaps, alignment and arena bounds of one graph's storages and regions in one
        bank."""
        rows: list[tuple[int, int, int, int, int | str, str]] = [
            (s.size, s.start, s.end, s.offset, s.id, f"storage {s.id}")
            for s in self.storages.values() if s.graph == graph and s.bank == bank]
        rows += [(r.size, r.step, r.step + 1, r.offset, r.node, f"the region of {r.node!r}")
                 for r in self.regions if r.graph == graph and r.bank == bank]
        if not rows:
            return []
        sizes, starts, ends, offsets, labels, names = (list(c) for c in zip(*rows, strict=True))
        where = f"subgraph {graph!r}" if graph else "the top-level graph"
        if bank:
            where += f", bank {bank!r}"
        arena = next((b.arena_bytes for b in self.banks if b.name == bank), self.buffer_bytes)
        return [replace(v, message=f"{where}: {v.message}")
                for v in find_violations(sizes, starts, ends, offsets, self.alignment,
                                         arena, labels=labels, names=names)]


@dataclass(frozen=True)
class _GraphPlan:
    """One graph planned on its own: offsets relative to its start."""

    placement: Placement
    storages: dict[int, PlannedStorage]
    regions: list[PlannedRegion]


@dataclass(frozen=True)
class _Graph:
    """One graph's planning problem: its lifetimes, its subgraphs planned, its buffers (the
    storages, then one per control-flow region)."""

    own: GraphLifetimes
    nested: dict[str, _GraphPlan]
    region_sizes: list[int]
    buffers: list[Buffer]


def _problem(graph: str, lives: Mapping[str, GraphLifetimes], alias: AliasTable,
             options: PlanOptions) -> _Graph:
    own = lives[graph]
    nested = {sub: _plan_graph(sub, lives, alias, options)
              for region in own.regions for sub in region.subgraphs}
    region_sizes = [max((nested[s].placement.peak for s in r.subgraphs), default=0)
                    for r in own.regions]
    buffers = [Buffer(alias.storages[lt.storage].nbytes, lt.start, lt.end)
               for lt in own.lifetimes]
    buffers += [Buffer(size, r.step, r.step + 1) for r, size in zip(own.regions, region_sizes,
                                                                     strict=True)]
    return _Graph(own, nested, region_sizes, buffers)


def _placed(problem: _Graph, graph: str, alias: AliasTable, options: PlanOptions,
            offsets: Sequence[int], banks: Sequence[str]
            ) -> tuple[dict[int, PlannedStorage], list[PlannedRegion]]:
    """Every storage and region of the graph (its subgraphs' inside their regions) at the
    given offsets of its buffers, each buffer in the given bank."""
    own = problem.own
    storages = {}
    for lt, offset, bank in zip(own.lifetimes, offsets, banks, strict=False):
        storage = alias.storages[lt.storage]
        storages[lt.storage] = PlannedStorage(lt.storage, offset, _aligned(storage.nbytes, options),
                                              lt.start, lt.end, storage.kind, graph, storage.values,
                                              bank)
    regions = []
    for i, (region, size) in enumerate(zip(own.regions, problem.region_sizes, strict=True)):
        base, bank = offsets[len(own.lifetimes) + i], banks[len(own.lifetimes) + i]
        regions.append(PlannedRegion(region.node, graph, base, _aligned(size, options),
                                     region.step, region.subgraphs, bank))
        for sub in region.subgraphs:
            inner = problem.nested[sub]
            storages.update({sid: replace(_shifted(s, base), bank=bank)
                             for sid, s in inner.storages.items()})
            regions += [replace(_shifted(r, base), bank=bank) for r in inner.regions]
    return storages, regions


def _plan_graph(graph: str, lives: Mapping[str, GraphLifetimes], alias: AliasTable,
                options: PlanOptions) -> _GraphPlan:
    problem = _problem(graph, lives, alias, options)
    placement = plan_unverified(Problem(tuple(problem.buffers), options.alignment),
                                options.algorithm, options.time_limit, options.params)
    storages, regions = _placed(problem, graph, alias, options, placement.offsets,
                                [""] * len(problem.buffers))
    return _GraphPlan(placement, storages, regions)


def _aligned(size: int, options: PlanOptions) -> int:
    return _aligned_bytes(size, options.alignment)


def _aligned_bytes(size: int, alignment: int) -> int:
    return -(-size // alignment) * alignment


def _shifted(item: PlannedStorage | PlannedRegion, base: int) -> PlannedStorage | PlannedRegion:
    return replace(item, offset=item.offset + base)


def draft_plan(lives: Mapping[str, GraphLifetimes], alias: AliasTable,
               options: PlanOptions = PlanOptions()) -> MemoryPlan:
    """Place every storage of every graph in one arena, unverified: for comparing candidate
    schedules (``schedule.py``), whose drafts are thrown away. Use ``plan_memory`` for a plan
    anything will run."""
    outside = () if options.inputs_in_arena else \
        tuple(lt for lt in lives[""].lifetimes if alias.storages[lt.storage].kind == "input")
    if outside:
        own = lives[""]
        lives = {**lives, "": replace(own, lifetimes=tuple(lt for lt in own.lifetimes
                                                           if lt not in outside))}
    top = _plan_graph("", lives, alias, options)
    storages, end = dict(top.storages), top.placement.peak
    for lt in outside:  # the inputs' buffer: each input after the last, from the arena's end
        storage = alias.storages[lt.storage]
        storages[lt.storage] = PlannedStorage(lt.storage, end, _aligned(storage.nbytes, options),
                                              lt.start, lt.end, storage.kind, "",
                                              storage.values)
        end += storages[lt.storage].size
    return MemoryPlan(arena_bytes=top.placement.peak, lower_bound_bytes=top.placement.lower_bound,
                      algorithm=top.placement.algorithm, alignment=options.alignment,
                      optimal=top.placement.optimal, storages=storages,
                      regions=tuple(top.regions), input_bytes=end - top.placement.peak)


def _banked_plan(lives: Mapping[str, GraphLifetimes], alias: AliasTable, options: PlanOptions,
                 request: BankRequest) -> MemoryPlan:
    """Assign the top-level storages and regions to banks (``banks.assign``) and plan each
    bank as its own arena, unverified."""
    problem = _problem("", lives, alias, options)
    found = items(problem.own, alias, request.traffic, problem.region_sizes, options.alignment)
    found = [replace(it, pinned=request.pins.get(it.key)) for it in found]
    index = {it.key: i for i, it in enumerate(found)}
    placements: dict[tuple[int, ...], Placement] = {}

    def placement_of(chosen: Sequence[Item]) -> Placement:
        key = tuple(sorted(index[it.key] for it in chosen))
        if key not in placements:
            placements[key] = plan_unverified(
                Problem(tuple(problem.buffers[i] for i in key), options.alignment),
                options.algorithm, options.time_limit, options.params)
        return placements[key]

    chosen = assign(found, BankProblem(request.banks, problem.own.steps, request.step_names,
                                       request.constant_reads, request.constants_in,
                                       request.time_limit),
                    lambda subset: placement_of(subset).peak)
    offsets, names, planned = [0] * len(found), [""] * len(found), []
    for j, bank in enumerate(request.banks):
        members = [it for it in found if chosen.bank_of[it.key] == j]
        placement = placement_of(members)
        for it, offset in zip(sorted(members, key=lambda it: index[it.key]), placement.offsets,
                              strict=True):
            offsets[index[it.key]], names[index[it.key]] = offset, bank.name
        planned.append((bank, members, placement))
    storages, regions = _placed(problem, "", alias, options, offsets, names)
    storages = {sid: replace(s, traffic=request.traffic.get(sid, 0)) for sid, s in storages.items()}
    whole = plan_unverified(Problem(tuple(problem.buffers), options.alignment), "naive", None,
                            options.params)
    banks = tuple(BankPlan(bank.name, bank.capacity, bank.cost, placement.peak,
                           placement.lower_bound,
                           sum(it.traffic for it in members) + request.constant_reads.get(j, 0),
                           request.constants_in[j])
                  for j, (bank, members, placement) in enumerate(planned))
    return MemoryPlan(arena_bytes=sum(b.arena_bytes for b in banks),
                      lower_bound_bytes=whole.lower_bound,
                      algorithm=planned[0][2].algorithm, alignment=options.alignment,
                      optimal=all(p.optimal for _, _, p in planned), storages=storages,
                      regions=tuple(regions), banks=banks, traffic_cost=chosen.cost,
                      traffic_cost_bound=chosen.cost_bound,
                      served_bound_bytes=chosen.served_bound)


def plan_memory(lives: Mapping[str, GraphLifetimes], alias: AliasTable,
                options: PlanOptions = PlanOptions(),
                banks: BankRequest | None = None) -> MemoryPlan:
    """Place every storage of every graph in one arena (or, with ``banks``, in the bank
    ``banks.assign`` chose, one arena per bank) and verify the result, once.

    Raises ``PlanError`` if verification fails (a planner bug: report it), or when no bank
    assignment fits (the step and the bytes named).
    """
    plan = draft_plan(lives, alias, options) if banks is None else \
        _banked_plan(lives, alias, options, banks)
    plan.verify()
    return plan
