"""The peak of a program whose regions would run part by part, read off the program as it is.

``chunks.py`` runs a region once per chunk of token rows. Ranking the chunk counts by planning
each rewritten program costs a rewrite and a schedule per count; :func:`peak_in_parts` ranks
them from the program as exported: the peak bytes live at once when it runs in graph order with
one buffer per value (a view in its source's), every :class:`Parted` region's values at the
size one part of them takes (its largest), a value a region reads from outside live until the
region's last part, and the region's split (the value its parts are joined into) whole from its
first part on. The plan of the candidate kept is the real figure. (Patch grids are planned each:
on MobileNetV2 this graph-order peak ranked the grid that plans smallest fourth of six.)

Worked example: ``x -> mm_a -> gelu -> mm_b (the split) -> head`` with ``mm_a``, ``gelu`` and
``mm_b`` in one region of 4 chunks of a quarter of the rows each: the peak is ``x`` (live
until ``mm_b``) + a quarter of ``mm_a``'s output + a quarter of ``gelu``'s + the whole of
``mm_b``'s, instead of ``mm_a``'s + ``gelu``'s whole.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.fx
from torch.export import ExportedProgram

from tensorplan.ops.schemas import is_view
from tensorplan.rewrite.rows import sizes


@dataclass(frozen=True)
class Parted:
    """A region the rewrite would run part by part."""

    split: str  # the value the parts are joined into (whole from the first part on)
    nodes: tuple[str, ...]  # every node run per part, in graph order (the split among them)
    part_bytes: Mapping[str, int]  # a node's bytes in its largest part (the others: whole)


def tensor_bytes(node: torch.fx.Node) -> int:
    """Bytes of the node's traced value (the sum over a tuple's tensors; symbolic sizes read
    as ``rows.sizes`` does)."""
    value = node.meta.get("val")
    values = value if isinstance(value, (tuple, list)) else [value]
    return sum(math.prod(sizes(v)) * v.element_size() for v in values
               if isinstance(v, torch.Tensor))


def is_view_value(node: torch.fx.Node) -> bool:
    """A value in its source's storage: a view, or an item of a view op's tuple."""
    op = node.target
    if op is operator.getitem:
        return is_view_value(node.args[0])
    return isinstance(op, torch._ops.OpOverload) and is_view(op)


def _root(node: torch.fx.Node, roots: Mapping[str, str]) -> str:
    """The value whose buffer ``node`` lives in (its own, or its view source's)."""
    if is_view_value(node) and isinstance(node.args[0], torch.fx.Node):
        return roots.get(node.args[0].name, node.args[0].name)
    return node.name


def constants(program: ExportedProgram) -> set[str]:
    """The parameters, constant tensors and buffers never written, and every value made from
    them alone (a weight's transpose): computed once, whole (folded), never by rows or
    patches."""
    written = {s.target for s in program.graph_signature.output_specs
               if s.kind.name == "BUFFER_MUTATION"}
    found = {s.arg.name for s in program.graph_signature.input_specs
             if s.kind.name in ("PARAMETER", "CONSTANT_TENSOR")
             or (s.kind.name == "BUFFER" and s.target not in written)}
    for node in program.graph.nodes:
        if node.op == "call_function" and node.all_input_nodes and all(
                n.name in found for n in node.all_input_nodes):
            found.add(node.name)
    return found


def peak_in_parts(program: ExportedProgram, parted: Sequence[Parted]) -> int:
    """The peak bytes live at once in graph order with ``parted`` run part by part (see the
    module docstring); ``constants`` take no buffer. Symbolic sizes are read at the point
    ``rows.sizes_at`` sets: call it within the dims' upper bounds for a program with dynamic
    dims."""
    order = [n for n in program.graph.nodes if n.op == "call_function"]
    index = {n.name: i for i, n in enumerate(order)}
    region_of = {name: p for p in parted for name in p.nodes}
    first = {p.split: index[p.nodes[0]] for p in parted}
    roots: dict[str, str] = {}
    size: dict[str, int] = {}
    live: dict[str, list[int]] = {}
    fixed = constants(program)
    for i, node in enumerate(order):
        if node.name in fixed:
            continue
        region = region_of.get(node.name)
        root = roots[node.name] = _root(node, roots)
        if root == node.name:
            own = region is not None and node.name != region.split
            size[root] = region.part_bytes.get(node.name, tensor_bytes(node)) if own \
                else tensor_bytes(node)
            live[root] = [first.get(node.name, i), i]
        for arg in node.all_input_nodes:
            span = live.get(roots.get(arg.name, arg.name))
            if span is not None:  # an activation (inputs and constants are not counted)
                outside = region is not None and region_of.get(arg.name) is not region
                span[1] = max(span[1], index[region.split] if outside else i)
    change = [0] * (len(order) + 1)
    for root, (start, stop) in live.items():
        change[start] += size[root]
        change[stop + 1] -= size[root]
    peak = total = 0
    for delta in change:
        total += delta
        peak = max(peak, total)
    return peak
