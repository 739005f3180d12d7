"""Plan ExecuTorch programs with tensorplan: an algorithm for ExecuTorch's ``MemoryPlanningPass``.

ExecuTorch's pass gives its algorithm the tensor specs of one graph, each with an inclusive
lifetime ``[first, last]`` of node indices; the algorithm picks a ``mem_id`` and ``mem_offset``
for every spec and returns the byte size of each memory arena. This module plans those specs with
:func:`tensorplan.plan.planners.plan_buffers` instead of ExecuTorch's greedy::

    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass
    from tensorplan.integrations.executorch import tensorplan_memory_planning

    pass_ = MemoryPlanningPass(memory_planning_algo=tensorplan_memory_planning(algorithm="auto"))
    et = edge.to_executorch(ExecutorchBackendConfig(memory_planning_pass=pass_))

What it keeps from ExecuTorch's greedy, so the emitted program means the same thing:

- specs without a ``mem_id`` go to arena 1; specs with one are planned in that arena on their own;
- ``spec.realign(alignment)`` first, and every offset is a multiple of ``alignment``;
- control flow: ExecuTorch plans each ``cond``/``while``/``map``/``scan`` subgraph first (with
  this same algorithm); each body's arena is then planned as a buffer of its parent's, live
  where its node runs, and the body's specs moved there (``bodies.py``; with memory banks the
  bodies keep ExecuTorch's reading, a prefix of each arena reserved for the whole graph);
- a spec with a ``storage_base`` (an in-place result) sits inside its base at
  ``storage_base_offset`` and takes no space of its own;
- ``extra_padding`` (XNNPACK's 64 bytes) is added to every arena that holds tensors;
- ``mem_obj_id`` numbers the groups of specs whose bytes overlap, as ExecuTorch's verifier expects.

``executorch`` is imported only when a function here is called; without it they raise
:class:`~tensorplan.errors.TensorPlanError` saying how to install it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tensorplan.errors import PlanError, TensorPlanError
from tensorplan.integrations.executorch.banks import BankSetup, assign_mem_ids
from tensorplan.integrations.executorch.bodies import body_regions, place_bodies
from tensorplan.integrations.executorch.vocabulary import bound_input_specs
from tensorplan.plan.planners import Buffer, Placement, plan_buffers

if TYPE_CHECKING:
    from executorch.exir.memory_planning import MemoryAlgoResult, MemoryPlanningAlgorithmSuite
    from executorch.exir.tensor import TensorSpec

DEFAULT_MEM_ID = 1  # the arena ExecuTorch's greedy puts a spec in when it has no mem_id


@dataclass(frozen=True)
class _Arenas:
    """How each arena of one graph is planned: the planner's options, and the bytes an
    arena adds after its tensors."""

    alignment: int
    extra_padding: int        # ExecuTorch's ``extra_padding``, after each arena's peak
    algorithm: str            # tensorplan's planner: "auto", "greedy", "optimal", "naive"
    time_limit: float | None  # seconds the planner may take

    def placement(self, buffers: Sequence[Buffer]) -> Placement:
        """``plan_buffers`` of ``buffers`` with these options."""
        return plan_buffers(buffers, algorithm=self.algorithm, alignment=self.alignment,
                            time_limit=self.time_limit)


Slot = tuple[int, int]  # (mem_id, byte offset) of one spec


def tensorplan_memory_planning(
    algorithm: str = "auto", *, time_limit: float | None = None, banks: BankSetup | None = None
) -> MemoryPlanningAlgorithmSuite:
    """A ``memory_planning_algo`` for ``MemoryPlanningPass`` that plans with tensorplan.

    ``algorithm`` and ``time_limit`` are passed to :func:`~tensorplan.plan.planners.plan_buffers`
    ("auto", "greedy", "optimal" or "naive"). The result is ExecuTorch's own algorithm suite
    running :func:`tensorplan_algo` alone, so ExecuTorch writes the plan onto the specs the
    same way it does for its greedy. Raises ``TensorPlanError`` when executorch is missing.
    """
    planning = memory_planning_module()
    algo = functools.partial(tensorplan_algo, algorithm=algorithm, time_limit=time_limit,
                             banks=banks)
    return planning.MemoryPlanningAlgorithmSuite(algo_list=[algo])


def tensorplan_algo(
    alignment: int,
    specs: Iterable[TensorSpec],
    graph_module: Any,
    graph_signature: Any,
    extra_padding: int = 0,
    *,
    algorithm: str = "auto",
    time_limit: float | None = None,
    banks: BankSetup | None = None,
) -> MemoryAlgoResult:
    """Plan one graph's specs; same call and result as ExecuTorch's ``greedy``.

    Usable on its own in ``MemoryPlanningAlgorithmSuite(algo_list=[...])``, e.g. next to
    ExecuTorch's greedy to keep the smaller plan. Like greedy it sets each spec's alignment
    (``spec.realign``) and leaves ``mem_id``/``mem_offset``/``mem_obj_id`` to the suite, which
    writes them from the returned ``spec_dict``. ``graph_signature`` is unused (the pass has
    already left out what must not be planned). Raises ``PlanError`` for a spec without a
    lifetime or a storage-backed spec whose base is not planned or that does not fit in it.

    With ``banks`` (``banks.BankSetup``), the top-level graph's specs (``banks.top``) get the
    ``mem_id`` of the bank ``tensorplan.banks.choice.assign`` chooses for them, and a subgraph's the
    slowest bank's; each ``mem_id`` is then planned on its own.
    """
    planning = memory_planning_module()
    bound = bound_input_specs(graph_module)  # a loop body's inputs bound to its parent's values
    specs = [spec for spec in specs if spec not in bound]
    for spec in specs:
        spec.realign(alignment)
    reserved = list(getattr(graph_module, "input_mem_buffer_sizes", None) or [])
    regions = body_regions(graph_module, DEFAULT_MEM_ID) if banks is None else []
    if regions:  # the bodies are regions of the arena where they run, not its prefix
        reserved = []
    own = [spec for spec in specs if spec.storage_base is None]
    arenas = _Arenas(alignment, extra_padding, algorithm, time_limit)
    if banks is not None:
        _bank_mem_ids(banks, own, graph_module, reserved, arenas)
    slots, bufsizes, offsets = _plan_arenas(own, reserved, arenas,
                                            [region.buffer for region in regions])
    place_bodies(regions, offsets)
    for spec in specs:
        if spec.storage_base is not None:
            slots[spec] = _storage_backed_slot(spec, slots)
    object_ids = _shared_object_ids(slots, specs)
    spec_dict = {
        spec: planning.SpecAllocResult(slots[spec][0], object_ids[spec], slots[spec][1])
        for spec in specs
    }
    return planning.MemoryAlgoResult(spec_dict, bufsizes)


def _bank_mem_ids(banks: BankSetup, specs: Sequence[TensorSpec], graph_module: Any,
                  reserved: Sequence[int], arenas: _Arenas) -> None:
    """Each spec's bank as its ``mem_id``: chosen at the top level, the slowest inside."""
    if graph_module is not banks.top:
        for spec in specs:
            if spec.mem_id is None:
                spec.mem_id = banks.slowest
        return

    def arena_of(group: Sequence[TensorSpec]) -> int:
        if not group:
            return 0
        return arenas.placement([_to_buffer(s) for s in group]).peak + arenas.extra_padding

    assign_mem_ids(banks, specs, graph_module, reserved, arena_of)


def memory_planning_module() -> ModuleType:
    """``executorch.exir.memory_planning``, or a TensorPlanError saying how to install it."""
    try:
        from executorch.exir import memory_planning
    except ImportError as error:
        raise TensorPlanError(
            "integrations.executorch: executorch is not installed; "
            "run `pip install tensorplan[executorch]`"
        ) from error
    return memory_planning


def _plan_arenas(
    specs: Sequence[TensorSpec],
    reserved: Sequence[int],
    arenas: _Arenas,
    regions: Sequence[Buffer] = (),
) -> tuple[dict[TensorSpec, Slot], list[int], list[int]]:
    """Plan each arena's specs after its reserved prefix, with ``regions`` (control-flow
    bodies live where they run, ``bodies.py``) planned beside arena 1's specs; return slots,
    arena sizes and the regions' offsets.

    An arena with tensors is ``prefix + peak + extra_padding`` bytes; one without keeps its
    reserved size; the list has entry 0 (constants, always 0 here) and at least arena 1.
    """
    groups: dict[int, list[TensorSpec]] = {DEFAULT_MEM_ID: []} if regions else {}
    for spec in specs:
        groups.setdefault(_mem_id(spec), []).append(spec)
    bufsizes = [0] * max(2, len(reserved), max(groups, default=0) + 1)
    for mem_id in range(1, len(reserved)):
        bufsizes[mem_id] = reserved[mem_id]
    slots: dict[TensorSpec, Slot] = {}
    offsets: list[int] = []
    for mem_id, group in groups.items():
        base = _round_up(reserved[mem_id] if mem_id < len(reserved) else 0, arenas.alignment)
        extra = list(regions) if mem_id == DEFAULT_MEM_ID else []
        buffers = [_to_buffer(spec) for spec in group] + extra
        placement = arenas.placement(buffers)
        for spec, offset in zip(group, placement.offsets, strict=False):
            slots[spec] = (mem_id, base + offset)
        offsets += [base + offset for offset in placement.offsets[len(group):]]
        bufsizes[mem_id] = base + placement.peak + arenas.extra_padding
    return slots, bufsizes, offsets


def _mem_id(spec: TensorSpec) -> int:
    """The arena a spec is planned in: its own ``mem_id``, else ExecuTorch's default arena."""
    return DEFAULT_MEM_ID if spec.mem_id is None else spec.mem_id


def _to_buffer(spec: TensorSpec) -> Buffer:
    """The planner's view of a spec: aligned bytes, inclusive ``[first, last]`` made half-open."""
    first, last = spec.lifetime
    if first is None or last is None:
        raise PlanError(f"integrations.executorch: spec {spec} has no lifetime; "
                        "run ExecuTorch's MemoryPlanningPass, which computes lifetimes")
    return Buffer(spec.allocated_memory, first, last + 1)


def _round_up(value: int, alignment: int) -> int:
    """The smallest multiple of ``alignment`` that is >= ``value``."""
    return -(-value // alignment) * alignment


def _storage_backed_slot(spec: TensorSpec, slots: dict[TensorSpec, Slot]) -> Slot:
    """Where a storage-backed spec lives: its base's arena, ``storage_base_offset`` into it.

    Raises PlanError when the base is not planned, the spec does not fit inside the base, or
    the resulting offset breaks the spec's alignment.
    """
    base = spec.storage_base
    if base not in slots:
        if base.storage_base is None:
            raise PlanError(f"integrations.executorch: the storage base of {spec} is not planned")
        slots[base] = _storage_backed_slot(base, slots)
    mem_id, base_offset = slots[base]
    offset = base_offset + spec.storage_base_offset
    if spec.storage_base_offset + spec.allocated_memory > base.allocated_memory:
        raise PlanError(f"integrations.executorch: {spec} does not fit inside its storage base")
    if offset % spec.alignment:
        raise PlanError(f"integrations.executorch: {spec} at offset {offset} breaks its "
                        f"alignment {spec.alignment}")
    return mem_id, offset


def _shared_object_ids(
    slots: dict[TensorSpec, Slot], specs: Sequence[TensorSpec]
) -> dict[TensorSpec, int]:
    """Number the runs of overlapping byte ranges in each arena (ExecuTorch's ``mem_obj_id``).

    Specs whose bytes overlap get the same id, which is what ExecuTorch's verifier checks.
    """
    ranges = []
    for index, spec in enumerate(specs):
        mem_id, offset = slots[spec]
        ranges.append((mem_id, offset, offset + spec.allocated_memory, index))
    ranges.sort()
    ids: dict[TensorSpec, int] = {}
    current, arena, reach = -1, None, 0
    for mem_id, start, end, index in ranges:
        if mem_id != arena or start >= reach:
            current, arena, reach = current + 1, mem_id, end
        reach = max(reach, end)
        ids[specs[index]] = current
    return ids
