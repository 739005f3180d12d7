"""Node orders for an ExecuTorch out-variant graph: the candidates the planning pass tries.

A *unit* is one node that runs (an op, a view, a ``getitem``, a delegate or control-flow call)
together with the ``memory.alloc`` nodes of its ``out`` arguments, which ExecuTorch places right
before it; ``get_attr`` nodes go right before their first user. Every order keeps the
placeholders first and the output last, runs a unit after the units it reads (a ``getitem``
of a list ``alloc`` reads what the op given that alloc as its ``out`` wrote: a split's pieces
are taken from the alloc, not from the split), and keeps the
units that touch a mutated storage (an argument written in place, or anything a delegate or a
control-flow call is given) in their original relative order, so reads before a write stay
before it.

- ``exported``: the order ExecuTorch produced;
- ``memory-greedy``: the list scheduling of ``schedule/order.py`` (``least_added_order``) over
  the units and their storage groups: next runs the ready unit adding the fewest live bytes
  (bytes it allocates minus the bytes of storages it is the last reader of), ties broken by
  original position;
- ``depth-first``: a post-order walk from the outputs, each unit right after what it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.fx

from tensorplan.integrations.executorch.links import (
    StorageGroups,
    mutable_buffer_specs,
    spec_references,
)
from tensorplan.integrations.executorch.vocabulary import (
    is_alloc,
    is_memory_view,
    specs_in,
    written_arguments,
)
from tensorplan.schedule.order import Footprint, least_added_order, post_order

Order = list[torch.fx.Node]  # every node of the graph, in run order


def _units(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    return [n for n in graph.nodes if n.op not in ("placeholder", "output", "get_attr")
            and not is_alloc(n)]


def _root(node: torch.fx.Node) -> torch.fx.Node:
    while is_memory_view(node):
        node = node.args[0]
    return node


def _alloc_writers(units: Sequence[torch.fx.Node]) -> dict[torch.fx.Node, torch.fx.Node]:
    """``memory.alloc`` node -> the unit that writes it: the op that takes it as an ``out``
    argument (ExecuTorch passes those by keyword)."""
    return {arg: u for u in units for arg in u.kwargs.values()
            if isinstance(arg, torch.fx.Node) and is_alloc(arg)}


def _dependencies(graph: torch.fx.Graph, units: Sequence[torch.fx.Node]
                  ) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """Unit -> the units that must run before it (data, then mutation order)."""
    unit_set = set(units)
    before: dict[torch.fx.Node, list[torch.fx.Node]] = {
        u: [a for a in u.all_input_nodes if a in unit_set] for u in units}
    writers = _alloc_writers(units)
    for u in units:
        before[u] += [writers[a] for a in u.all_input_nodes
                      if writers.get(a, u) is not u]
    mutated = {_root(w) for u in units for w in written_arguments(u)}
    touching: dict[torch.fx.Node, list[torch.fx.Node]] = {root: [] for root in mutated}
    for u in units:
        for root in {_root(a) for a in u.all_input_nodes} & mutated:
            touching[root].append(u)
    for chain in touching.values():
        for first, second in zip(chain, chain[1:], strict=False):
            before[second].append(first)
    return before


def _expand(graph: torch.fx.Graph, units: Sequence[torch.fx.Node]) -> Order:
    """The full node list: placeholders, each unit with its get_attrs and allocs, output."""
    order = list(graph.find_nodes(op="placeholder"))
    placed = set(order)
    for unit in units:
        for arg in unit.all_input_nodes:
            if arg not in placed and (arg.op == "get_attr" or is_alloc(arg)):
                order.append(arg)
                placed.add(arg)
        order.append(unit)
        placed.add(unit)
    order += [n for n in graph.nodes if n not in placed and n.op != "output"]
    order.append(graph.output_node())
    return order


def _footprint(graph: torch.fx.Graph, graph_signature: Any, planned: frozenset[int],
               units: Sequence[torch.fx.Node]) -> Footprint[torch.fx.Node]:
    """The storage groups each unit starts (its ``out`` allocations') and touches (a node's
    groups are touched by the unit that runs it: itself, or the op its ``get_attr`` or
    ``alloc`` belongs to), their planned bytes; mutable buffers and what the output reads are
    kept."""
    nodes = list(graph.nodes)
    refs = spec_references(graph, graph_signature)
    forever_specs = mutable_buffer_specs(graph, graph_signature)
    groups = StorageGroups(graph, refs, forever_specs)
    owner: dict[torch.fx.Node, torch.fx.Node | None] = {
        n: None if n.op == "placeholder" else n for n in nodes}
    for unit in units:
        for arg in unit.all_input_nodes:
            if arg.op == "get_attr" or is_alloc(arg):
                owner[arg] = unit
    owner.update(_alloc_writers(units))
    touches: dict[torch.fx.Node, set[int]] = {unit: set() for unit in units}
    kept = {groups.find(groups.spec[k]) for k in forever_specs if k in groups.spec}
    every: set[int] = set()
    for node, specs in zip(nodes, refs, strict=True):
        for spec in specs:
            group = groups.find(spec)
            every.add(group)
            if owner[node] in touches:
                touches[owner[node]].add(group)
            elif owner[node] is not None:  # the output node: what it reads stays
                kept.add(group)
    makes = {unit: {groups.find(spec) for a in unit.all_input_nodes if is_alloc(a)
                    for spec in specs_in(a.meta.get("spec"))} for unit in units}
    nbytes = {g: groups.spec[g].allocated_memory if g in planned else 0 for g in every}
    return Footprint(makes, touches, nbytes, kept)


def _depth_first(units: Sequence[torch.fx.Node],
                 before: dict[torch.fx.Node, list[torch.fx.Node]],
                 output: torch.fx.Node) -> list[torch.fx.Node]:
    unit_set = set(units)
    roots = [a for a in output.all_input_nodes if a in unit_set] + list(units)
    return post_order(roots, before.__getitem__, set())


def candidate_orders(graph: torch.fx.Graph, graph_signature: Any,
                     planned: frozenset[int]) -> dict[str, Order]:
    """The orders to try, by name (``exported`` first); each lists every node of ``graph``.

    ``planned`` holds the id() of the specs the arena holds; only their bytes are counted.
    """
    units = _units(graph)
    before = _dependencies(graph, units)
    return {
        "exported": list(graph.nodes),
        "memory-greedy": _expand(graph, least_added_order(
            units, before, _footprint(graph, graph_signature, planned, units))),
        "depth-first": _expand(graph, _depth_first(units, before, graph.output_node())),
    }


def apply_order(graph_module: torch.fx.GraphModule, order: Order) -> None:
    """Rearrange the graph's nodes into ``order`` (a permutation of them) and recompile."""
    output = graph_module.graph.output_node()
    for node in order:
        if node is not output and node.op != "placeholder":
            output.prepend(node)
    graph_module.graph.lint()
    graph_module.recompile()

