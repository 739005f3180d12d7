"""The patched program, built node by node (``rebuild.py``): a split's prefix run once per tile
of a grid, each tile's inputs cut from their regions and padded where the original padded,
the tiles concatenated into the split value (``patches.py`` chooses the split and grid).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram

from tensorplan.errors import InputError
from tensorplan.ops.schemas import scratch_position
from tensorplan.rewrite.int8 import image_positions, int8_conv, unpadded
from tensorplan.rewrite.rebuild import Rebuild
from tensorplan.rewrite.splits import Split, behind, clip_region, tile_regions
from tensorplan.rewrite.windows import (
    AVG_POOL,
    CONV,
    MAX_POOL,
    MEAN,
    PAD,
    Grid,
    Region,
    aten,
    reduces_space,
    spatial_extent,
    spatial_inputs,
    window,
)

PATCH_TAG = "_patch"  # a patch's node is named its original's name and this (fx numbers them)


class _Emit:
    """New nodes of the patched program: each op on the values (nodes) of the graph being
    built, named after the node of the original it runs a patch of."""

    def __init__(self, program: ExportedProgram) -> None:
        self.build = Rebuild(program)

    def __call__(self, target: Any, args: tuple[Any, ...], like: torch.fx.Node,
                 kwargs: Mapping[str, Any] | None = None) -> torch.fx.Node:
        return self.build.emit(target, args, kwargs, like=like, name=f"{like.name}{PATCH_TAG}")


def _cut(emit: _Emit, value: torch.fx.Node, have: Region, want: Region) -> torch.fx.Node:
    """The part ``want`` (inside ``have``) of a value computed on ``have``."""
    for dim, (h, w) in zip((2, 3), zip(have, want, strict=True), strict=True):
        if w != h:
            value = emit(aten.slice.Tensor, (value, dim, w[0] - h[0], w[1] - h[0]), like=value)
    return value


def _padded(emit: _Emit, value: torch.fx.Node, have: Region, needed: Region,
            extent: tuple[int, int], fill: float) -> torch.fx.Node:
    """The input region ``needed`` (maybe past the border) from a value on ``have``."""
    inside = clip_region(needed, extent)
    value = _cut(emit, value, have, inside)
    (r0, r1), (c0, c1) = needed
    pad = [inside[1][0] - c0, c1 - inside[1][1], inside[0][0] - r0, r1 - inside[0][1]]
    return emit(aten.constant_pad_nd.default, (value, pad, fill), like=value) \
        if any(pad) else value


def _dense(emit: _Emit, node: torch.fx.Node, value: torch.fx.Node) -> torch.fx.Node:
    """``value``, read by ``node``, dense in channels-last order when ``node`` is a Cortex-M
    kernel, copied when it is not (a patch cut from a wider map is strided): such a kernel
    reads its image as one NHWC block. Any other reader takes ``value`` as it is."""
    if image_positions(node) is None \
            or value.meta["val"].is_contiguous(memory_format=torch.channels_last):
        return value
    return emit(aten.clone.default, (value,), like=value,
                kwargs={"memory_format": torch.channels_last})


def _own_scratch(emit: _Emit, node: torch.fx.Node) -> dict[str, torch.fx.Node]:
    """A kernel's scratch buffer made anew for this one call (its name -> the new one), so
    each patch's lives only while its call runs; {} for a node without one."""
    position = scratch_position(node)
    if position is None:
        return {}
    scratch = node.args[position]
    return {scratch.name: emit(scratch.target, scratch.args, like=scratch, kwargs=scratch.kwargs)}


def _named(values: Mapping[str, Any], node: torch.fx.Node) -> Any:
    """The value of ``node``, by its name."""
    return values[node.name]


def _only_scratch(node: torch.fx.Node, prefix: set[str]) -> bool:
    """``node`` is read only as the scratch buffer of per-patch kernels (each patch makes its
    own)."""
    return bool(node.users) and all(
        user.name in prefix and (position := scratch_position(user)) is not None
        and user.args[position] is node for user in node.users)


def _windowed(emit: _Emit, node: torch.fx.Node, x: torch.fx.Node,
              env: Mapping[str, Any]) -> torch.fx.Node:
    """A windowed op on an input already padded to its region: the op without padding."""
    fresh = _own_scratch(emit, node)

    def arg(value: Any) -> Any:
        if not isinstance(value, torch.fx.Node):
            return value
        return fresh[value.name] if value.name in fresh else env[value.name]

    args = [arg(a) for a in node.args]
    conv8 = int8_conv(node)
    if conv8 is not None:
        return emit(node.target, (x, *unpadded(args, conv8)[1:]), like=node)
    if node.target is CONV:
        return emit(CONV, (x, args[1], args[2], args[3], [0, 0], args[5], False, args[7],
                            args[8]), like=node)
    win = window(node)
    stride = list(win.stride)
    if node.target is MAX_POOL:
        return emit(MAX_POOL, (x, list(win.kernel), stride, [0, 0], list(win.dilation),
                                False), like=node)
    return emit(AVG_POOL, (x, list(win.kernel), stride, [0, 0], False, True, None), like=node)


def _run(emit: _Emit, node: torch.fx.Node, env: dict[str, Any],
         have: Mapping[str, Region], own: Region) -> torch.fx.Node:
    """One per-patch node on its region ``own``, its spatial inputs cut from their regions."""
    if node.target is operator.getitem:
        return emit(operator.getitem, (env[node.args[0].name], node.args[1]), like=node)
    win = window(node)
    if win is not None:
        source = node.args[0]
        x = _padded(emit, env[source.name], have[source.name], win.needs(own),
                    spatial_extent(source), win.fill)
        return x if node.target is PAD else _windowed(emit, node, _dense(emit, node, x), env)
    images = {a.name for a in spatial_inputs(node)}
    fresh = _own_scratch(emit, node)

    def value(a: Any) -> Any:
        if not isinstance(a, torch.fx.Node):
            return a
        if a.name in fresh:
            return fresh[a.name]
        if a.name not in images:
            return env[a.name]
        return _dense(emit, node, _cut(emit, env[a.name], have[a.name], own))

    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), value)
    return emit(node.target, args, like=node, kwargs=kwargs)


def _run_tile(emit: _Emit, split: Split, nodes: Mapping[str, torch.fx.Node],
              env: Mapping[str, Any], have: Mapping[str, Region]) -> torch.fx.Node:
    """The split value on one tile: its source cut to the tile's region, then the prefix."""
    local = dict(env)
    source = nodes[split.source]
    full = ((0, spatial_extent(source)[0]), (0, spatial_extent(source)[1]))
    local[source.name] = _cut(emit, env[source.name], full, have[source.name])
    for name in split.region:
        local[name] = _run(emit, nodes[name], local, have, have[name])
    return local[split.node]


def _reduced(emit: _Emit, node: torch.fx.Node,
             tiles: Sequence[Sequence[Mapping[str, Region]]], split: Split,
             nodes: Mapping[str, torch.fx.Node], env: Mapping[str, Any]) -> torch.fx.Node:
    """A spatial ``mean``/``sum`` as the sum of its input's tiles (each computed on its own
    region), divided by the pixel count for a mean."""
    total = None
    for row in tiles:
        for have in row:
            part = emit(aten.sum.dim_IntList, (_run_tile(emit, split, nodes, env, have),
                                               [2, 3], True), like=node)
            total = part if total is None else emit(aten.add.Tensor, (total, part), like=node)
    if node.target is MEAN:
        rows, cols = spatial_extent(nodes[split.node])
        total = emit(aten.div.Tensor, (total, rows * cols), like=node)
    keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    return total if keep else emit(aten.view.default, (total, list(node.meta["val"].shape)),
                                   like=node)


def _patches(emit: _Emit, program: ExportedProgram, split: Split, grid: Grid) -> torch.fx.Node:
    """The split value made patch by patch (its spatial reductions and their gates once
    before), concatenated by rows of columns into a node of the split's name."""
    nodes = {n.name: n for n in program.graph.nodes}
    gates = dict(emit.build.env)
    for name in split.once:
        node = nodes[name]
        if reduces_space(node):
            sub = behind(split, node.args[0].name, nodes)
            gates[name] = _reduced(emit, node, tile_regions(sub, nodes, grid), sub, nodes,
                                   gates)
        else:
            known = {**gates, **_own_scratch(emit, node)}  # its scratch: _only_scratch
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs),
                                                 functools.partial(_named, known))
            gates[name] = emit(node.target, args, like=node, kwargs=kwargs)
    rows = []
    for needed in tile_regions(split, nodes, grid):
        row = [_run_tile(emit, split, nodes, gates, have) for have in needed]
        rows.append(emit(aten.cat.default, (row, 3), like=nodes[split.node])
                    if len(row) > 1 else row[0])
    whole = (aten.cat.default, (rows, 2)) if len(rows) > 1 else (aten.alias.default, (rows[0],))
    return emit.build.emit(*whole, like=nodes[split.node], name=split.node)


def patch_program(program: ExportedProgram, split: Split, grid: Grid) -> ExportedProgram:
    """The program with ``split``'s prefix run once per tile of a ``grid`` over the split
    value (tiles as even as the size allows), every other node as it was. Built from the
    program's graph without a second trace (``rebuild.py``).

    Pure: ``program`` is not modified. Raises ``InputError`` for a grid with a dimension
    below 1 or above the split value's rows or columns.
    """
    nodes = {n.name: n for n in program.graph.nodes}
    rows, cols = spatial_extent(nodes[split.node])
    if not (1 <= grid[0] <= rows and 1 <= grid[1] <= cols):
        raise InputError(f"patches: a {grid[0]}x{grid[1]} grid does not fit the split value "
                         f"{split.node!r} of {rows}x{cols}; choose 1 <= rows <= {rows}, "
                         f"1 <= cols <= {cols}")
    emit = _Emit(program)
    prefix = set(split.region) | set(split.once)
    for node in program.graph.nodes:
        if node.name == split.node:
            emit.build.env[node.name] = _patches(emit, program, split, grid)
        elif node.name not in prefix and not _only_scratch(node, prefix):
            emit.build.copy(node)
    return emit.build.program()
