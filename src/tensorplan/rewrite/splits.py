"""Where a network can be split for the patch rewrite (``patches.py``), and the region every
value of the prefix is computed on for one output tile.

A *split* is a value whose prefix (the nodes before it that run patch by patch, or once: spatial
reductions and their gates) is read by nothing after it and reads one image: a user input, or
its Cortex-M quantized copy. :func:`regions` walks the prefix backwards from a tile of the
split value through each op's window (``windows.py``), clipping to each value's extent;
:func:`stopped` names the first op that ends every split.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.fx
from torch.export import ExportedProgram

from tensorplan.rewrite.int8 import quantizes
from tensorplan.rewrite.windows import (
    BATCH_NORM,
    MAX_POOL,
    Grid,
    Region,
    Span,
    is_spatial,
    reduces_space,
    runs_per_patch,
    spatial_extent,
    spatial_inputs,
    window,
)


@dataclass(frozen=True)
class Split:
    """A value the prefix up to which can run patch by patch."""

    node: str  # the split value (its patches are concatenated)
    region: tuple[str, ...]  # the nodes run per patch, in graph order (the split last)
    source: str  # the graph input they read
    once: tuple[str, ...] = ()  # spatial reductions and what follows from them alone, run
    #                             once before the patches, in graph order


def _constant_names(program: ExportedProgram) -> set[str]:
    return {s.arg.name for s in program.graph_signature.input_specs
            if s.kind.name in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR")}


def _runs_once(node: torch.fx.Node, once: set[str], constants: set[str]) -> bool:
    """An ATen op (not random) on reduced values and constants alone, at least one reduced."""
    op = node.target
    if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload) \
            or torch.Tag.nondeterministic_seeded in op.tags:
        return False
    inputs = node.all_input_nodes
    return any(n.name in once for n in inputs) and all(
        n.name in once or n.name in constants for n in inputs)


def splits(program: ExportedProgram, whole_quantize: bool = True) -> list[Split]:
    """Every value where the network can be split, in graph order: the nodes before it that
    run per patch (or once: spatial reductions and their gates) are read by nothing after
    it, and they read one 4-D user input (``whole_quantize``: or its Cortex-M quantized copy,
    made once, whole; else the quantize runs per patch like any pointwise kernel)."""
    graph = program.graph
    users = [s.arg.name for s in program.graph_signature.input_specs
             if s.kind.name == "USER_INPUT"]
    constants = _constant_names(program)
    found = []
    per_patch: dict[str, set[str]] = {}  # node -> the prefix nodes it depends on
    once: set[str] = set()
    nodes = {n.name: n for n in graph.nodes}
    for node in graph.nodes:
        if node.op == "call_function" and node.all_input_nodes and all(
                n.name in constants for n in node.all_input_nodes):
            constants.add(node.name)  # a weight's transpose: it runs once, as exported
            continue
        if node.op != "placeholder" and is_source(node, users, whole_quantize):
            continue  # the image quantized whole, once: the patches are cut from it
        deps = [n for n in node.all_input_nodes if n.name in per_patch]
        if (reduces_space(node) and node.args[0].name in per_patch
                and node.args[0].name not in once) or _runs_once(node, once, constants):
            once.add(node.name)
            per_patch[node.name] = {node.name}.union(*(per_patch[n.name] for n in deps))
            continue
        if not runs_per_patch(node):
            continue
        sources = spatial_inputs(node)
        if not all((s.name in per_patch and s.name not in once)
                   or is_source(s, users, whole_quantize) for s in sources):
            continue
        per_patch[node.name] = {node.name}.union(*(per_patch[n.name] for n in deps))
        inputs = {s.name for s in _leaves(node, per_patch, nodes, once, users, whole_quantize)}
        region = per_patch[node.name]
        closed = all(u.name in region for name in region - {node.name}
                     for u in nodes[name].users)
        if closed and len(inputs) == 1 and node.target not in (BATCH_NORM, MAX_POOL):
            ordered = [n.name for n in graph.nodes if n.name in region]
            found.append(Split(node.name, tuple(n for n in ordered if n not in once),
                               inputs.pop(), tuple(n for n in ordered if n in once)))
    return found


def is_source(node: torch.fx.Node, users: Sequence[str], whole_quantize: bool = True) -> bool:
    """A value patches may be cut from: a user input, or (``whole_quantize``) a user input
    quantized whole by a Cortex-M ``quantize_per_tensor`` (once, so the float image dies there
    and the patches read its int8 copy, a quarter of its bytes)."""
    if node.op == "placeholder":
        return node.name in users
    return whole_quantize and quantizes(node) and node.args[0].op == "placeholder" \
        and node.args[0].name in users


def _leaves(node: torch.fx.Node, per_patch: Mapping[str, set[str]],
            nodes: Mapping[str, torch.fx.Node], once: set[str],
            users: Sequence[str], whole_quantize: bool) -> Iterable[torch.fx.Node]:
    """The inputs (user inputs, quantized user inputs) the per-patch nodes behind ``node``
    read."""
    for name in per_patch[node.name] - once:
        for source in spatial_inputs(nodes[name]):
            if is_source(source, users, whole_quantize):
                yield source


def behind(split: Split, value: str, nodes: Mapping[str, torch.fx.Node]) -> Split:
    """The part of ``split``'s per-patch prefix that ``value`` (a per-patch node) needs."""
    needed, stack = set(), [value]
    while stack:
        name = stack.pop()
        if name in needed or name not in split.region:
            continue
        needed.add(name)
        stack += [s.name for s in spatial_inputs(nodes[name])]
    return Split(value, tuple(n for n in split.region if n in needed), split.source)


def _tiles(size: int, parts: int) -> list[Span]:
    bounds = [round(i * size / parts) for i in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def _union(a: Region | None, b: Region) -> Region:
    if a is None:
        return b
    return tuple((min(x[0], y[0]), max(x[1], y[1])) for x, y in zip(a, b, strict=True))  # type: ignore[return-value]


def clip_region(region: Region, extent: tuple[int, int]) -> Region:
    return tuple((max(a, 0), min(b, n)) for (a, b), n in zip(region, extent, strict=True))  # type: ignore[return-value]


def regions(split: Split, nodes: Mapping[str, torch.fx.Node], tile: Region) -> dict[str, Region]:
    """The clipped region of every per-patch node (and of the source) for one output tile."""
    needed: dict[str, Region] = {split.node: tile}
    for name in reversed(split.region):
        node = nodes[name]
        own = clip_region(needed[name], spatial_extent(node)) if is_spatial(node) else needed[name]
        needed[name] = own
        win = window(node) if node.target is not operator.getitem else None
        for source in spatial_inputs(node):
            wanted = win.needs(own) if win else own
            needed[source.name] = _union(needed.get(source.name), wanted)
    source = nodes[split.source]
    needed[split.source] = clip_region(needed[split.source], spatial_extent(source))
    return needed


def tile_regions(split: Split, nodes: Mapping[str, torch.fx.Node], grid: Grid
                  ) -> list[list[dict[str, Region]]]:
    """The regions of every node for each tile of ``grid`` over the split value, by rows."""
    rows, cols = spatial_extent(nodes[split.node])
    return [[regions(split, nodes, ((r0, r1), (c0, c1))) for c0, c1 in _tiles(cols, grid[1])]
            for r0, r1 in _tiles(rows, grid[0])]


def stopped(program: ExportedProgram) -> str:
    """Why the patches end where they do: the first node, in graph order, that reads the
    image (a user input, a quantized one, or a value made from it patch by patch) and has no
    patch rule (a window, a pointwise image rule), named with its op; "" when none does. A
    spatial reduction and its gate are not stops (they run once, before the patches)."""
    users = [s.arg.name for s in program.graph_signature.input_specs
             if s.kind.name == "USER_INPUT"]
    reach: set[str] = set()
    for node in program.graph.nodes:
        if is_source(node, users) and is_spatial(node):
            reach.add(node.name)
            continue
        if node.op != "call_function" or not any(a.name in reach for a in node.all_input_nodes):
            continue
        if runs_per_patch(node) and all(a.name in reach for a in spatial_inputs(node)):
            reach.add(node.name)
        elif not reduces_space(node):
            op = getattr(node.target, "__name__", str(node.target))
            return (f"the patches end at node {node.name!r} ({op}): it reads the image and "
                    f"has no patch rule (a window or a pointwise rule over the image)")
    return ""
