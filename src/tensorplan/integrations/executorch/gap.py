"""Why a ``.pte``'s arena is above the Python plan of the same model: the kernels that hold
apart, at the ``.pte``'s busiest step, two storages the Python plan holds in one.

``tp.compile`` and :func:`~.ship.lower` start from the same model, and both make outputs over
dying inputs, inputs of a ``cat`` in their slices and views without copies. The ``.pte`` does
only what ExecuTorch's kernels were measured to allow (``kernels.py``; ``links.py`` makes the
links), and ExecuTorch copies some values the Python runtime keeps as views
(``permute_copy``, ``slice_copy``, ...). :func:`pte_gap` finds, among the storages live at the
``.pte``'s busiest step, each pair that holds values the Python plan keeps in one storage, and
the ExecuTorch op that reads the one and writes the other: that op's kernel kept them apart,
and its input's bytes are what the Python plan saves at that step.

Values are matched across the two graphs by the node of the exported model they come from
(``meta["from_node"]``, the same names in every export of one model) and their op; a value
with no single match is left out (the step's bytes are then only partly explained).

Worked example: ``conv -> relu -> F.pad(h, (1, 0, 1, 0)) -> conv``, the pad before the
block (left and top only). The Python plan makes the ``relu`` in the interior of the pad's
output. The ``.pte`` cannot: ExecuTorch's ``constant_pad_nd`` kernel refuses a block of its
input that overlaps where it is written, and with no padding after the last block there is no
tail of the output to hold the input (``links._tail_offset``), so the ``.pte``'s busiest step
holds both, and :func:`pte_gap` gives ``Gap("aten::constant_pad_nd.out",
"aten_constant_pad_nd_default", "input cannot lie in the tail of its output", <the relu's
bytes>)``, which :func:`describe` prints as ``aten::constant_pad_nd.out input cannot lie in the
tail of its output: 18,432 B at the peak``.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from tensorplan.analysis.alias import storage_of_value
from tensorplan.integrations.executorch import kernels
from tensorplan.integrations.executorch.links import CAT_OP, PAD_OP, op_key, view_base
from tensorplan.integrations.executorch.vocabulary import storage_base, tensor_spec
from tensorplan.ops.schemas import is_view

if TYPE_CHECKING:
    from tensorplan.integrations.executorch.ship import Shipped
    from tensorplan.program import Program


@dataclass(frozen=True)
class Gap:
    """One ExecuTorch op that holds its input apart from its output at the ``.pte``'s busiest
    step, where the Python plan holds them in one storage."""

    op: str      # the out-variant kernel, e.g. "aten::constant_pad_nd.out"
    node: str    # the .pte graph's node that runs it
    reason: str  # why the .pte keeps its input apart (from kernels.py's tables)
    nbytes: int  # bytes live at the busiest step that the Python plan holds no more: the
    #              input's storage, or the copy's own where it is held beside its source

    def __str__(self) -> str:
        return f"{self.op} {self.reason}: {self.nbytes:,} B at the peak"


def pte_gap(program: Program, shipped: Shipped, method: str = "forward") -> tuple[Gap, ...]:
    """What keeps ``shipped``'s arena (a :class:`~.ship.Shipped` whose ``manager`` is kept)
    above ``program``'s (a ``tp.Program`` of the same model): one :class:`Gap` per ExecuTorch
    op whose input and output are separate storages live at the busiest step of ``method``
    while the Python plan holds the matching values in one, largest first. Empty when the
    ``.pte``'s arena is not above the Python plan's."""
    if shipped.arena_bytes <= program.plan.arena_bytes:
        return ()
    graph = shipped.manager.exported_program(method).graph
    python = _PythonValues(program)
    load = shipped.methods[method].load
    busiest = max(range(len(load)), key=load.__getitem__)
    made = dict(_made_specs(graph))
    groups = _live_groups(made, busiest)
    storages = {root: python.storages(members) for root, members in groups.items()}
    group_of = {id(spec): root for root, members in groups.items() for spec, _ in members}
    found, involved = [], set()
    for spec, (node, index) in made.values():
        gap = _gap_at(node, spec, group_of, storages, python) if index == 0 else None
        if gap is not None:
            found.append(gap)
            involved.add(group_of[id(storage_base(spec))])
    found += _copies_held_beside(groups, storages, made, involved, python)
    return tuple(sorted(found, key=lambda gap: -gap.nbytes))


def _copies_held_beside(groups: Mapping[int, list[Member]], storages: Mapping[int, set[int]],
                        made: Mapping[int, Member], involved: set[int],
                        python: _PythonValues) -> list[Gap]:
    """A storage live at the busiest step, made by a copy where the Python plan has a view,
    all of whose values the Python plan holds in storages that an earlier-made storage live
    there holds too: the ``.pte`` holds the copy beside its source, made through ops whose own
    outputs are dead by then (an ``unsqueeze_copy`` then an ``expand_copy`` of a KV cache,
    where the Python plan has two views of it). Named by the op that makes it, with the copy's
    bytes; ``involved`` (those a pair gap names) left out."""
    gaps, held = [], set()
    for root in sorted(groups, key=lambda r: made[r][0].lifetime[0]):
        spec, (node, _) = made[root]
        view = node.op == "call_function" and (match := python.match(node)) is not None \
            and is_view(match.target)
        if view and root not in involved and storages[root] and storages[root] <= held:
            key = op_key(node.target)
            gaps.append(Gap(key, node.name, _reason(node, key, python), spec.allocated_memory))
        held |= storages[root]
    return gaps


def describe(gaps: Sequence[Gap]) -> str:
    """One line for a table cell: the gaps grouped by op and reason, their bytes summed, the
    largest first; "" for none.

    >>> describe([Gap("aten::constant_pad_nd.out", "pad", "may not write over its input", 4096)])
    'aten::constant_pad_nd.out may not write over its input: 4,096 B at the peak'
    """
    grouped: dict[tuple[str, str], list[Gap]] = defaultdict(list)
    for gap in gaps:
        grouped[gap.op, gap.reason].append(gap)
    parts = []
    for (op, reason), same in sorted(grouped.items(), key=lambda item: -sum(
            g.nbytes for g in item[1])):
        count = f" ({len(same)} ops)" if len(same) > 1 else ""
        parts.append(f"{str(Gap(op, '', reason, sum(g.nbytes for g in same)))}{count}")
    return "; ".join(parts)


Member = tuple[Any, tuple[torch.fx.Node, int]]  # a TensorSpec, the node making it and which
#                                                 of its outputs it is


def _live_groups(made: Mapping[int, Member], step: int) -> dict[int, list[Member]]:
    """id() of each planned storage live at ``step`` (a spec with no ``storage_base``) ->
    its specs (itself and those linked into it), each with the node and output making it
    (``made``: every spec of the graph, by id)."""
    roots = {id(spec): spec for spec, _ in made.values() if spec.storage_base is None
             and spec.mem_offset is not None and not spec.const
             and spec.lifetime[0] <= step <= spec.lifetime[1]}
    groups: dict[int, list[Member]] = {key: [] for key in roots}
    for spec, producer in made.values():
        if id(storage_base(spec)) in groups:
            groups[id(storage_base(spec))].append((spec, producer))
    return groups


def _made_specs(graph: torch.fx.Graph) -> Iterator[tuple[int, Member]]:
    """id() of each spec a placeholder or an out-variant op makes -> (spec, (node, output))."""
    for node in graph.nodes:
        if node.op == "placeholder" and _is_spec(node.meta.get("spec")):
            yield id(node.meta["spec"]), (node.meta["spec"], (node, 0))
        if node.op != "call_function" or op_key(node.target) is None:
            continue
        outputs = [node.kwargs.get(a.name) for a in node.target._schema.arguments if a.is_out]
        specs = itertools.chain.from_iterable(
            _as_list(out.meta.get("spec")) for out in outputs if isinstance(out, torch.fx.Node))
        for index, spec in enumerate(specs):
            if _is_spec(spec):
                yield id(spec), (spec, (node, index))


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _is_spec(value: Any) -> bool:
    return type(value).__name__ == "TensorSpec"


class _PythonValues:
    """The values of a ``tp.Program``'s top-level graph, found by name (the nearest node of
    the ``.pte`` node's lineage that the program holds: a rewritten program's own nodes, as a
    patch's, with the same op or a view, which the ``.pte`` runs as a copy) or else by the
    exported node they come from and their op, and the storage the Python plan gives each."""

    def __init__(self, program: Any) -> None:
        self.alias = program.schedule.alias
        self.nodes: dict[tuple[str, str], list[torch.fx.Node]] = defaultdict(list)
        self.named: dict[str, torch.fx.Node] = {}
        self.inputs: dict[str, torch.fx.Node] = {}
        for node in program.exported_program.graph.nodes:
            if node.op == "placeholder":
                self.inputs[node.name] = node
            elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
                self.nodes[_origin(node), node.target._schema.name].append(node)
                self.named[node.name] = node

    def match(self, node: torch.fx.Node) -> torch.fx.Node | None:
        """The Python node computing the value the ``.pte``'s ``node`` makes, or None."""
        if node.op == "placeholder":
            return self.inputs.get(node.name)
        op = node.target._schema.name
        for name in _lineage(node):
            found = self.named.get(name)
            if found is not None and (found.target._schema.name == op or is_view(found.target)):
                return found
        found = self.nodes.get((_origin(node), op), [])
        return found[0] if len(found) == 1 else None

    def storage(self, producer: tuple[torch.fx.Node, int]) -> int | None:
        """The Python plan's storage of one output of a ``.pte`` node, or None (no match)."""
        node, index = producer
        python = self.match(node)
        if python is None:
            return None
        several = isinstance(python.meta.get("val"), (list, tuple))
        return storage_of_value(self.alias, f"{python.name}[{index}]" if several
                                else python.name)

    def storages(self, members: Sequence[Member]) -> set[int]:
        """The Python plan's storages of the values held in one ``.pte`` storage."""
        return {s for _, producer in members if (s := self.storage(producer)) is not None}


def _lineage(node: torch.fx.Node) -> list[str]:
    """The names of the nodes ``node`` comes from, nearest first, the exported model's last
    (``meta["from_node"]``, each pass's source in turn)."""
    names, source = [], node.meta.get("from_node")
    while source:
        last = source[-1]
        names.append(last.name)
        source = last.from_node
    return names


def _origin(node: torch.fx.Node) -> str:
    """The name of the node of the exported model that ``node`` comes from."""
    return ([node.name, *_lineage(node)])[-1]


def _gap_at(node: torch.fx.Node, out: Any, group_of: Mapping[int, int],
            storages: Mapping[int, set[int]], python: _PythonValues) -> Gap | None:
    """The Gap of an op whose (first) output ``out`` and an argument are in two storages live
    at the busiest step that hold values the Python plan keeps in one storage, or None."""
    written = group_of.get(id(storage_base(out)))
    if node.op != "call_function" or written is None:
        return None
    for arg in node.all_input_nodes:
        spec = _spec(view_base(arg))
        read = group_of.get(id(storage_base(spec))) if spec is not None else None
        if read is None or read == written or not storages[read] & storages[written]:
            continue
        key = op_key(node.target)
        return Gap(key, node.name, _reason(node, key, python), storage_base(spec).allocated_memory)
    return None


def _spec(node: Any) -> Any:
    value = tensor_spec(node)
    return value if _is_spec(value) else None


def _reason(node: torch.fx.Node, key: str, python: _PythonValues) -> str:
    """Why the ``.pte`` holds the op's input apart, from the measured tables."""
    match = python.match(node)
    if match is not None and is_view(match.target):
        return "copies where the Python plan has a view"
    if key == CAT_OP:
        return "input not made in its slice" if kernels.cat_in_slices() \
            else "may not take inputs made in its slices"
    if key == PAD_OP and kernels.pad_in_tail():
        return "input cannot lie in the tail of its output"
    if key not in kernels.overlap_safe() and key not in kernels.byte_copies():
        return "may not write over its input"
    return "measured to write over its input, not linked here"
