"""Stage 3c: node orders for the top-level graph — the candidates a memory-aware schedule picks
from.

Every order runs the placeholders first and the output node last, and every node after the
nodes it reads. Three candidates (as in PyTorch inductor's ``memory.py``):

- ``exported``: the graph order torch.export produced;
- ``memory-greedy``: list scheduling that runs next the ready node adding the fewest live bytes
  (bytes of the storages it starts, minus those of the storages it is the last reader of), ties
  broken by exported position;
- ``depth-first``: a post-order walk from the outputs, each node right after the subtrees it
  reads, so a branch finishes before the next starts.

``compile`` plans each (after in-place reuse, which depends on the order) and keeps the one
with the smallest arena, the exported order on a tie.

Worked example: ``a = x.exp(); b = x.sin(); c = a.sum(); d = b.sum()`` exported as
``a, b, c, d`` holds ``a`` and ``b`` together; ``memory-greedy`` runs ``a, c, b, d``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch.fx

from tensorplan.analysis.alias import AliasTable

Order = tuple[str, ...]  # top-level node names in run order


def _split(graph: torch.fx.Graph) -> tuple[list, list, torch.fx.Node]:
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    body = [n for n in nodes if n.op not in ("placeholder", "output")]
    return placeholders, body, nodes[-1]


def exported_order(graph: torch.fx.Graph) -> Order:
    """The graph order."""
    return tuple(node.name for node in graph.nodes)


def _storages(alias: AliasTable, node: torch.fx.Node) -> tuple[int, ...]:
    return tuple(s for s in alias.storage_ids(node.name) if not alias.storages[s].graph)


def _readers(alias: AliasTable, nodes: Sequence[torch.fx.Node],
             output: torch.fx.Node) -> dict[int, set[torch.fx.Node]]:
    """Storage -> the nodes that define or read one of its values (the output node aside)."""
    pending: dict[int, set[torch.fx.Node]] = {}
    for node in nodes:
        for storage in _storages(alias, node):
            users = pending.setdefault(storage, set())
            if node.op != "placeholder":
                users.add(node)
            users.update(u for u in node.users if u is not output)
    return pending


Unit = TypeVar("Unit", bound=Hashable)


@dataclass(frozen=True)
class Footprint(Generic[Unit]):
    """What a memory-aware list schedule reads of a graph's units (nodes, or ExecuTorch's ops
    with their ``alloc`` nodes): the storages each one makes, the storages each one makes or
    reads (it frees those it is the last to touch), their bytes, the storages never freed and
    those live before the first unit."""

    makes: Mapping[Unit, Collection[Hashable]]    # storages a unit's results start
    touches: Mapping[Unit, Collection[Hashable]]  # storages a unit makes or reads
    nbytes: Mapping[Hashable, int]                # bytes of each storage (0: not planned)
    kept: Collection[Hashable]                    # live to the end: outputs, state
    live: Collection[Hashable] = ()               # live before the first unit: the inputs'


def least_added_order(units: Sequence[Unit], before: Mapping[Unit, Collection[Unit]],
                      footprint: Footprint[Unit]) -> list[Unit]:
    """List scheduling: of the units whose ``before`` units have all run, the one that adds
    the fewest live bytes runs next (bytes of the storages it makes that are not live yet,
    minus those of the storages it is the last unit to touch, ``kept`` aside), ties broken by
    position in ``units``. Every unit of ``units`` is listed once.

    >>> storages = Footprint({"a": ["A"], "b": ["B"], "c": [], "d": []},
    ...                      {"a": ["A"], "b": ["B"], "c": ["A"], "d": ["B"]},
    ...                      {"A": 4, "B": 4}, kept=())
    >>> least_added_order(["a", "b", "c", "d"], {"a": [], "b": [], "c": ["a"], "d": ["b"]},
    ...                   storages)
    ['a', 'c', 'b', 'd']
    """
    makes, touches, nbytes, kept = (footprint.makes, footprint.touches, footprint.nbytes,
                                    set(footprint.kept))
    position = {unit: i for i, unit in enumerate(units)}
    waiting = {unit: set(before[unit]) for unit in units}
    after: dict[Unit, list[Unit]] = {unit: [] for unit in units}
    for unit in units:
        for first in waiting[unit]:
            after[first].append(unit)
    pending: dict[Hashable, set[Unit]] = {}   # storage -> the units still to touch it
    depends: dict[Hashable, set[Unit]] = {}   # storage -> the units whose ``added`` reads it
    for unit in units:
        for storage in touches[unit]:
            pending.setdefault(storage, set()).add(unit)
        for storage in (*makes[unit], *touches[unit]):
            depends.setdefault(storage, set()).add(unit)
    live = set(footprint.live)
    known: dict[Unit, tuple[int, int]] = {}  # ``added`` while its storages are unchanged

    def added(unit: Unit) -> tuple[int, int]:
        if unit not in known:
            started = {s for s in makes[unit] if s not in live}
            ends = {s for s in touches[unit] if pending[s] == {unit} and s not in kept}
            known[unit] = sum(nbytes[s] for s in started - ends) - sum(
                nbytes[s] for s in ends - started), position[unit]
        return known[unit]

    ready = [unit for unit in units if not waiting[unit]]
    order: list[Unit] = []
    while ready:
        unit = min(ready, key=added)
        ready.remove(unit)
        order.append(unit)
        live.update(makes[unit])
        for storage in touches[unit]:
            pending[storage].discard(unit)
        for storage in (*makes[unit], *touches[unit]):
            for other in depends[storage]:
                known.pop(other, None)
        for later in after[unit]:
            waiting[later].discard(unit)
            if not waiting[later]:
                ready.append(later)
    return order


def memory_greedy_order(graph: torch.fx.Graph, alias: AliasTable) -> Order:
    """List scheduling (``least_added_order``) of the graph's nodes over the alias table's
    storages: the ready node that adds the fewest live bytes runs next."""
    placeholders, body, output = _split(graph)
    pending = _readers(alias, list(graph.nodes), output)
    own = {node: _storages(alias, node) for node in graph.nodes}
    touches: dict[torch.fx.Node, list[int]] = {node: [] for node in body}
    for storage, users in pending.items():
        for user in users:
            touches[user].append(storage)
    footprint = Footprint(
        makes={node: own[node] for node in body}, touches=touches,
        nbytes={s: storage.nbytes for s, storage in alias.storages.items()},
        kept={s for node in output.all_input_nodes for s in own[node]},
        live={s for node in placeholders for s in own[node]})
    before = {node: [n for n in node.all_input_nodes if n.op != "placeholder"] for node in body}
    order = least_added_order(body, before, footprint)
    return (*(n.name for n in placeholders), *(n.name for n in order), output.name)


Item = TypeVar("Item", bound=Hashable)


def post_order(roots: Iterable[Item], inputs_of: Callable[[Item], Sequence[Item]],
               done: set[Item]) -> list[Item]:
    """Every root and everything it reads (``inputs_of``, transitively), each after its
    inputs, depth first in the roots' and the inputs' order; items in ``done`` are skipped,
    and ``done`` gains every item listed.

    >>> post_order(["c"], {"c": ["a", "b"], "b": ["a"], "a": []}.__getitem__, set())
    ['a', 'b', 'c']
    """
    order: list[Item] = []
    for root in roots:
        stack = [(root, False)]
        while stack:
            item, expanded = stack.pop()
            if item in done:
                continue
            if expanded:
                done.add(item)
                order.append(item)
                continue
            stack.append((item, True))
            stack.extend((i, False) for i in reversed(inputs_of(item)) if i not in done)
    return order


def depth_first_order(graph: torch.fx.Graph) -> Order:
    """Post-order from the outputs; nodes no output needs run right after their last input."""
    placeholders, body, output = _split(graph)
    done = {node for node in placeholders}
    order = post_order(output.all_input_nodes, lambda n: n.all_input_nodes, done)
    for node in body:
        if node not in done:
            after = max((order.index(n) for n in node.all_input_nodes if n in order),
                        default=-1)
            order.insert(after + 1, node)
            done.add(node)
    return (*(n.name for n in placeholders), *(n.name for n in order), output.name)


def candidate_orders(graph: torch.fx.Graph, alias: AliasTable) -> dict[str, Order]:
    """The distinct candidate orders by name, the exported one first."""
    candidates = {"exported": exported_order(graph),
                  "memory-greedy": memory_greedy_order(graph, alias),
                  "depth-first": depth_first_order(graph)}
    distinct: dict[str, Order] = {}
    for name, schedule in candidates.items():
        if schedule not in distinct.values():
            distinct[name] = schedule
    return distinct
