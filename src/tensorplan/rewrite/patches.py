"""Stage 0: patch-by-patch execution of a network's high-resolution prefix (a program rewrite).

A convolutional network's peak is a few high-resolution feature maps near its input. Running
the layers up to a *split* value once per output patch, each on the input region that patch
needs (its receptive field, with the halo), keeps only one patch's maps live at a time; the
patches are concatenated into the split value and the rest of the network runs as before
(MCUNetV2's patch-based inference). :func:`patch_program` is a pure function from a program to a
program, built node by node (``rebuild.py``): the patched program is an ordinary
``ExportedProgram`` for every later stage.

Exactness. Every value ``v`` of the prefix is computed on a region of its rows and columns,
clipped to its extent. An op with a spatial window (a convolution of any stride, dilation,
groups and padding; max and average pooling; ``constant_pad_nd``) needs the input rows
``[o0 * s - p, (o1 - 1) * s - p + d * (k - 1) + 1)`` for output rows ``[o0, o1)``; the part
inside the input is sliced from the input's region, the part outside is the op's own padding
value (0 for a convolution and an average pool counting padding, -inf for a max pool, the pad's
value for a pad), added with ``constant_pad_nd``; the op then runs with no padding of its own.
So the image border is padded exactly where the original padded it, and nowhere else.
Pointwise ops and inference batch norm take the same region of each spatial input.

Global reductions (a squeeze-and-excitation block's ``mean`` over the image) are exact too: the
prefix may hold a ``mean`` or ``sum`` over the two spatial dims of a per-patch value and the
ops that follow it on its small result alone (the gate: 1x1 convolutions, activations). They
run *once*, before the patches: the reduced value is computed patch by patch over a partition
of its extent (its own receptive fields, one more pass over that part of the prefix, counted
in the multiply-adds) and summed; the gate is then an input of every patch, like a weight.

Worked example: ``conv3x3(pad 1) -> relu -> conv3x3(stride 2, pad 1)`` split after the second
convolution (8x8 output) in a 2x1 grid: the top patch's output rows ``[0, 4)`` need rows
``[-1, 8)`` of ``relu`` (row -1 is the second convolution's zero padding), so rows ``[0, 8)``
of ``relu`` and rows ``[-1, 9)`` of the input, of which row -1 is the first convolution's
padding.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram

from tensorplan.errors import InputError
from tensorplan.frontend.dim_names import dim_names
from tensorplan.rewrite.int8 import (
    image_positions,
    int8_conv,
    kernel_size,
    macs_per_output,
    padding_value,
    quantizes,
    scratch_position,
    unpadded,
)
from tensorplan.rewrite.rebuild import Rebuild

Span = tuple[int, int]  # [start, stop) of rows or columns, maybe outside the value's extent
Region = tuple[Span, Span]  # (rows, columns)
Grid = tuple[int, int]  # (rows, columns) of patches

aten = torch.ops.aten
_CONV = aten.convolution.default
_BATCH_NORM = aten._native_batch_norm_legit_no_training.default
_MAX_POOL = aten.max_pool2d_with_indices.default
_AVG_POOL = aten.avg_pool2d.default
_PAD = aten.constant_pad_nd.default
_IDENTITY_LIKE = {aten.clone.default, aten._to_copy.default}
_MEAN, _SUM = aten.mean.dim, aten.sum.dim_IntList


@dataclass(frozen=True)
class Window:
    """How an op's output rows and columns map to its input's: ``kernel``, ``stride``,
    ``padding`` (before) and ``dilation`` per spatial dim, and the value of padded input."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    fill: float

    def needs(self, out: Region) -> Region:
        """The (unclipped) input region the output region ``out`` reads."""
        return tuple(  # type: ignore[return-value]
            (o0 * s - p, (o1 - 1) * s - p + d * (k - 1) + 1)
            for (o0, o1), k, s, p, d in zip(out, self.kernel, self.stride, self.padding,
                                            self.dilation, strict=True))


def _pair(value: Sequence[int] | int) -> tuple[int, int]:
    values = [value] if isinstance(value, int) else list(value)
    return (values[0], values[-1])


def window(node: torch.fx.Node) -> Window | None:
    """The spatial window of a 4-D op the rewrite can run patch by patch, or None."""
    op, args = node.target, node.args
    conv8 = int8_conv(node)
    if conv8 is not None:
        return Window(kernel_size(node), _pair(args[conv8.stride]), _pair(args[conv8.padding]),
                      _pair(args[conv8.dilation]), padding_value(node, conv8))
    if op is _CONV:
        weight = args[1].meta["val"]
        if args[6] or weight.dim() != 4:
            return None
        return Window(tuple(weight.shape[2:]), _pair(args[3]), _pair(args[4]), _pair(args[5]),
                      0.0)
    if op is _MAX_POOL:
        kernel = _pair(args[1])
        stride = _pair(args[2]) if len(args) > 2 and args[2] else kernel
        ceil = len(args) > 5 and args[5]
        indices_read = any(user.args[1] == 1 for user in node.users)
        if ceil or indices_read:
            return None
        return Window(kernel, stride, _pair(args[3]) if len(args) > 3 else (0, 0),
                      _pair(args[4]) if len(args) > 4 else (1, 1), -math.inf)
    if op is _AVG_POOL:
        kernel = _pair(args[1])
        stride = _pair(args[2]) if len(args) > 2 and args[2] else kernel
        padding = _pair(args[3]) if len(args) > 3 else (0, 0)
        ceil, counts = (args[4] if len(args) > 4 else False), (args[5] if len(args) > 5 else True)
        divisor = args[6] if len(args) > 6 else None
        if ceil or divisor is not None or (not counts and padding != (0, 0)):
            return None
        return Window(kernel, stride, padding, (1, 1), 0.0)
    if op is _PAD:
        pad = list(args[1]) + [0] * (4 - len(args[1]))
        if len(args[1]) > 4 or min(pad) < 0:
            return None
        return Window((1, 1), (1, 1), (pad[2], pad[0]), (1, 1), float(args[2]) if len(args) > 2
                      else 0.0)
    return None


def _first(node: Any) -> Any:
    """A node's traced value, or the first of a tuple of them (batch norm, max pool)."""
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value[0] if isinstance(value, (tuple, list)) and value else value


def _spatial(node: Any) -> bool:
    value = _first(node)
    return isinstance(value, torch.Tensor) and value.dim() == 4


def _image_of(arg: Any, extent: tuple[int, int]) -> bool:
    """``arg`` carries the image at ``extent`` (not a per-channel weight broadcast over it)."""
    return _spatial(arg) and _extent(arg) == extent and extent != (1, 1)


def _constant_over_space(arg: Any) -> bool:
    """A tensor argument whose last two dims (where it has them) are 1: the same at every
    pixel, so every patch reads all of it."""
    value = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return isinstance(value, torch.Tensor) and all(int(d) == 1 for d in value.shape[-2:])


def _extent(node: torch.fx.Node) -> tuple[int, int]:
    shape = _first(node).shape
    return int(shape[2]), int(shape[3])


def _runs_per_patch(node: torch.fx.Node) -> bool:
    """A 4-D op the rewrite runs patch by patch (windowed, pointwise, batch norm, getitem)."""
    if node.op != "call_function" or not _spatial(node):
        return False
    op = node.target
    if op is operator.getitem:
        return node.args[1] == 0 and node.args[0].target in (_BATCH_NORM, _MAX_POOL) \
            and _runs_per_patch(node.args[0])
    if op in (_CONV, _MAX_POOL, _AVG_POOL, _PAD) or int8_conv(node) is not None:
        return window(node) is not None
    positions = image_positions(node)
    if positions is not None:  # a Cortex-M pointwise kernel
        return _pointwise_over(node, [node.args[i] for i in positions])
    if op is _BATCH_NORM:
        return True
    aten_op = op if isinstance(op, torch._ops.OpOverload) \
        else getattr(op, "_op", op)  # an edge-dialect operator wraps its ATen overload
    if isinstance(aten_op, torch._ops.OpOverload) and (torch.Tag.pointwise in aten_op.tags
                                                       or aten_op in _IDENTITY_LIKE):
        return _pointwise_over(node, node.all_input_nodes)
    return False


def _pointwise_over(node: torch.fx.Node, operands: Sequence[Any]) -> bool:
    """A pointwise ``node`` runs per patch when one of its tensor ``operands`` is the image
    and every other is the image too or the same at every pixel (read whole by each patch)."""
    out = _extent(node)
    return any(_image_of(a, out) for a in operands) and all(
        _image_of(a, out) or _constant_over_space(a) for a in operands)


def _spatial_inputs(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The arguments of a per-patch op that carry the image (the rest are weights, scalars)."""
    if node.target is operator.getitem:
        return [node.args[0]]
    if node.target in (_CONV, _BATCH_NORM, _MAX_POOL, _AVG_POOL, _PAD) \
            or int8_conv(node) is not None:
        return [node.args[0]]
    positions = image_positions(node)
    operands = node.all_input_nodes if positions is None else [node.args[i] for i in positions]
    return [a for a in operands if _image_of(a, _extent(node))]


@dataclass(frozen=True)
class Split:
    """A value the prefix up to which can run patch by patch."""

    node: str  # the split value (its patches are concatenated)
    region: tuple[str, ...]  # the nodes run per patch, in graph order (the split last)
    source: str  # the graph input they read
    once: tuple[str, ...] = ()  # spatial reductions and what follows from them alone, run
    #                             once before the patches, in graph order


def _reduces_space(node: torch.fx.Node) -> bool:
    """A ``mean`` or ``sum`` of a 4-D value over exactly its two spatial dims."""
    if node.target not in (_MEAN, _SUM) or node.kwargs.get("dtype") is not None \
            or not _spatial(node.args[0]):
        return False
    dims = node.args[1] if len(node.args) > 1 else None
    return dims is not None and sorted(d % 4 for d in dims) == [2, 3]


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
        if node.op != "placeholder" and _is_source(node, users, whole_quantize):
            continue  # the image quantized whole, once: the patches are cut from it
        deps = [n for n in node.all_input_nodes if n.name in per_patch]
        if (_reduces_space(node) and node.args[0].name in per_patch
                and node.args[0].name not in once) or _runs_once(node, once, constants):
            once.add(node.name)
            per_patch[node.name] = {node.name}.union(*(per_patch[n.name] for n in deps))
            continue
        if not _runs_per_patch(node):
            continue
        sources = _spatial_inputs(node)
        if not all((s.name in per_patch and s.name not in once)
                   or _is_source(s, users, whole_quantize) for s in sources):
            continue
        per_patch[node.name] = {node.name}.union(*(per_patch[n.name] for n in deps))
        inputs = {s.name for s in _leaves(node, per_patch, nodes, once, users, whole_quantize)}
        region = per_patch[node.name]
        closed = all(u.name in region for name in region - {node.name}
                     for u in nodes[name].users)
        if closed and len(inputs) == 1 and node.target not in (_BATCH_NORM, _MAX_POOL):
            ordered = [n.name for n in graph.nodes if n.name in region]
            found.append(Split(node.name, tuple(n for n in ordered if n not in once),
                               inputs.pop(), tuple(n for n in ordered if n in once)))
    return found


def _is_source(node: torch.fx.Node, users: Sequence[str], whole_quantize: bool = True) -> bool:
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
        for source in _spatial_inputs(nodes[name]):
            if _is_source(source, users, whole_quantize):
                yield source


def _behind(split: Split, value: str, nodes: Mapping[str, torch.fx.Node]) -> Split:
    """The part of ``split``'s per-patch prefix that ``value`` (a per-patch node) needs."""
    needed, stack = set(), [value]
    while stack:
        name = stack.pop()
        if name in needed or name not in split.region:
            continue
        needed.add(name)
        stack += [s.name for s in _spatial_inputs(nodes[name])]
    return Split(value, tuple(n for n in split.region if n in needed), split.source)


def _tiles(size: int, parts: int) -> list[Span]:
    bounds = [round(i * size / parts) for i in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def _union(a: Region | None, b: Region) -> Region:
    if a is None:
        return b
    return tuple((min(x[0], y[0]), max(x[1], y[1])) for x, y in zip(a, b, strict=True))  # type: ignore[return-value]


def _clip(region: Region, extent: tuple[int, int]) -> Region:
    return tuple((max(a, 0), min(b, n)) for (a, b), n in zip(region, extent, strict=True))  # type: ignore[return-value]


def regions(split: Split, nodes: Mapping[str, torch.fx.Node], tile: Region) -> dict[str, Region]:
    """The clipped region of every per-patch node (and of the source) for one output tile."""
    needed: dict[str, Region] = {split.node: tile}
    for name in reversed(split.region):
        node = nodes[name]
        own = _clip(needed[name], _extent(node)) if _spatial(node) else needed[name]
        needed[name] = own
        win = window(node) if node.target is not operator.getitem else None
        for source in _spatial_inputs(node):
            wanted = win.needs(own) if win else own
            needed[source.name] = _union(needed.get(source.name), wanted)
    source = nodes[split.source]
    needed[split.source] = _clip(needed[split.source], _extent(source))
    return needed


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
    inside = _clip(needed, extent)
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
    if node.target is _CONV:
        return emit(_CONV, (x, args[1], args[2], args[3], [0, 0], args[5], False, args[7],
                            args[8]), like=node)
    win = window(node)
    stride = list(win.stride)
    if node.target is _MAX_POOL:
        return emit(_MAX_POOL, (x, list(win.kernel), stride, [0, 0], list(win.dilation),
                                False), like=node)
    return emit(_AVG_POOL, (x, list(win.kernel), stride, [0, 0], False, True, None), like=node)


def _run(emit: _Emit, node: torch.fx.Node, env: dict[str, Any],
         have: Mapping[str, Region], own: Region) -> torch.fx.Node:
    """One per-patch node on its region ``own``, its spatial inputs cut from their regions."""
    if node.target is operator.getitem:
        return emit(operator.getitem, (env[node.args[0].name], node.args[1]), like=node)
    win = window(node)
    if win is not None:
        source = node.args[0]
        x = _padded(emit, env[source.name], have[source.name], win.needs(own),
                    _extent(source), win.fill)
        return x if node.target is _PAD else _windowed(emit, node, _dense(emit, node, x), env)
    images = {a.name for a in _spatial_inputs(node)}
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


def _tile_regions(split: Split, nodes: Mapping[str, torch.fx.Node], grid: Grid
                  ) -> list[list[dict[str, Region]]]:
    """The regions of every node for each tile of ``grid`` over the split value, by rows."""
    rows, cols = _extent(nodes[split.node])
    return [[regions(split, nodes, ((r0, r1), (c0, c1))) for c0, c1 in _tiles(cols, grid[1])]
            for r0, r1 in _tiles(rows, grid[0])]


def _run_tile(emit: _Emit, split: Split, nodes: Mapping[str, torch.fx.Node],
              env: Mapping[str, Any], have: Mapping[str, Region]) -> torch.fx.Node:
    """The split value on one tile: its source cut to the tile's region, then the prefix."""
    local = dict(env)
    source = nodes[split.source]
    full = ((0, _extent(source)[0]), (0, _extent(source)[1]))
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
    if node.target is _MEAN:
        rows, cols = _extent(nodes[split.node])
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
        if _reduces_space(node):
            sub = _behind(split, node.args[0].name, nodes)
            gates[name] = _reduced(emit, node, _tile_regions(sub, nodes, grid), sub, nodes,
                                   gates)
        else:
            known = {**gates, **_own_scratch(emit, node)}  # its scratch: _only_scratch
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs),
                                                 functools.partial(_named, known))
            gates[name] = emit(node.target, args, like=node, kwargs=kwargs)
    rows = []
    for needed in _tile_regions(split, nodes, grid):
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
    rows, cols = _extent(nodes[split.node])
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


def _is_conv(node: torch.fx.Node) -> bool:
    """An ATen or a Cortex-M int8 convolution."""
    return node.target is _CONV or int8_conv(node) is not None


def _conv_macs(node: torch.fx.Node, region: Region | None = None) -> int:
    """Multiply-adds of one convolution over its whole output, or over ``region`` of it."""
    weight, out, conv8 = node.args[1].meta["val"], node.meta["val"], int8_conv(node)
    per_output = macs_per_output(node, conv8) if conv8 is not None else \
        math.prod(int(d) for d in weight.shape[1:])
    per_pixel = int(out.shape[0]) * int(out.shape[1]) * per_output
    if region is None:
        return per_pixel * int(out.shape[2]) * int(out.shape[3])
    (r0, r1), (c0, c1) = region
    return per_pixel * (r1 - r0) * (c1 - c0)


def multiply_adds(program: ExportedProgram) -> int:
    """Multiply-adds of the program's convolutions (output elements times the window)."""
    return sum(_conv_macs(node) for node in program.graph.nodes if _is_conv(node))


def _tiled_macs(split: Split, nodes: Mapping[str, torch.fx.Node], grid: Grid) -> int:
    """Multiply-adds of ``split``'s per-patch convolutions over every tile of ``grid``."""
    convs = [nodes[name] for name in split.region if _is_conv(nodes[name])]
    return sum(_conv_macs(conv, have[conv.name]) for row in _tile_regions(split, nodes, grid)
               for have in row for conv in convs)


def overhead(program: ExportedProgram, split: Split, grid: Grid) -> float:
    """The patched program's convolution multiply-adds over the original's (>= 1: the halos
    are computed by more than one patch, and the prefix of each spatial reduction once more
    before the patches), counted from the regions without rewriting."""
    nodes = {n.name: n for n in program.graph.nodes}
    total = multiply_adds(program)
    if not total:
        return 1.0
    extra = _tiled_macs(split, nodes, grid) + sum(
        _tiled_macs(_behind(split, nodes[name].args[0].name, nodes), nodes, grid)
        for name in split.once if _reduces_space(nodes[name]))
    convs = sum(_conv_macs(nodes[name]) for name in split.region if _is_conv(nodes[name]))
    return (total - convs + extra) / total


@dataclass(frozen=True)
class Candidate:
    """One patching tried: where the network is split, the grid, and what it gives."""

    split: str  # the split value ("" for the program as exported)
    grid: Grid  # patch rows, columns ((1, 1): not patched)
    arena_bytes: int  # the planned arena of the patched program (tensorplan's greedy)
    overhead: float  # convolution multiply-adds over the original's
    source: str = ""  # the value the patches are cut from: the image, or its int8 copy


@dataclass(frozen=True)
class Patching:
    """What ``compile(..., patches=...)`` tried and kept."""

    chosen: Candidate  # the one kept (split "" and grid (1, 1): the program as exported)
    candidates: tuple[Candidate, ...]  # every one planned, the unpatched program first
    max_overhead: float  # the multiply-add budget candidates had to meet
    declined: str = ""  # why no patching was tried ("" when candidates were)
    stopped: str = ""  # where every split ends: the first op reading the image without a rule


AUTO_GRIDS: tuple[Grid, ...] = ((2, 2), (3, 3), (4, 4))  # the grids "auto" tries


SPLITS_PER_GRID = 2  # deepest splits within the budget planned per grid


def _deepest_per_resolution(found: Sequence[Split], nodes: Mapping[str, torch.fx.Node]
                            ) -> list[Split]:
    """Of the splits at each spatial size with as many spatial reductions before them, the
    last one, pads aside (later splits at one size hold the same maps per patch and free more
    of the prefix; a pad's output is better split after the convolution that reads it; each
    reduction costs one more pass over the prefix, so a split just before one is kept too).
    A split with no window before it (the image's quantize alone) is left out: its patches
    hold the whole of what they are cut from, and nothing is freed."""
    kept: dict[tuple[tuple[int, int], int], Split] = {}
    for split in found:
        if nodes[split.node].target is not _PAD \
                and any(window(nodes[name]) is not None for name in split.region):
            reductions = sum(_reduces_space(nodes[name]) for name in split.once)
            kept[(_extent(nodes[split.node]), reductions)] = split
    return list(kept.values())


def _dynamic_dims(program: ExportedProgram) -> list[str]:
    """The program's dynamic dims, by their Dim names. Patches read sizes as ints, which would
    fix a dynamic dim at its example size in the program's ShapeEnv, so they are refused
    before anything reads one."""
    names = dim_names(program)
    return sorted(names.get(str(symbol), str(symbol)) for symbol in program.range_constraints
                  if getattr(symbol, "is_Symbol", False))


def choose(program: ExportedProgram, patches: str | Grid, max_overhead: float,
           arena_of: Any) -> tuple[ExportedProgram, Patching]:
    """The program to compile and what was tried: each grid (``AUTO_GRIDS`` for ``"auto"``)
    at the ``SPLITS_PER_GRID`` deepest splits (one per resolution) whose multiply-adds stay
    within ``max_overhead``; the smallest planned arena is kept (the program as exported unless
    a patching is strictly smaller). ``arena_of`` plans a program and returns its arena bytes.
    A program with dynamic dims is kept as it is, with the reason in ``Patching.declined``.
    """
    if patches != "auto" and not (isinstance(patches, tuple) and len(patches) == 2
                                  and all(isinstance(n, int) and n >= 1 for n in patches)):
        raise InputError(f"patches: expected None, \"auto\" or (rows, cols) of positive ints, "
                         f"got {patches!r}")
    nodes = {n.name: n for n in program.graph.nodes}
    grids = AUTO_GRIDS if patches == "auto" else (patches,)
    base = Candidate("", (1, 1), arena_of(program), 1.0)
    dynamic = _dynamic_dims(program)
    if dynamic:
        return program, Patching(base, (base,), max_overhead, (
            f"not patched: patches are cut at static sizes, and the program has dynamic dims "
            f"({', '.join(dynamic)}); export it at fixed sizes to patch it"))
    tried, programs = [base], {base: program}
    families = [_deepest_per_resolution(splits(program), nodes)]
    if any(quantizes(node) for node in program.graph.nodes):  # the quantize per patch too
        families.append(_deepest_per_resolution(splits(program, whole_quantize=False), nodes))
    for grid in grids:
        for found in families:
            within = []
            for split in found:
                rows, cols = _extent(nodes[split.node])
                if grid != (1, 1) and grid[0] <= rows and grid[1] <= cols:
                    cost = overhead(program, split, grid)
                    if cost <= max_overhead:
                        within.append((split, cost))
            for split, cost in within[-SPLITS_PER_GRID:]:
                patched = patch_program(program, split, grid)
                candidate = Candidate(split.node, grid, arena_of(patched), cost, split.source)
                tried.append(candidate)
                programs[candidate] = patched
    best = min(tried, key=lambda c: (c.arena_bytes, c.overhead))
    if best.arena_bytes >= base.arena_bytes:
        best = base
    return programs[best], Patching(best, tuple(tried), max_overhead, stopped=stopped(program))


def stopped(program: ExportedProgram) -> str:
    """Why the patches end where they do: the first node, in graph order, that reads the
    image (a user input, a quantized one, or a value made from it patch by patch) and has no
    patch rule (a window, a pointwise image rule), named with its op; "" when none does. A
    spatial reduction and its gate are not stops (they run once, before the patches)."""
    users = [s.arg.name for s in program.graph_signature.input_specs
             if s.kind.name == "USER_INPUT"]
    reach: set[str] = set()
    for node in program.graph.nodes:
        if _is_source(node, users) and _spatial(node):
            reach.add(node.name)
            continue
        if node.op != "call_function" or not any(a.name in reach for a in node.all_input_nodes):
            continue
        if _runs_per_patch(node) and all(a.name in reach for a in _spatial_inputs(node)):
            reach.add(node.name)
        elif not _reduces_space(node):
            op = getattr(node.target, "__name__", str(node.target))
            return (f"the patches end at node {node.name!r} ({op}): it reads the image and "
                    f"has no patch rule (a window or a pointwise rule over the image)")
    return ""
