"""Stage 0: patch-by-patch execution of a network's high-resolution prefix (a program rewrite).

A convolutional network's peak is a few high-resolution feature maps near its input. Running
the layers up to a *split* value once per output patch, each on the input region that patch
needs (its receptive field, with the halo), keeps only one patch's maps live at a time; the
patches are concatenated into the split value and the rest of the network runs as before
(MCUNetV2's patch-based inference). ``patch_emit.patch_program`` is a pure function from a
program to a program, built node by node (``rebuild.py``): the patched program is an ordinary
``ExportedProgram`` for every later stage. The rewrite is four modules: ``windows.py`` the
spatial rules (which ops run per patch, each op's window), ``splits.py`` where a network can be
split and the region each value is computed on, ``patch_emit.py`` the patched program, and this
one the choice of split and grid by the planned arena within a multiply-add budget.

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

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import torch
import torch.fx
from torch.export import ExportedProgram

from tensorplan.errors import InputError
from tensorplan.frontend.dim_names import dim_names
from tensorplan.rewrite.int8 import int8_conv, macs_per_output, quantizes
from tensorplan.rewrite.patch_emit import patch_program
from tensorplan.rewrite.splits import Split, behind, splits, stopped, tile_regions
from tensorplan.rewrite.windows import (
    CONV,
    PAD,
    Grid,
    Region,
    reduces_space,
    spatial_extent,
    window,
)


def _is_conv(node: torch.fx.Node) -> bool:
    """An ATen or a Cortex-M int8 convolution."""
    return node.target is CONV or int8_conv(node) is not None


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
    return sum(_conv_macs(conv, have[conv.name]) for row in tile_regions(split, nodes, grid)
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
        _tiled_macs(behind(split, nodes[name].args[0].name, nodes), nodes, grid)
        for name in split.once if reduces_space(nodes[name]))
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
    planned_bytes: int | None = None  # its arena by the compile's own planner, for those
    #                                   within ESTIMATE_MARGIN of the least greedy arena


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
ESTIMATE_MARGIN = 0.15  # greedy's arena can be this far above the compile's planner's (ResNet8
#                         int8, 2x2 from the int8 image: 30,688 B greedy, 27,936 B "auto"), so
#                         candidates this close to the least are planned again to be ranked


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
        if nodes[split.node].target is not PAD \
                and any(window(nodes[name]) is not None for name in split.region):
            reductions = sum(reduces_space(nodes[name]) for name in split.once)
            kept[(spatial_extent(nodes[split.node]), reductions)] = split
    return list(kept.values())


def _dynamic_dims(program: ExportedProgram) -> list[str]:
    """The program's dynamic dims, by their Dim names. Patches read sizes as ints, which would
    fix a dynamic dim at its example size in the program's ShapeEnv, so they are refused
    before anything reads one."""
    names = dim_names(program)
    return sorted(names.get(str(symbol), str(symbol)) for symbol in program.range_constraints
                  if getattr(symbol, "is_Symbol", False))


def choose(program: ExportedProgram, patches: str | Grid, max_overhead: float,
           arena_of: Callable[[ExportedProgram], int],
           planned_of: Callable[[ExportedProgram], int] | None = None
           ) -> tuple[ExportedProgram, Patching]:
    """The program to compile and what was tried: each grid (``AUTO_GRIDS`` for ``"auto"``)
    at the ``SPLITS_PER_GRID`` deepest splits (one per resolution) whose multiply-adds stay
    within ``max_overhead``; the smallest planned arena is kept (the program as exported unless
    a patching is strictly smaller). ``arena_of`` plans a program fast (greedy) and returns its
    arena bytes; ``planned_of``, when given, plans as the compile will, and ranks again the
    candidates within ``ESTIMATE_MARGIN`` of the least fast arena (``Candidate.planned_bytes``).
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
    families = [splits(program)]
    if any(quantizes(node) for node in program.graph.nodes):  # the quantize per patch too
        families.append(splits(program, whole_quantize=False))
    for grid in grids:
        for found in families:
            costs = {}
            for split in found:
                rows, cols = spatial_extent(nodes[split.node])
                if grid != (1, 1) and grid[0] <= rows and grid[1] <= cols:
                    costs[split.node] = overhead(program, split, grid)
            kept = _deepest_per_resolution(
                [s for s in found if costs.get(s.node, math.inf) <= max_overhead], nodes)
            for split in kept[-SPLITS_PER_GRID:]:
                cost = costs[split.node]
                patched = patch_program(program, split, grid)
                candidate = Candidate(split.node, grid, arena_of(patched), cost, split.source)
                tried.append(candidate)
                programs[candidate] = patched
    if planned_of is not None:
        tried = _planned_again(tried, programs, planned_of)
    best = min(tried, key=_rank)
    if _rank(best)[0] >= _rank(tried[0])[0]:  # the program as exported, planned again or not
        best = tried[0]
    return programs[best], Patching(best, tuple(tried), max_overhead, stopped=stopped(program))


def _planned_again(tried: list[Candidate], programs: dict[Candidate, ExportedProgram],
                   planned_of: Callable[[ExportedProgram], int]) -> list[Candidate]:
    """``tried`` with ``planned_bytes`` set on those within ``ESTIMATE_MARGIN`` of the least
    greedy arena (the program as exported among them when it is), and ``programs`` keyed by
    the new candidates too."""
    least = min(c.arena_bytes for c in tried)
    again = []
    for candidate in tried:
        if candidate.arena_bytes <= least * (1 + ESTIMATE_MARGIN):
            planned = replace(candidate, planned_bytes=planned_of(programs[candidate]))
            programs[planned] = programs[candidate]
            candidate = planned
        again.append(candidate)
    return again


def _rank(candidate: Candidate) -> tuple[int, int, float]:
    """What the choice minimises: the compile's planner's arena where it was planned so, else
    greedy's (the compile's planner starts from greedy's plan, so one not planned again is
    above every one that was), then greedy's, then the overhead."""
    planned = candidate.planned_bytes
    return (planned if planned is not None else candidate.arena_bytes, candidate.arena_bytes,
            candidate.overhead)
