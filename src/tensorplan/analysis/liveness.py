"""Stage 4a: when each storage is live, per graph, as half-open step intervals ``[start, end)``.

The steps of a graph are the positions of its nodes (placeholders first, the output node last).
A storage is live from the first step that defines any of its values to one past the last step
that reads any of them. User inputs and mutated state are live from step 0; graph outputs and
state stay live to the end. A control-flow node (``control_flow.py``) reserves one *region* at
its step, shared by its subgraphs, which are planned inside it.

Worked example (``x -> relu -> neg -> output``; steps 0..3):
``x [0, 2)``, ``relu [1, 3)``, ``neg [2, 4)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.fx
from torch.export import ExportedProgram

from tensorplan.analysis.alias import AliasTable
from tensorplan.ops.control_flow import control_flow_op, graph_modules


def scheduled_nodes(graph: torch.fx.Graph, schedule: Sequence[str] | None) -> list[torch.fx.Node]:
    """The graph's nodes in ``schedule`` order (node names), or in graph order without one."""
    if schedule is None:
        return list(graph.nodes)
    by_name = {node.name: node for node in graph.nodes}
    return [by_name[name] for name in schedule]


@dataclass(frozen=True)
class Lifetime:
    """When one storage is live in its graph."""

    storage: int   # storage id
    start: int     # first step at which it is live
    end: int       # first step at which it is no longer live


@dataclass(frozen=True)
class RegionUse:
    """A control-flow node's reserved region."""

    node: str                    # value name of the control-flow node
    step: int                    # the step it runs at (the region is live for [step, step + 1))
    subgraphs: tuple[str, ...]   # prefixes of the subgraphs planned inside it


@dataclass(frozen=True)
class GraphLifetimes:
    """Lifetimes of one graph's own storages and regions."""

    graph: str                        # "" or "<submodule>/" prefix
    steps: int                        # number of steps (nodes) in the graph
    lifetimes: tuple[Lifetime, ...]   # one per storage owned by this graph
    regions: tuple[RegionUse, ...]    # control-flow nodes of this graph


def _subgraphs(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The ``get_attr`` nodes of a control-flow node's subgraphs (none for other nodes)."""
    described = control_flow_op(node)
    return described.subgraph_nodes(node) if described is not None else []


def _regions(nodes: Sequence[torch.fx.Node], prefix: str) -> tuple[RegionUse, ...]:
    regions = []
    for step, node in enumerate(nodes):
        subgraphs = tuple(f"{prefix}{sub.target}/" for sub in _subgraphs(node))
        if subgraphs:
            regions.append(RegionUse(prefix + node.name, step, subgraphs))
    return tuple(regions)


def _graph_lifetimes(nodes: Sequence[torch.fx.Node], prefix: str,
                     alias: AliasTable) -> GraphLifetimes:
    steps = len(nodes)
    order = {node: i for i, node in enumerate(nodes)}
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for step, node in enumerate(nodes):
        for storage in alias.storage_ids(prefix + node.name):
            if alias.storages[storage].graph != prefix:
                continue
            first[storage] = min(first.get(storage, step), step)
            reads = [steps - 1 if u.op == "output" else order[u] for u in node.users]
            last[storage] = max(last.get(storage, step), step, *reads)
    lifetimes = []
    for storage, start in first.items():
        kind = alias.storages[storage].kind
        start = 0 if kind in ("input", "state") else start
        end = steps if kind == "state" else last[storage] + 1
        lifetimes.append(Lifetime(storage, start, end))
    return GraphLifetimes(prefix, steps, tuple(lifetimes), _regions(nodes, prefix))


def lifetimes(program: ExportedProgram, alias: AliasTable,
              schedule: Sequence[str] | None = None) -> dict[str, GraphLifetimes]:
    """Lifetimes of every storage and region, per graph (``""`` is the top-level graph).

    Steps of the top-level graph follow ``schedule`` (its node names in run order) when given,
    its graph order otherwise; subgraphs always run in their graph order.
    """
    return {prefix: _graph_lifetimes(
                scheduled_nodes(module.graph, schedule if not prefix else None), prefix, alias)
            for module, prefix in graph_modules(program.graph_module)}
