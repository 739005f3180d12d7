"""Copies between banks in a ``.pte``: the spills and prefetches ``tensorplan.bank_moves`` picks.

Before the banks of a method's top-level graph are chosen, :func:`plan_copies` offers every
*movable* value a copy to another bank at each gap between its accesses, solves
``bank_moves.plan_moves``, and inserts each chosen copy as ExecuTorch's own copy kernel
(``dim_order_ops::_to_dim_order_copy.out``, the dim order kept) writing a new ``memory.alloc``
right before the step it was chosen for; the readers from that step on read the copy. The
source and the copy are pinned to the banks chosen (``BankSetup.spec_pins``), so the planning
that follows plans the graph as it now is. :func:`undo_copies` restores the graph.

A value is movable when it is one op's single output with a storage of its own: not a graph
input or output, not a mutable buffer, not linked into another storage or linked into, not
viewed by a ``memory.view``, and read only by ops (not by a delegate, control flow or the
output), none of which writes it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from tensorplan.bank_moves import plan_moves

from .banks import (
    BankSetup,
    _base,
    _is_alloc,
    _is_memory_view,
    _specs,
    bank_items,
    held_bytes,
    step_names,
)
from .order import _written


@dataclass(frozen=True)
class Copy:
    """One copy inserted: the value copied, the copy node and its ``alloc``."""

    source: torch.fx.Node
    node: torch.fx.Node
    alloc: torch.fx.Node


def _movable(graph_module: torch.fx.GraphModule, specs: Sequence[Any]) -> dict[int, torch.fx.Node]:
    """``id`` of each movable spec -> the node that makes it (see the module docstring)."""
    planned = {id(s) for s in specs if s.storage_base is None and s.mem_id is None}
    linked = {id(_base(s)) for node in graph_module.graph.nodes
              for s in _specs(node.meta.get("spec")) if _base(s) is not s}
    found = {}
    for node in graph_module.graph.nodes:
        value = node.meta.get("spec")
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) \
                or not hasattr(value, "allocated_memory") or not _is_alloc(node.kwargs.get("out")):
            continue
        if id(value) not in planned or id(value) in linked or value.const:
            continue
        readers = list(node.users)
        if all(isinstance(r.target, torch._ops.OpOverload) and not _is_memory_view(r)
               and node not in _written(r) for r in readers):
            found[id(value)] = node
    return found


def plan_copies(setup: BankSetup, graph_module: torch.fx.GraphModule,
                specs: Sequence[Any]) -> list[Copy]:
    """Choose the copies (and the banks they imply) for the top-level graph's ``specs``, whose
    lifetimes are set, and insert them; the chosen banks are written to ``setup.spec_pins`` and
    the choice's bound (it holds for every assignment) to ``setup.moves_bound``. Returns the
    copies made."""
    movable = _movable(graph_module, specs)
    free = [s for s in specs if s.storage_base is None and s.mem_id is None]
    found = bank_items(setup, free, graph_module, movable)
    steps = max((it.end for it in found), default=0)
    chosen = plan_moves(found, setup.banks, steps, step_names(graph_module, steps), {},
                        held_bytes(setup, ()), setup.time_limit)
    nodes = list(graph_module.graph.nodes)
    made = []
    for move in chosen.moves:
        spec = free[move.key]
        made.append(_insert(graph_module, movable[id(spec)], nodes[move.at], nodes[move.at:]))
        setup.spec_pins[id(spec)] = move.source
        setup.spec_pins[id(made[-1].node.meta["spec"])] = move.target
    setup.moves_bound = chosen.cost_bound
    return made


def _insert(graph_module: torch.fx.GraphModule, source: torch.fx.Node, before: torch.fx.Node,
            later: Sequence[torch.fx.Node]) -> Copy:
    """A copy of ``source`` into a new ``alloc`` right before ``before``; the readers among
    ``later`` read the copy."""
    from executorch.exir import memory

    spec = copy.copy(source.meta["spec"])
    spec.init_mem_planning_fields()
    spec.mem_id = spec.mem_offset = spec.mem_obj_id = None
    spec.storage_base = None
    given = source.kwargs["out"]
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
    return Copy(source, node, alloc)


def undo_copies(graph_module: torch.fx.GraphModule, made: Sequence[Copy]) -> None:
    """The graph as it was before :func:`plan_copies` inserted ``made``."""
    for inserted in reversed(made):
        inserted.node.replace_all_uses_with(inserted.source)
        graph_module.graph.erase_node(inserted.node)
        graph_module.graph.erase_node(inserted.alloc)
