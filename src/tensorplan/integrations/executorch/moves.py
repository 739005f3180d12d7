"""Copies between banks in a ``.pte``: the spills and prefetches ``tensorplan.banks.moves`` picks.

Before the banks of a method's top-level graph are chosen, :func:`plan_copies` offers every
storage it can copy a copy to another bank at each gap between its accesses, solves
``tensorplan.banks.moves.plan_moves``, and inserts each chosen copy as ExecuTorch's own copy kernel
(``dim_order_ops::_to_dim_order_copy.out``, the dim order kept) writing a new ``memory.alloc``
right before the step it was chosen for; the readers from that step on read the copy. The
source and the copy are pinned to the banks chosen (``BankSetup.spec_pins``), so the planning
that follows plans the graph as it now is. :func:`undo_copies` restores the graph.

A storage made by an op (not a graph input or a mutable buffer) may be copied in each
*segment* of its life where one value holds all of it: from that value's node up to the next
op that writes the storage (an in-place link over it). The value must be read only by ops (not
by a delegate, control flow, a ``memory.view`` or the output), none of which writes it. The copy
reads that value; the values later written over the storage in place (an in-place chain's
later links) are linked into the copy instead, so a chain can be spilled between two of its
links. A ``cat`` whose inputs were made in its slices is copyable once the ``cat`` has run.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from tensorplan.banks.choice import BankProblem
from tensorplan.banks.moves import plan_moves
from tensorplan.integrations.executorch.banks import (
    BankSetup,
    bank_items,
    held_bytes,
    step_names,
)
from tensorplan.integrations.executorch.vocabulary import (
    is_alloc,
    is_memory_view,
    specs_in,
    storage_base,
    written_arguments,
)


@dataclass(frozen=True)
class Copy:
    """One copy inserted: the value copied, the copy node and its ``alloc``."""

    source: torch.fx.Node
    node: torch.fx.Node
    alloc: torch.fx.Node
    relinked: tuple[tuple[Any, Any, int], ...]  # (value, its former base, offset) of the
    #                                             values now linked into the copy


def _values(node: torch.fx.Node) -> list[tuple[Any, torch.fx.Node]]:
    """The specs an out-variant op writes, each with the node later ops read it through (the
    op itself, or the ``getitem`` of one of several outputs); none for any other node."""
    value = node.meta.get("spec")
    outs = [v for v in node.kwargs.values() if isinstance(v, torch.fx.Node)]
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) \
            or not outs or not all(is_alloc(v) for v in outs):
        return []
    if hasattr(value, "allocated_memory"):
        return [(value, node)]
    picked = {user.args[1]: user for user in node.users
              if getattr(user.target, "__name__", "") == "getitem"}
    return [(spec, picked[i]) for i, spec in enumerate(specs_in(value)) if i in picked]


@dataclass(frozen=True)
class Segment:
    """A stretch of a storage's life in which one value holds all of it: copies of it may go
    before any node in ``(after, until]``."""

    node: torch.fx.Node  # the node later ops read the value through
    after: int           # that node's index
    until: int           # the index of the next op writing the storage (or the last node)


def _segments(graph_module: torch.fx.GraphModule,
              specs: Sequence[Any]) -> dict[int, list[Segment]]:
    """``id`` of each storage's spec -> the segments where a copy of it may be made (see the
    module docstring); storages with none are left out."""
    planned = {id(s) for s in specs if s.storage_base is None and s.mem_id is None}
    nodes = list(graph_module.graph.nodes)
    writes: dict[int, list[tuple[int, Any, torch.fx.Node]]] = {}
    for index, node in enumerate(nodes):
        for value, reader in _values(node):
            writes.setdefault(id(storage_base(value)), []).append((index, value, reader))
    index_of = {node: index for index, node in enumerate(nodes)}
    found = {}
    for key, made in writes.items():
        root = storage_base(made[0][1])
        if key not in planned or made[0][1] is not root or root.const:
            continue
        segments = []
        for (_, value, node), later in zip(made, [*made[1:], None], strict=True):
            whole = _offset(value) == 0 and value.allocated_memory == root.allocated_memory
            readers_ok = all(isinstance(r.target, torch._ops.OpOverload)
                             and not is_memory_view(r) and node not in written_arguments(r)
                             for r in node.users)
            if whole and readers_ok:
                segments.append(Segment(node, index_of[node],
                                        len(nodes) - 1 if later is None else later[0]))
        if segments:
            found[key] = segments
    return found


def _offset(spec: Any) -> int:
    """Bytes from the start of ``spec``'s storage to ``spec``."""
    offset = 0
    while spec.storage_base is not None:
        offset, spec = offset + spec.storage_base_offset, spec.storage_base
    return offset


def plan_copies(setup: BankSetup, graph_module: torch.fx.GraphModule,
                specs: Sequence[Any]) -> list[Copy]:
    """Choose the copies (and the banks they imply) for the top-level graph's ``specs``, whose
    lifetimes are set, and insert them; the chosen banks are written to ``setup.spec_pins`` and
    the choice's bound (it holds for every assignment) to ``setup.moves_bound``. Returns the
    copies made."""
    segments = _segments(graph_module, specs)
    free = [s for s in specs if s.storage_base is None and s.mem_id is None]
    found = bank_items(setup, free, graph_module,
                       {key: tuple((seg.after, seg.until) for seg in storage_segments)
                        for key, storage_segments in segments.items()})
    steps = max((it.end for it in found), default=0)
    chosen = plan_moves(found, BankProblem(tuple(setup.banks), steps,
                                           tuple(step_names(graph_module, steps)), {},
                                           tuple(held_bytes(setup, ())), setup.time_limit))
    nodes = list(graph_module.graph.nodes)
    made = []
    for move in chosen.moves:
        root = free[move.key]
        segment = next(seg for seg in segments[id(root)] if seg.after < move.at <= seg.until)
        made.append(_insert(graph_module, root, segment.node, nodes[move.at], nodes[move.at:]))
        setup.spec_pins[id(root)] = move.source
        setup.spec_pins[id(made[-1].node.meta["spec"])] = move.target
    setup.moves_bound = chosen.cost_bound
    return made


def _insert(graph_module: torch.fx.GraphModule, root: Any, source: torch.fx.Node,
            before: torch.fx.Node, later: Sequence[torch.fx.Node]) -> Copy:
    """A copy of ``source`` (which holds all of ``root``'s storage) into a new ``alloc`` right
    before ``before``; the readers among ``later`` read the copy, and the values they write
    into ``root``'s storage are linked into the copy's."""
    from executorch.exir import memory

    spec = copy.copy(source.meta["spec"])
    spec.init_mem_planning_fields()
    spec.mem_id = spec.mem_offset = spec.mem_obj_id = None
    spec.storage_base = None
    given = _alloc_of(source)
    graph = graph_module.graph
    with graph.inserting_before(before):
        alloc = graph.call_function(memory.alloc, given.args)
        node = graph.call_function(torch.ops.dim_order_ops._to_dim_order_copy.out, (source,),
                                   {"dim_order": list(spec.dim_order), "out": alloc})
    alloc.meta.update(val=given.meta.get("val"), spec=spec)
    node.meta.update(val=source.meta.get("val"), spec=spec)
    later_set = set(later)
    for reader in list(source.users):
        if reader in later_set and reader is not node:
            reader.replace_input_with(source, node)
    relinked = []
    for writer in later:
        for value, _ in _values(writer):
            if value.storage_base is not None and storage_base(value) is root:
                relinked.append((value, value.storage_base, value.storage_base_offset))
                value.storage_base, value.storage_base_offset = spec, _offset(value)
    return Copy(source, node, alloc, tuple(relinked))


def _alloc_of(value_node: torch.fx.Node) -> torch.fx.Node:
    """The ``alloc`` a value is written into (its op's ``out``, or the ``out<i>`` of the output
    a ``getitem`` picks)."""
    if getattr(value_node.target, "__name__", "") == "getitem":
        op, index = value_node.args
        return op.kwargs[f"out{index}"] if f"out{index}" in op.kwargs else \
            [v for v in op.kwargs.values() if isinstance(v, torch.fx.Node)][index]
    return value_node.kwargs["out"]


def undo_copies(graph_module: torch.fx.GraphModule, made: Sequence[Copy]) -> None:
    """The graph as it was before :func:`plan_copies` inserted ``made``."""
    for inserted in reversed(made):
        for value, base, offset in inserted.relinked:
            value.storage_base, value.storage_base_offset = base, offset
        inserted.node.replace_all_uses_with(inserted.source)
        graph_module.graph.erase_node(inserted.node)
        graph_module.graph.erase_node(inserted.alloc)
