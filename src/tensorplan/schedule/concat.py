"""Stage 3b': concatenation in place — each input of a ``cat`` is made in its slice of the output.

A ``cat`` whose inputs die there copies nothing when every input is planned as a strided view
of its slice of the output's storage: the producers write their results straight into the
slices, the ``cat`` itself runs no kernel, and inputs and output are never live twice
(Inception-style blocks, UNet skips, SqueezeNet fire modules). A ``cat``'s inputs are placed
so, all of them or none (a ``cat`` copying some inputs over others would overlap them), when
each input satisfies:

- its storage is an activation of the graph the ``cat`` is in (the top-level graph or a
  control-flow subgraph: never a subgraph's input or output, which are its caller's) read by
  nothing after the ``cat`` (every value in it: views and in-place reuses included), and no
  other input of the same ``cat`` lives in it;
- every value in its storage that a kernel writes (not a view, not already in a slice of it)
  has the input's shape and layout, and the ``cat`` output has that layout too: the slice is
  the output's strides over the input's shape, at the offset of its first element;
- all sizes are static;
- where the slice is not dense (its strides are not the input's own: a channel slice of a
  batch of 2, the interior of a pad), no kernel reading a value of the input's storage is one
  that refuses a non-dense input (``DENSE_INPUT``: ``native_group_norm``'s CPU kernel fails
  with "Expected X.is_contiguous(memory_format)", as a diffusers UNet's skips at batch 2
  showed). The schemas do not say it: the ops are named where they were measured.

It is done only where it keeps or lowers the bound of the graph it is in: the output's storage
is then live from the first input's definition, which can cost more than it saves when an
input is made long before the ``cat``. The result is a new ``AliasTable`` whose ``slices``
give each placed value's offset and strides inside the output's storage.

A ``cat`` of ``cat``s nests: an input already holding values in its slices (a row of patch
tiles) is placed whole, and each of those values moves into the outer output at its strides
(``_moved``), so a grid of tiles is written straight into the grid's output.

Worked example: ``cat([conv_a(x), conv_b(x)], dim=1)`` with both convolutions read only by the
``cat``: ``convolution`` lives at offset 0 of ``cat``'s storage, ``convolution_1`` at the
offset of channel ``a``'s width, both with ``cat``'s strides.

A ``constant_pad_nd`` (padding only, no cropping) is placed the same way with its one input:
the input is made in the interior of the padded output (offset of the first interior element,
the output's strides), and the pad only writes the border (``runtime``'s ``Kind.PADDED``).
MobileNetV2's ``pad`` before each strided depthwise convolution then costs no second buffer.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.fx
from torch.export import ExportedProgram

from tensorplan.analysis.alias import AliasTable, MergedStorages, Slice, storage_of_value
from tensorplan.analysis.liveness import lifetimes
from tensorplan.ops.control_flow import graph_modules
from tensorplan.ops.schemas import is_view
from tensorplan.schedule.reuse import last_reads, same_memory_layout
from tensorplan.specs.layout import same_layout
from tensorplan.specs.spec import SpecTable, TensorSpec

_CAT = torch.ops.aten.cat.default
_PAD = torch.ops.aten.constant_pad_nd.default
PLACING_OPS = frozenset({_CAT, _PAD})  # the ops whose inputs may be made in their output
# Kernels measured to refuse an input that is not dense in its memory format (CPU, torch 2.13).
DENSE_INPUT = frozenset({torch.ops.aten.native_group_norm.default})


@dataclass(frozen=True)
class _Graph:
    """One graph walked: its value-name prefix, its nodes by value name, its order."""

    prefix: str                      # "" at the top, "<submodule>/" inside a subgraph
    nodes: dict[str, torch.fx.Node]  # value name (prefix + node name) -> node
    order: tuple[str, ...]           # value names in execution order


def _graphs(program: ExportedProgram, order: Sequence[str]) -> list[_Graph]:
    """The top-level graph in ``order`` and every control-flow subgraph in its graph order."""
    graphs = []
    for module, prefix in graph_modules(program.graph_module):
        nodes = {prefix + node.name: node for node in module.graph.nodes}
        graphs.append(_Graph(prefix, nodes, tuple(order) if not prefix else tuple(nodes)))
    return graphs


class _Load:
    """The bytes of one graph's own storages live at each step (the user inputs' only when they
    are in the arena, ``compile(inputs_in_arena=)``), kept up to date as storages
    merge: a merged storage is live over the hull of its parts' lifetimes (each part is an
    activation: live from its first definition to its last read) at the largest part's size,
    as ``MergedStorages`` and ``liveness.py`` make it. The graph's bound after a merge is then
    read without computing every lifetime again (a chunked transformer has hundreds of
    ``cat``s)."""

    def __init__(self, program: ExportedProgram, alias: AliasTable, order: Sequence[str],
                 graph: str, inputs_in_arena: bool) -> None:
        own = lifetimes(program, alias, order)[graph]
        self.span = {lt.storage: (lt.start, lt.end) for lt in own.lifetimes
                     if inputs_in_arena or alias.storages[lt.storage].kind != "input"}
        self.nbytes = {sid: alias.storages[sid].nbytes for sid in self.span}
        delta = [0] * (own.steps + 1)
        for sid, (start, end) in self.span.items():
            delta[start] += self.nbytes[sid]
            delta[end] -= self.nbytes[sid]
        self.load = list(itertools.accumulate(delta))

    def bound(self) -> int:
        """The most bytes live at one step (``lower_bound`` of the graph's storages)."""
        return max(self.load, default=0)

    def merged(self, into: int, sources: Sequence[int]) -> _Load:
        """The load with ``sources`` merged into storage ``into`` (self is not changed)."""
        new = copy.copy(self)
        new.span, new.nbytes, new.load = dict(self.span), dict(self.nbytes), list(self.load)
        parts = [sid for sid in (into, *sources) if sid in new.span]
        if not parts:
            return new
        for sid in parts:
            start, end = new.span.pop(sid)
            new._add(start, end, -new.nbytes.pop(sid))
        start = min(self.span[sid][0] for sid in parts)
        end = max(self.span[sid][1] for sid in parts)
        new.span[into] = (start, end)
        new.nbytes[into] = max(self.nbytes[sid] for sid in parts)
        new._add(start, end, new.nbytes[into])
        return new

    def _add(self, start: int, end: int, nbytes: int) -> None:
        self.load[start:end] = [bytes_ + nbytes for bytes_ in self.load[start:end]]


def _writes_like(values: Sequence[str], nodes: dict[str, torch.fx.Node], specs: SpecTable,
                 spec: TensorSpec) -> bool:
    """Every value a kernel writes (not a view) has ``spec``'s shape and layout."""
    for value in values:
        node = nodes[value.partition("[")[0]]
        if isinstance(node.target, torch._ops.OpOverload) and is_view(node.target):
            continue
        other = specs.spec_of(value)
        if other is None or not same_memory_layout(spec, other):
            return False
    return True


def _interior(node: torch.fx.Node, specs: SpecTable, prefix: str
              ) -> list[tuple[torch.fx.Node, Slice]] | None:
    """The input of a static ``constant_pad_nd`` (no negative padding) with the interior of
    the output it fills, or None."""
    out, arg = specs.spec_of(prefix + node.name), node.args[0]
    spec = specs.spec_of(prefix + arg.name) if isinstance(arg, torch.fx.Node) else None
    pads = list(node.args[1])
    if out is None or spec is None or out.is_dynamic or spec.is_dynamic or spec.is_empty \
            or spec.dtype != out.dtype or any(not isinstance(p, int) or p < 0 for p in pads):
        return None
    before = [0] * (len(out.shape) - len(pads) // 2) + pads[0::2][::-1]
    offset = sum(b * stride for b, stride in zip(before, out.strides, strict=True))
    return [(arg, Slice(offset * out.dtype.itemsize, out.strides))]


def _slices(node: torch.fx.Node, specs: SpecTable, prefix: str
            ) -> list[tuple[torch.fx.Node, Slice]] | None:
    """Each input of a static ``cat`` with its slice of the output (the input of a pad with
    the interior it fills), or None."""
    if node.target is _PAD:
        return _interior(node, specs, prefix)
    out = specs.spec_of(prefix + node.name)
    inputs = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if out is None or out.is_dynamic or not all(isinstance(a, torch.fx.Node) for a in inputs):
        return None
    dim %= len(out.shape)
    placed, start = [], 0
    for arg in inputs:
        spec = specs.spec_of(prefix + arg.name)
        if spec is not None and spec.is_empty:
            continue  # nothing to place (also the 1-D ``(0,)`` input of any rank cat skips)
        if spec is None or spec.is_dynamic or spec.dtype != out.dtype:
            return None
        placed.append((arg, Slice(start * out.strides[dim] * out.dtype.itemsize, out.strides)))
        start += spec.shape[dim]
    return placed


def _dense(spec: TensorSpec, where: Slice) -> bool:
    """The slice has the value's own dense strides (size-1 dims address no other bytes)."""
    return all(size == 1 or own == given
               for size, own, given in zip(spec.shape, spec.strides, where.strides, strict=True))


def _strided_ok(values: Sequence[str], nodes: dict[str, torch.fx.Node]) -> bool:
    """No node reading ``values`` runs a kernel that refuses a non-dense input."""
    return not any(user.target in DENSE_INPUT for value in values
                   for user in nodes[value.partition("[")[0]].users)


def _moved(inner: Slice, spec: TensorSpec, outer: Slice) -> Slice:
    """A slice of a value laid out by ``spec`` (``inner``: at the value's own strides, as a
    ``cat`` places its inputs) once the value itself is made in the slice ``outer`` of a
    larger storage: the same elements at ``outer``'s strides. A tile made in its row of a
    grid, the row made in the grid's output, puts the tile straight in the output. Worked
    example: a float row ``[4, 8]`` made at byte 64 of a ``[8, 8]`` output holds a tile at
    element (0, 4) of the row (``inner`` offset 16 B, strides (8, 1)); moved, the tile starts
    at byte 64 + 16 = 80 with the output's strides (8, 1)."""
    start, rest = [0] * len(spec.shape), inner.offset // spec.dtype.itemsize
    for dim in spec.dim_order:
        if spec.shape[dim] > 1:
            start[dim], rest = divmod(rest, spec.strides[dim])
    offset = sum(index * stride for index, stride in zip(start, outer.strides, strict=True))
    return Slice(outer.offset + offset * spec.dtype.itemsize, outer.strides)


def _is_view(value: str, nodes: dict[str, torch.fx.Node]) -> bool:
    node = nodes[value.partition("[")[0]]
    return isinstance(node.target, torch._ops.OpOverload) and is_view(node.target)


@dataclass(frozen=True)
class _Placed:
    """A ``cat``'s inputs merged into its output's storage."""

    table: AliasTable          # the table with them merged
    slices: dict[str, Slice]   # each value moved -> its slice of the output's storage
    into: int                  # the output's storage
    merged: tuple[int, ...]    # the inputs' storages, now part of ``into``


def _place(table: AliasTable, cat: torch.fx.Node, step: int, specs: SpecTable,
           graph: _Graph, last: dict[int, int]) -> _Placed | None:
    """Every input of ``cat`` merged into its output's storage, when all of them can be made
    in place (``last``: each storage's last read in ``table``); else None."""
    prefix = graph.prefix
    out = specs.spec_of(prefix + cat.name)
    into = storage_of_value(table, prefix + cat.name)
    placed = _slices(cat, specs, prefix)
    if placed is None or into is None or table.storages[into].kind != "activation" \
            or table.storages[into].graph != prefix:
        return None
    inputs = [arg for arg, _ in placed]
    storages = [storage_of_value(table, prefix + arg.name) for arg in inputs]
    for arg, storage in zip(inputs, storages, strict=True):
        spec = specs.spec_of(prefix + arg.name)
        kept = table.storages.get(storage) if storage is not None else None
        if kept is None or storage == into or kept.kind != "activation" \
                or kept.graph != prefix or last.get(storage) != step \
                or storages.count(storage) != 1 \
                or not same_layout(spec.shape, spec.dim_order, out.dim_order) \
                or not _writes_like([v for v in kept.values if v not in table.slices],
                                    graph.nodes, specs, spec):
            return None
    for (arg, where), storage in zip(placed, storages, strict=True):
        if not _dense(specs.spec_of(prefix + arg.name), where) \
                and not _strided_ok(table.storages[storage].values, graph.nodes):
            return None
    merged, slices = MergedStorages(table), {}
    for (arg, where), storage in zip(placed, storages, strict=True):
        spec = specs.spec_of(prefix + arg.name)
        slices.update({v: _moved(table.slices[v], spec, where) if v in table.slices else where
                       for v in table.storages[storage].values
                       if not _is_view(v, graph.nodes)})
        merged.merge(into, storage)
    return _Placed(merged.table(slices), slices, into, tuple(storages))


def concat_in_place(program: ExportedProgram, specs: SpecTable, alias: AliasTable,
                    order: Sequence[str], *, inputs_in_arena: bool = True) -> AliasTable:
    """The alias table with the inputs of every ``cat`` (and ``constant_pad_nd``) that can be
    made in place moved into slices of its output's storage, walking the top-level graph in
    ``order`` and each control-flow subgraph in its graph order; a ``cat`` is kept as it is
    when placing its inputs would raise the bound of its graph (the user inputs counted in it
    only with ``inputs_in_arena``, as the plan counts them).

    Pure: the program and the given table are not modified.
    """
    table = alias
    for graph in _graphs(program, order):
        nodes = [graph.nodes[name] for name in graph.order]
        last, load = last_reads(nodes, table, graph.prefix), None
        for step, node in enumerate(nodes):
            if node.target not in PLACING_OPS:
                continue
            found = _place(table, node, step, specs, graph, last)
            if not found or not found.slices:
                continue
            load = load or _Load(program, table, order, graph.prefix, inputs_in_arena)
            placed = load.merged(found.into, found.merged)
            if placed.bound() <= load.bound():
                table, load = found.table, placed
                last[found.into] = max(last[s] for s in (found.into, *found.merged))
                for storage in found.merged:
                    del last[storage]
    return table
