"""Stage 4b: offsets for every storage, in one arena; the ``MemoryPlan`` and its verification.

Each graph is one planning problem (torch-free ``Buffer``s). Subgraphs are planned first; a
control-flow node then reserves a region as large as its largest subgraph plan, live only at
its step, and the subgraph storages sit inside that region. The graphs are planned unverified
and the whole ``MemoryPlan`` is checked once, by ``tensorplan.validate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from .alias import AliasTable, StorageKind
from .liveness import GraphLifetimes
from .planners import Buffer, Placement, PlannerParams, Problem
from .planners.dispatch import plan_unverified
from .validate import Violation, find_escapes, find_violations, plan_error


@dataclass(frozen=True)
class PlanOptions:
    """Options of the planning stage."""

    algorithm: str = "auto"         # naive | greedy | optimal | auto
    alignment: int = 16             # every offset is a multiple of it, sizes rounded up to it
    time_limit: float | None = None  # seconds for the optimal search (None: planner default)
    params: PlannerParams = PlannerParams()  # the planners' tuning constants and pruning switches


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
            found += self._graph_violations(graph)
        for region in self.regions:
            for sub in region.subgraphs:
                inside = [s for s in self.storages.values() if s.graph == sub]
                found += find_escapes(
                    (region.offset, region.offset + region.size), f"the region of {region.node!r}",
                    [s.size for s in inside], [s.offset for s in inside],
                    labels=[s.id for s in inside],
                    names=[f"storage {s.id} of {sub!r}" for s in inside])
        return found

    def _graph_violations(self, graph: str) -> list[Violation]:
        """Overlaps, alignment and arena bounds of one graph's storages and regions."""
        items: list[tuple[int, int, int, int, int | str, str]] = [
            (s.size, s.start, s.end, s.offset, s.id, f"storage {s.id}")
            for s in self.storages.values() if s.graph == graph]
        items += [(r.size, r.step, r.step + 1, r.offset, r.node, f"the region of {r.node!r}")
                  for r in self.regions if r.graph == graph]
        if not items:
            return []
        sizes, starts, ends, offsets, labels, names = (list(c) for c in zip(*items, strict=True))
        where = f"subgraph {graph!r}" if graph else "the top-level graph"
        return [replace(v, message=f"{where}: {v.message}")
                for v in find_violations(sizes, starts, ends, offsets, self.alignment,
                                         self.arena_bytes, labels=labels, names=names)]


@dataclass(frozen=True)
class _GraphPlan:
    """One graph planned on its own: offsets relative to its start."""

    placement: Placement
    storages: dict[int, PlannedStorage]
    regions: list[PlannedRegion]


def _plan_graph(graph: str, lives: Mapping[str, GraphLifetimes], alias: AliasTable,
                options: PlanOptions) -> _GraphPlan:
    own = lives[graph]
    nested = {sub: _plan_graph(sub, lives, alias, options)
              for region in own.regions for sub in region.subgraphs}
    region_sizes = [max((nested[s].placement.peak for s in r.subgraphs), default=0)
                    for r in own.regions]
    buffers = [Buffer(alias.storages[lt.storage].nbytes, lt.start, lt.end)
               for lt in own.lifetimes]
    buffers += [Buffer(size, r.step, r.step + 1) for r, size in zip(own.regions, region_sizes,
                                                                     strict=True)]
    placement = plan_unverified(Problem(tuple(buffers), options.alignment), options.algorithm,
                                options.time_limit, options.params)
    offsets = placement.offsets
    storages = {}
    for lt, offset in zip(own.lifetimes, offsets, strict=False):
        storage = alias.storages[lt.storage]
        storages[lt.storage] = PlannedStorage(lt.storage, offset, _aligned(storage.nbytes, options),
                                              lt.start, lt.end, storage.kind, graph, storage.values)
    regions = []
    for i, (region, size) in enumerate(zip(own.regions, region_sizes, strict=True)):
        base = offsets[len(own.lifetimes) + i]
        regions.append(PlannedRegion(region.node, graph, base, _aligned(size, options),
                                     region.step, region.subgraphs))
        for sub in region.subgraphs:
            storages.update({sid: _shifted(s, base) for sid, s in nested[sub].storages.items()})
            regions += [_shifted(r, base) for r in nested[sub].regions]
    return _GraphPlan(placement, storages, regions)


def _aligned(size: int, options: PlanOptions) -> int:
    return -(-size // options.alignment) * options.alignment


def _shifted(item: PlannedStorage | PlannedRegion, base: int) -> PlannedStorage | PlannedRegion:
    return replace(item, offset=item.offset + base)


def draft_plan(lives: Mapping[str, GraphLifetimes], alias: AliasTable,
               options: PlanOptions = PlanOptions()) -> MemoryPlan:
    """Place every storage of every graph in one arena, unverified: for comparing candidate
    schedules (``schedule.py``), whose drafts are thrown away. Use ``plan_memory`` for a plan
    anything will run."""
    top = _plan_graph("", lives, alias, options)
    return MemoryPlan(arena_bytes=top.placement.peak, lower_bound_bytes=top.placement.lower_bound,
                      algorithm=top.placement.algorithm, alignment=options.alignment,
                      optimal=top.placement.optimal, storages=top.storages,
                      regions=tuple(top.regions))


def plan_memory(lives: Mapping[str, GraphLifetimes], alias: AliasTable,
                options: PlanOptions = PlanOptions()) -> MemoryPlan:
    """Place every storage of every graph in one arena and verify the result, once.

    Raises ``PlanError`` if verification fails (a planner bug: report it).
    """
    plan = draft_plan(lives, alias, options)
    plan.verify()
    return plan
