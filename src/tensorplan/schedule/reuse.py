"""Stage 3b: in-place reuse — an op's output takes over the storage of an input that dies there.

Walking the top-level graph in its schedule, an op's output joins the storage of one of its
arguments when all of these hold (DESIGN rule 5: read from schemas and tags, no op list):

- the op may write its result over that argument: it is elementwise by its tags
  (``torch.Tag.pointwise``: any tensor argument), or it has an in-place twin that writes
  ``self`` with the same signature (argument 0), or it normalises each element with
  per-channel constants (inference batch norm, whose native out-variant writes over its input:
  ``ELEMENTWISE_OVER_INPUT``, the one op without such a tag);
- the argument's storage is read by nothing after this op (every value in it, views and
  earlier reuses included, has its last read here), and it is an activation or a user input
  (copied into the arena at every run); never state, a constant or a graph output;
- the argument covers its storage densely from its start, laid out as the output will be:
  same dtype, same (symbolic) shape and the same layout, so element ``i`` of the output
  overwrites element ``i`` of the argument;
- no other argument of the op reads that storage (``x + x.t()`` must not write over ``x``),
  and the output's own storage is a fresh activation that nothing else holds yet.

A loop with nothing carried (``scan``, ``map``) is an op of this kind for the operands it
slices: iteration ``i`` reads slice ``i`` before its result is copied into slice ``i`` of the
stacked output, so the stacked output may take over a sliced operand under the same rules
(``_loop_slices``): a chunked layer writes its output over its residual input, chunk by chunk.

Chains (``x -> mul -> add -> tanh``) therefore live in one storage end to end. The result is a
new ``AliasTable`` in which the reused storages hold several values whose lifetimes chain.

Worked example: ``y = (x * 2).relu(); return y`` with a user input ``x`` gives one storage
``0: (x, mul, relu)`` instead of three.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram

from tensorplan.analysis.alias import AliasTable, MergedStorages
from tensorplan.ops.control_flow import control_flow_op, graph_modules
from tensorplan.ops.schemas import inplace_variant, is_view
from tensorplan.specs.layout import same_layout, size_expression
from tensorplan.specs.spec import SpecTable, TensorSpec

_ATEN = torch.ops.aten
# Ops that write each element of their result over the same element of their first argument
# but carry neither the pointwise tag nor an in-place twin.
ELEMENTWISE_OVER_INPUT = frozenset({_ATEN._native_batch_norm_legit_no_training.default})


@dataclass(frozen=True)
class Reuse:
    """One output written over a dying argument's storage."""

    value: str       # the output that took the storage over
    overwrites: str  # the argument it writes over
    storage: int     # the storage both now live in


def overwritable_arguments(op: torch._ops.OpOverload) -> tuple[int, ...]:
    """Positions of the arguments ``op`` may write its (first) result over."""
    arguments = op._schema.arguments
    if torch.Tag.pointwise in op.tags:
        return tuple(i for i, a in enumerate(arguments)
                     if not a.kwarg_only and str(a.type).startswith("Tensor"))
    if inplace_variant(op) is not None or op in ELEMENTWISE_OVER_INPUT:
        return (0,)
    return ()


def same_memory_layout(a: TensorSpec, b: TensorSpec) -> bool:
    """Same dtype, (symbolic) shape and layout: element ``i`` of one is element ``i`` of the
    other when both are dense from the same start."""
    return (a.dtype == b.dtype and a.shape == b.shape
            and tuple(map(str, a.sym_shape)) == tuple(map(str, b.sym_shape))
            and same_layout(a.shape, a.dim_order, b.dim_order))


def _dense_view(node: torch.fx.Node, spec: TensorSpec) -> bool:
    """A view dense in its dim order (propagate recorded no ``view_strides`` for it) that
    starts where its storage starts: it covers its base's first bytes exactly as a fresh
    tensor would. The offset is the re-trace's (``spec.view_offset``): a program loaded from a
    file carries fake values with no view offsets in its meta. A symbolic offset is compared
    as an expression (no guard is added)."""
    return isinstance(node.meta.get("val"), torch.Tensor) and spec.view_strides is None \
        and size_expression(spec.view_offset) == 0


@dataclass
class _Walk:
    """What the walk over one schedule knows (local to ``reuse_storages``)."""

    specs: SpecTable
    storages: MergedStorages
    last_read: dict[int, int]  # storage -> last step any of its values is read
    dense: set[str]            # values that cover their storage densely from its start
    module: torch.fx.GraphModule  # the graph walked
    prefix: str = ""           # the graph walked: "" at the top, "<submodule>/" inside

    def name(self, node: torch.fx.Node) -> str:
        """The value name of a node of the graph walked."""
        return self.prefix + node.name


def last_reads(nodes: Sequence[torch.fx.Node], alias: AliasTable,
               prefix: str = "") -> dict[int, int]:
    """Storage -> the last step (position in ``nodes``, a graph whose value names start with
    ``prefix``) that defines or reads one of its values; ``len(nodes)`` for graph outputs."""
    position = {node: i for i, node in enumerate(nodes)}
    last: dict[int, int] = {}
    for step, node in enumerate(nodes):
        reads = [len(nodes) if u.op == "output" else position[u] for u in node.users]
        for storage in alias.storage_ids(prefix + node.name):
            last[storage] = max(last.get(storage, step), step, *reads)
    return last


def _first_members(alias: AliasTable, nodes: Sequence[torch.fx.Node],
                   specs: SpecTable, prefix: str) -> set[str]:
    """Values that cover their storage densely from its start: each storage's first value,
    and views laid out densely at its start."""
    dense = {s.values[0] for s in alias.storages.values() if s.values}
    for node in nodes:
        spec = specs.spec_of(prefix + node.name)
        if isinstance(node.target, torch._ops.OpOverload) and is_view(node.target) and \
                spec is not None and _dense_view(node, spec):
            dense.add(prefix + node.name)
    return dense


def _covers_storage(walk: _Walk, node: torch.fx.Node) -> bool:
    """The value covers its storage densely from its start (a getitem: its item does)."""
    if node.target is operator.getitem:
        source, index = node.args
        return f"{walk.name(source)}[{index}]" in walk.dense
    return walk.name(node) in walk.dense


def _candidate(walk: _Walk, node: torch.fx.Node, step: int, arg: Any,
               out: TensorSpec) -> int | None:
    """The storage of the argument ``arg`` if the node's output may take it over."""
    if not isinstance(arg, torch.fx.Node) or not _covers_storage(walk, arg):
        return None
    storage = walk.storages.of(walk.name(arg))
    spec = walk.specs.spec_of(walk.name(arg))
    if storage is None or spec is None or not same_memory_layout(spec, out):
        return None
    kept = walk.storages.alias.storages[storage]
    if kept.kind not in ("activation", "input") or kept.graph != walk.prefix \
            or walk.last_read[storage] != step:
        return None
    others = [a for a in node.all_input_nodes if a is not arg]
    if any(walk.storages.of(walk.name(a)) == storage for a in others):
        return None
    return storage


def _output(walk: _Walk, node: torch.fx.Node) -> tuple[str, int] | None:
    """The node's first output value and its storage, when that is a fresh activation."""
    entry = walk.specs.get(walk.name(node))
    value = f"{walk.name(node)}[0]" if isinstance(entry, tuple) else walk.name(node)
    storage = walk.storages.of(value)
    if storage is None:
        return None
    kept = walk.storages.alias.storages[storage]
    fresh = kept.kind == "activation" and kept.graph == walk.prefix
    return (value, storage) if fresh and walk.storages.values[storage][0] == value else None


def reuse_storages(program: ExportedProgram, specs: SpecTable, alias: AliasTable,
                   schedule: Sequence[str]) -> tuple[AliasTable, tuple[Reuse, ...]]:
    """The alias table with every output that may take over a dying argument's storage moved
    into it, walking the top-level graph in ``schedule`` order and each control-flow subgraph
    in its graph order (only over storages of that subgraph: its inputs are its caller's);
    and the reuses made.

    Pure: the program and the given table are not modified.
    """
    storages, reuses = MergedStorages(alias), []
    for module, prefix in graph_modules(program.graph_module):
        by_name = {node.name: node for node in module.graph.nodes}
        nodes = [by_name[name] for name in schedule] if not prefix else list(module.graph.nodes)
        walk = _Walk(specs, storages, last_reads(nodes, storages.table(), prefix),
                     _first_members(storages.table(), nodes, specs, prefix), module, prefix)
        reuses += _walk_graph(walk, nodes)
    return storages.table(), tuple(reuses)


def _loop_slices(walk: _Walk, node: torch.fx.Node) -> list[Any]:
    """The operands a loop's first stacked output may be written over: those it slices, when
    it carries nothing and its body's result is a storage of the body's own. Each iteration
    reads its slices before its result is copied into the same slice of the stacked output
    (the runtime's ``_run_scan`` / ``_run_map``; ExecuTorch's emitter copies the slices into
    the body's inputs first), so slice ``i`` of a dying operand may take that result."""
    described = control_flow_op(node)
    if described is None or node.meta.get("unbacked_bindings") or any(
            o.carried and node.args[o.position] for o in described.operands):
        return []
    body = described.subgraph_nodes(node)[0]
    result = next(n for n in getattr(walk.module, body.target).graph.nodes
                  if n.op == "output").args[0][0]
    owner = walk.storages.of(f"{walk.prefix}{body.target}/{result.name}")
    kept = walk.storages.alias.storages[owner] if owner is not None else None
    if kept is None or kept.kind != "activation" or \
            kept.graph != f"{walk.prefix}{body.target}/":
        return []
    return [arg for o in described.operands if o.sliced for arg in node.args[o.position]]


def _overwritable(walk: _Walk, node: torch.fx.Node) -> list[Any]:
    """The arguments the node's first output may be written over, by its schema or, for a
    loop, by how it runs (``_loop_slices``)."""
    if isinstance(node.target, torch._ops.OpOverload) and not node.meta.get(
            "unbacked_bindings"):
        return [node.args[p] for p in overwritable_arguments(node.target)
                if p < len(node.args)]
    return _loop_slices(walk, node)


def _walk_graph(walk: _Walk, nodes: Sequence[torch.fx.Node]) -> list[Reuse]:
    """The reuses of one graph's walk, made in ``walk.storages`` as they are found."""
    reuses = []
    for step, node in enumerate(nodes):
        arguments = _overwritable(walk, node)
        output = _output(walk, node) if arguments else None
        out_spec = walk.specs.spec_of(output[0]) if output else None
        if out_spec is None:
            continue
        for arg in arguments:
            storage = _candidate(walk, node, step, arg, out_spec)
            if storage is not None:
                _take_over(walk, output, storage)
                reuses.append(Reuse(output[0], walk.name(arg), storage))
                break
    return reuses


def _take_over(walk: _Walk, output: tuple[str, int], storage: int) -> None:
    value, source = output
    walk.last_read[storage] = walk.last_read[source]
    walk.storages.merge(storage, source)
    walk.dense.add(value)
