"""Memory banks in a ``.pte``: each bank one ``mem_id``, chosen by
``tensorplan.banks.choice.assign``.

``to_executorch(..., banks=[tp.Bank(...), ...])`` gives bank ``k`` (fastest first) ``mem_id``
``k + 1`` (``mem_id`` 0 is ExecuTorch's constant segment). In the method's top-level graph every
planned spec without a ``storage_base`` is an item: its aligned bytes, its lifetime, and its
traffic counted on the out-variant graph (:func:`spec_traffic`); ``banks.assign`` picks the banks
minimising traffic x cost with every bank's planned arena (its control-flow prefix included)
within its capacity, and the algorithm plans each ``mem_id`` on its own. Control-flow subgraphs
are planned in the slowest bank. Pins name nodes of the ExecuTorch graph (placeholders keep the
program's input and buffer names).

:func:`mem_id_traffic` counts the same way for any lowered program, ExecuTorch's
``banked_greedy`` included, so the two are compared by one measure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch.fx

from tensorplan.banks.choice import (
    Assignment,
    Bank,
    BankProblem,
    Item,
    assign,
    bank_index,
    check_banks,
)
from tensorplan.errors import InputError
from tensorplan.integrations.executorch.vocabulary import (
    is_alloc,
    is_memory_view,
    specs_in,
    storage_base,
)


@dataclass
class BankSetup:
    """The banks asked for, and what the planning of one method decided (filled by the
    algorithm when it plans the method's top-level graph)."""

    banks: tuple[Bank, ...]
    pins: Mapping[str, str] = field(default_factory=dict)  # node name -> bank name
    time_limit: float = 10.0
    moves: bool = True                  # storages may be copied once to another bank
    top: Any = None                     # the graph module being planned at the top level
    spec_pins: dict[int, int] = field(default_factory=dict)  # id(spec) -> bank index, set
    #                                    where copies were chosen (moves.py)
    moves_bound: float = math.inf       # the bound of the choice with copies (moves.py)
    cost: float = 0.0                   # traffic x cost of the assignment made
    cost_bound: float = 0.0             # the proven bound on it

    @staticmethod
    def of(banks: Sequence[Bank], pins: Mapping[str, str] | None = None,
           time_limit: float | None = None, moves: bool = True) -> BankSetup:
        """The setup, its banks checked (``InputError`` as ``compile(banks=...)`` raises)."""
        checked = check_banks(banks)
        for value, name in (pins or {}).items():
            bank_index(checked, name, f"the pin of {value!r}")
        return BankSetup(checked, dict(pins or {}), 10.0 if time_limit is None else time_limit,
                         moves)

    @property
    def slowest(self) -> int:
        """The ``mem_id`` of the slowest bank (where subgraphs are planned)."""
        return len(self.banks)


def _nbytes(spec: Any) -> int:
    return math.prod(int(d) for d in spec.shape) * spec.dtype.itemsize


def _view_bases(graph_module: torch.fx.GraphModule) -> dict[int, Any]:
    """``id`` of each ``memory.view`` spec -> the spec of the storage it views (views of views
    followed), found before planning gives the views their base's place."""
    bases: dict[int, Any] = {}
    for node in graph_module.graph.nodes:
        if is_memory_view(node) and isinstance(node.args[0], torch.fx.Node):
            for spec in specs_in(node.meta.get("spec")):
                source = specs_in(node.args[0].meta.get("spec"))
                if source:
                    base = storage_base(source[0])
                    bases[id(spec)] = bases.get(id(base), base)
    return bases


def spec_accesses(graph_module: torch.fx.GraphModule) -> dict[int, list[tuple[int, int]]]:
    """The accesses of each planned storage (``id`` of its base spec) in one graph, as
    ``(node index, bytes)``: each op node writes its output specs and reads every tensor
    argument that is not an ``alloc`` (the ``out`` it writes into), a view read through its
    base; a graph input is also written once, when it is copied in. A ``memory.view`` moves
    nothing."""
    found: dict[int, list[tuple[int, int]]] = {}
    views = _view_bases(graph_module)

    def add(spec: Any, index: int) -> None:
        if getattr(spec, "const", False):
            return
        base = storage_base(spec)
        key = id(views.get(id(base), base))
        found.setdefault(key, []).append((index, _nbytes(spec)))

    for index, node in enumerate(graph_module.graph.nodes):
        if node.op == "placeholder":
            for spec in specs_in(node.meta.get("spec")):
                add(spec, index)
            continue
        if node.op != "call_function" or is_alloc(node) or is_memory_view(node) or \
                getattr(node.target, "__name__", "") == "getitem":
            continue
        for spec in specs_in(node.meta.get("spec")):
            add(spec, index)
        for arg in node.all_input_nodes:
            if not is_alloc(arg):
                for spec in specs_in(arg.meta.get("spec")):
                    add(spec, index)
    return found


def spec_traffic(graph_module: torch.fx.GraphModule) -> dict[int, int]:
    """Bytes moved per planned storage (``id`` of its base spec) in one graph: the sum of
    its :func:`spec_accesses`."""
    return {key: sum(nbytes for _, nbytes in accesses)
            for key, accesses in spec_accesses(graph_module).items()}


def mem_id_traffic(graph_module: torch.fx.GraphModule) -> dict[int, int]:
    """Bytes moved per ``mem_id`` in a lowered method's graph, subgraphs included (counted as
    :func:`spec_traffic` counts; constants, ``mem_id`` 0, left out)."""
    totals: dict[int, int] = {}
    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        moved = spec_traffic(module)
        seen = {}
        for node in module.graph.nodes:
            for spec in specs_in(node.meta.get("spec")):
                base = storage_base(spec)
                seen[id(base)] = base
        for key, nbytes in moved.items():
            base = seen.get(key)
            if base is not None and base.mem_id is not None:
                totals[base.mem_id] = totals.get(base.mem_id, 0) + nbytes
    return totals


def bank_items(setup: BankSetup, free: Sequence[Any], graph_module: torch.fx.GraphModule,
               movable: Mapping[int, tuple[tuple[int, int], ...]] | None = None) -> list[Item]:
    """The items ``banks.assign`` is given for the top-level graph's ``free`` specs (lifetimes
    set): item ``i`` is ``free[i]``, pinned where ``setup`` pins it (a node's name, or a spec
    a copy was chosen for); the specs whose ``id`` is a key of ``movable`` carry their
    accesses and may be copied before any node in the ``(after, until]`` windows it maps
    them to.
    Raises ``InputError`` for a pin naming no node of the graph."""
    accesses = spec_accesses(graph_module)
    nodes = {node.name for node in graph_module.graph.nodes}
    missing = sorted(set(setup.pins) - nodes)
    if missing:
        inputs = [n.name for n in graph_module.graph.nodes if n.op == "placeholder"]
        raise InputError(f"banks: cannot pin {', '.join(map(repr, missing))}: no node of the "
                         f"ExecuTorch graph has that name; its placeholders are "
                         f"{', '.join(inputs)}")
    pinned = {id(storage_base(s)): bank_index(setup.banks, setup.pins[node.name], "a pin")
              for node in graph_module.graph.nodes if node.name in setup.pins
              for s in specs_in(node.meta.get("spec"))}
    pinned.update(setup.spec_pins)
    movable = movable or {}
    return [Item(i, spec.allocated_memory, spec.lifetime[0], spec.lifetime[1] + 1,
                 sum(n for _, n in accesses.get(id(spec), ())), pinned.get(id(spec)),
                 tuple(accesses.get(id(spec), ())) if id(spec) in movable else (),
                 movable.get(id(spec), ()))
            for i, spec in enumerate(free)]


def held_bytes(setup: BankSetup, reserved: Sequence[int]) -> tuple[int, ...]:
    """Each bank's bytes taken by the control-flow prefix (``reserved``, by ``mem_id``)."""
    return tuple(reserved[k + 1] if k + 1 < len(reserved) else 0
                 for k in range(len(setup.banks)))


def choose_banks(setup: BankSetup, specs: Sequence[Any], graph_module: torch.fx.GraphModule,
                 reserved: Sequence[int], arena_of: Callable[[Sequence[Any]], int]
                 ) -> tuple[dict[int, int], Assignment]:
    """The ``mem_id`` ``banks.assign`` chooses for every spec of the top-level graph without
    one (``id`` of the spec -> ``mem_id``), and the assignment; nothing is written.
    ``arena_of(specs)`` plans one bank's specs and returns its bytes; ``reserved``: the
    control-flow prefix of each ``mem_id``, taken from that bank's room."""
    free = [s for s in specs if s.mem_id is None]
    found = bank_items(setup, free, graph_module)
    steps = max((it.end for it in found), default=0)
    problem = BankProblem(tuple(setup.banks), steps, tuple(step_names(graph_module, steps)),
                          {}, tuple(held_bytes(setup, reserved)), setup.time_limit)
    chosen = assign(found, problem, lambda items: arena_of([free[it.key] for it in items]))
    return {id(free[it.key]): chosen.bank_of[it.key] + 1 for it in found}, chosen


def assign_mem_ids(setup: BankSetup, specs: Sequence[Any], graph_module: torch.fx.GraphModule,
                   reserved: Sequence[int], arena_of: Callable[[Sequence[Any]], int]) -> None:
    """:func:`choose_banks`, written onto the specs (``mem_id``) and the setup (cost, bound)."""
    mem_ids, chosen = choose_banks(setup, specs, graph_module, reserved, arena_of)
    for spec in specs:
        if id(spec) in mem_ids:
            spec.mem_id = mem_ids[id(spec)]
    setup.cost = chosen.cost
    setup.cost_bound = min(chosen.cost_bound, setup.moves_bound)


def step_names(graph_module: torch.fx.GraphModule, steps: int) -> list[str]:
    names = [node.name for node in graph_module.graph.nodes]
    return (names + ["(end)"] * steps)[:max(steps, len(names))]


def bank_arenas(setup: BankSetup, bufsizes: Iterable[int]) -> tuple[int, ...]:
    """Each bank's arena bytes from the method's ``bufsizes`` (index = ``mem_id``)."""
    sizes = list(bufsizes)
    return tuple(sizes[k + 1] if k + 1 < len(sizes) else 0 for k in range(len(setup.banks)))
