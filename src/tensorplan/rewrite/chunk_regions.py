"""The regions the chunk rewrite (``chunks.py``) may run chunk by chunk, found by the row rules
(``rows.py``) walked back from each candidate split, and the sizes they are read at.

:func:`regions` walks the graph from its end: a candidate split ``y`` along one of its dims has
the region of every value whose rows a chunk of ``y`` needs, read by nothing outside the region
and always at the same rows; values read whole (the keys of ``q @ k^T``) are computed once,
before the chunks. With dynamic dims the rules are read at the upper bounds and again at a
probe size inside the range (:func:`found_regions`): the regions must be the same at both.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import sympy
import torch
import torch.fx
from torch.export import ExportedProgram
from torch.utils import _pytree as pytree
from torch.utils._sympy.numbers import int_oo

from tensorplan.rewrite.parts import constants, is_view_value
from tensorplan.rewrite.region import Region
from tensorplan.rewrite.rows import (
    WHOLE,
    Need,
    Rows,
    Unsized,
    current_point,
    has_rule,
    input_rows,
    shape,
    sizes,
    sizes_at,
)

aten = torch.ops.aten


@dataclass(frozen=True)
class Whole:
    """A large value left whole, and why."""

    value: str
    nbytes: int
    reason: str


def value_bytes(node: torch.fx.Node) -> int:
    """The bytes of a node's value (of its largest tensor, for a tuple)."""
    value = node.meta.get("val")
    values = value if isinstance(value, (tuple, list)) else [value]
    return max((math.prod(sizes(v)) * v.element_size() for v in values
                if isinstance(v, torch.Tensor)), default=0)


@contextmanager
def _sized(program: ExportedProgram) -> Iterator[None]:
    """Sizes read at the point set already, else at the dims' upper bounds."""
    if current_point():
        yield
        return
    with sizes_at({symbol: int(bounds.upper)
                   for symbol, bounds in program.range_constraints.items()
                   if bounds.upper != int_oo}):
        yield


def at_bounds(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function(program, ...)`` with its sizes read as ``_sized`` says."""
    @functools.wraps(function)
    def sized(program: ExportedProgram, *args: Any, **kwargs: Any) -> Any:
        with _sized(program):
            return function(program, *args, **kwargs)
    return sized


def _is_check(node: torch.fx.Node) -> bool:
    """A node with no value and no reader: an assertion on its inputs."""
    return node.op == "call_function" and node.meta.get("val") is None and not node.users


def _readers(node: torch.fx.Node) -> list[torch.fx.Node]:
    return [u for u in node.users if not _is_check(u)]


class _Walk:
    """One region search from a split: the rows each value is read at, and why a value was
    left out of the region."""

    def __init__(self, index: Mapping[str, int], taken: set[str], fixed: set[str]) -> None:
        self.index, self.taken, self.fixed = index, taken, fixed
        self.cuts: set[str] = set()  # splits of regions still to be found (``_cut``)
        self.reasons: dict[str, str] = {}

    def _rows_of(self, node: torch.fx.Node, needs: Mapping[str, list[tuple[str, Need]]],
                 region: Mapping[str, Rows]) -> Rows | None:
        """The rows ``node`` runs at in the region, or None (and why, in ``reasons``)."""
        read = needs[node.name]
        whole = next((user for user, need in read if need == WHOLE), None)
        outside = next((u.name for u in _readers(node) if u.name not in region), None)
        if node.op != "call_function":
            reason = "a graph input"
        elif node.name in self.taken:
            reason = "in another region"
        elif node.name in self.cuts:
            reason = "the split of another region"
        elif node.name in self.fixed:
            reason = "a constant (computed once)"
        elif whole is not None:
            reason = f"read whole by {whole}"
        elif outside is not None:
            reason = f"read by {outside}, outside the region"
        elif len({need for _, need in read}) > 1:
            reason = "read at different rows"
        else:
            return read[0][1]  # type: ignore[return-value]
        self.reasons.setdefault(node.name, reason)
        return None

    def region(self, split: torch.fx.Node, dim: int) -> dict[str, tuple[Rows, dict[str, Need]]]:
        """Every node of the region of ``split`` along ``dim`` with its rows and needs (empty
        when the split itself cannot be made by rows)."""
        found: dict[str, tuple[Rows, dict[str, Need]]] = {}
        rows_of: dict[str, Rows] = {}
        needs: dict[str, list[tuple[str, Need]]] = {}
        nodes = {split.name: split}
        heap = [(-self.index[split.name], split.name)]
        while heap:
            _, name = heapq.heappop(heap)
            node = nodes[name]
            rows = Rows(dim) if node is split else self._rows_of(node, needs, rows_of)
            need = None if rows is None else input_rows(node, rows)
            if need is None:
                if rows is not None:
                    self.reasons.setdefault(name, f"{node.target} has no row rule for dim "
                                                  f"{rows.dim}")
                continue
            found[name], rows_of[name] = (rows, need), rows
            for arg in node.all_input_nodes:
                if arg.name in need:
                    if arg.name not in nodes:
                        nodes[arg.name] = arg
                        heapq.heappush(heap, (-self.index[arg.name], arg.name))
                    needs.setdefault(arg.name, []).append((name, need[arg.name]))
        return found


def _region_of(split: torch.fx.Node, dim: int, found: Mapping[str, tuple[Rows, dict]],
               graph: torch.fx.Graph) -> Region:
    members = [n for n in graph.nodes if n.name in found]
    inner = [n for n in members if n is not split and not is_view_value(n)] or [split]
    largest = max(inner, key=value_bytes)
    checks = tuple(u.name for n in members for u in n.users if _is_check(u))
    size = split.meta["val"].shape[dim]
    return Region(split.name, dim, int(shape(split)[dim]), tuple(n.name for n in members),
                  {n.name: found[n.name][0] for n in members},
                  {n.name: found[n.name][1] for n in members}, checks, largest.name,
                  value_bytes(largest),
                  None if isinstance(size, int) else sympy.expand(size.node.expr))


def _best_region(split: torch.fx.Node, walk: _Walk, graph: torch.fx.Graph) -> Region | None:
    """The split's region along the dim whose largest value is largest, when that value is
    larger than the split."""
    best = None
    for dim, extent in enumerate(shape(split)):
        if extent < 2:
            continue
        found = walk.region(split, dim)
        if len(found) > 1:
            region = _region_of(split, dim, found, graph)
            if best is None or region.largest_bytes > best.largest_bytes:
                best = region
    return best if best is not None and best.largest_bytes > value_bytes(split) else None


def _cut(split: torch.fx.Node, region: Region, walk: _Walk, graph: torch.fx.Graph) -> Region:
    """``region``, or its part below its last value (in graph order) that cuts it in two
    regions of the same rows, each holding a value larger than the split and than the cut: a
    value of the split's shape or of a value the region reads by rows (a layer's residual
    stream between its attention and its MLP), made whole by a region of its own, so each
    part can run in as many chunks as its own peak needs (``_fewest``; parts that run alike
    are one region again, ``_joined``). The part below keeps the whole region (``uncut``).
    The cut is left in ``walk.cuts``: later searches stop at it, and it is found as a split
    in its turn."""
    nodes = {n.name: n for n in graph.nodes}
    thin = value_bytes(split)
    streams = {shape(split), *(shape(nodes[name]) for need in region.needs.values()
                               for name, rows in need.items()
                               if name not in region.rows and isinstance(rows, Rows))}
    reasons = dict(walk.reasons)
    for name in reversed(region.nodes[:-1]):
        node = nodes[name]
        if is_view_value(node) or not has_rule(node) or shape(node) not in streams:
            continue
        larger = max(thin, value_bytes(node))
        walk.cuts.add(name)
        found = walk.region(split, region.dim)
        below = _region_of(split, region.dim, found, graph) if len(found) > 1 else None
        if below is not None and below.largest_bytes > larger:
            walk.taken.update(below.nodes)
            above = _best_region(node, walk, graph)
            walk.taken.difference_update(below.nodes)
            if above is not None and above.extent == region.extent \
                    and above.largest_bytes > larger:
                walk.reasons = reasons
                return replace(below, cut=name, uncut=region)
        walk.cuts.discard(name)
    walk.reasons = reasons
    return region


@at_bounds
def regions(program: ExportedProgram, largest: int = 5) -> tuple[list[Region], list[Whole]]:
    """The regions of the program, in graph order, and its ``largest`` values left whole
    (with the reason each is not in a region)."""
    graph = program.graph
    order = list(graph.nodes)
    index = {n.name: i for i, n in enumerate(order)}
    taken: set[str] = set()
    walk = _Walk(index, taken, constants(program))
    found: list[Region] = []
    for node in reversed(order):  # a view is no split: its chunks would be copied by the cat
        if node.name in taken or node.name in walk.fixed or not has_rule(node) \
                or is_view_value(node) or not isinstance(node.meta.get("val"), torch.Tensor):
            continue
        region = _best_region(node, walk, graph)
        if region is not None:
            region = _cut(node, region, walk, graph)
            found.append(region)
            taken.update(region.nodes)
    whole = sorted((n for n in order if n.op == "call_function" and n.name not in taken
                    and n.name not in walk.fixed),
                   key=value_bytes, reverse=True)[:largest]
    outputs = {a.name for a in order[-1].all_input_nodes} if order[-1].op == "output" else set()
    reasons = [Whole(n.name, value_bytes(n), _reason(n, walk.reasons, outputs)) for n in whole]
    return found[::-1], reasons


def _reason(node: torch.fx.Node, reasons: Mapping[str, str], outputs: set[str],
            depth: int = 8) -> str:
    """Why ``node`` is made whole: its own reason, or the first a reader of it has."""
    if node.name in outputs:
        return "an output of the program (made whole)"
    if node.name in reasons:
        return reasons[node.name]
    if not has_rule(node):
        return f"{node.target} has no row rule"
    for reader in _readers(node):
        if depth and (reader.name in reasons or reader.name in outputs):
            return f"read by {reader.name}, made whole: " \
                   f"{_reason(reader, reasons, outputs, depth - 1)}"
    for reader in _readers(node):
        if depth:
            return f"read by {reader.name}, made whole: " \
                   f"{_reason(reader, reasons, outputs, depth - 1)}"
    return "read by no region"


def probe_points(program: ExportedProgram) -> tuple[dict[Any, int], dict[Any, int]] | str:
    """Two points of the dims' box the rules are read at: the upper bounds (the plan's sizes)
    and, for each dim, the largest prime below its bound (``_probe``), or why there are none.
    The probe stays inside the range: past a dim's bound the model itself reads otherwise (a
    position table sliced to its length), and the regions are chosen by sizes (a region's
    largest value against its split's), which must compare there as at the bounds."""
    upper, probe = {}, {}
    static = _static_sizes(program)
    for symbol, bounds in sorted(program.range_constraints.items(), key=lambda kv: str(kv[0])):
        if bounds.upper == int_oo:
            return f"the dim {symbol} has no upper bound: give its Dim a max"
        upper[symbol] = int(bounds.upper)
        probe[symbol] = _probe(int(bounds.lower), int(bounds.upper),
                               static | set(probe.values()))
    return upper, probe


def _static_sizes(program: ExportedProgram) -> set[int]:
    """Every size of a dim that is an int in some value of the program."""
    found: set[int] = set()
    for node in program.graph.nodes:
        for value in pytree.tree_leaves(node.meta.get("val")):
            if isinstance(value, torch.Tensor):
                found.update(d for d in value.shape if type(d) is int)
    return found


def _probe(lower: int, upper: int, taken: set[int]) -> int:
    """The largest prime in ``[lower, upper)`` no static size or other probe equals (no size
    equal to another by chance), else the largest such integer, else the bound itself."""
    free = (n for n in range(upper - 1, lower - 1, -1) if n not in taken)
    first = next(free, None)
    if first is None:
        return upper
    return next((n for n in itertools.chain((first,), free) if sympy.isprime(n)), first)


def _read(found: Sequence[Region]) -> list[tuple[Any, ...]]:
    """What the rules say of each region: its split, dim, nodes, rows and needs."""
    return [(r.split, r.dim, r.nodes, dict(r.rows), {k: dict(v) for k, v in r.needs.items()})
            for r in found]


def found_regions(program: ExportedProgram
           ) -> tuple[list[Region], list[Whole], dict[Any, int]] | str:
    """The regions at the dims' upper bounds (and those bounds), when the rules read at other
    sizes find the same ones (with dynamic dims), or why not."""
    points = probe_points(program)
    if isinstance(points, str):
        return points
    upper, probe = points
    try:
        with sizes_at(upper):
            found, whole = regions(program)
        if upper:
            with sizes_at(probe):
                again, _ = regions(program)
            if _read(again) != _read(found):
                return "the row rules find other regions at other sizes of the dynamic dims"
    except Unsized as error:
        return f"sizes depend on data: {error}"
    return found, whole, upper
