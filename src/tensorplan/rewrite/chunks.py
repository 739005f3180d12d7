"""Stage 0': the token dim chunk by chunk — a transformer's peak run in row chunks (a rewrite).

A transformer's peak is an intermediate that grows with the sequence and is made whole: the
attention scores and their softmax (heads x S x S), the MLP's S x 4H, the logits. Each of
their rows is a function of the same rows of a few values (the query rows, the residual
stream's rows) and of values read whole (the keys and values, the weights). Running such a
*region* once per chunk of rows, as a loop whose body is the region on one chunk
(``loop.py``), each chunk written into its slice of the region's output (the *split*), holds
one chunk of the intermediates at a time. :func:`chunk_program` is a pure function from a
program to a program: the chunked program is an ordinary ``ExportedProgram`` for every later
stage.

Regions. :func:`regions` walks the graph from its end. A candidate split ``y`` along one of its
dims has the region of every value whose rows that chunk needs (``rows.py``'s rules, applied
backwards from ``y``) that is read by nothing outside the region and always at the same rows;
a value read whole by a region node (the keys of ``q @ k^T``), read at other rows, read after
the split or without a row rule is computed once, before the chunks, and sliced. A region is
kept when it holds a value larger than its split (scores, an MLP's S x 4H): otherwise chunking
adds steps only. A layer's output is read whole by the next layer's keys and values, so a
region is about one layer: its attention by query rows, its MLP and its residuals.

Exact: every op of a region computes rows of its output from rows of its inputs exactly as it
computes them whole (the softmax of a row is over all its keys; nothing splits a reduction),
and no arithmetic is added: the multiply-adds of the chunked program equal the original's.

Worked example: ``softmax(q @ k^T) @ v`` with ``q = x @ wq``, ``k = x @ wk``, ``v = x @ wv``
(``x`` of 64 rows) in 4 chunks: ``k`` and ``v`` are computed once; a loop of four iterations
computes, for rows ``[16 i, 16 i + 16)`` of ``x``, ``q`` (16 rows), the scores (16 x 64), their
softmax and the output rows, and stacks the four output chunks.
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

from tensorplan.errors import InputError
from tensorplan.frontend.dim_names import dim_names, named
from tensorplan.ops.control_flow import control_flow_op, graph_modules
from tensorplan.rewrite.columns import split_products
from tensorplan.rewrite.loop import LOOP_TAG, Loop
from tensorplan.rewrite.parts import (
    Parted,
    constants,
    is_view_value,
    peak_in_parts,
    tensor_bytes,
)
from tensorplan.rewrite.rebuild import Rebuild
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


def _nbytes(node: torch.fx.Node) -> int:
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


def _at_bounds(function: Callable[..., Any]) -> Callable[..., Any]:
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
    largest = max(inner, key=_nbytes)
    checks = tuple(u.name for n in members for u in n.users if _is_check(u))
    size = split.meta["val"].shape[dim]
    return Region(split.name, dim, int(shape(split)[dim]), tuple(n.name for n in members),
                  {n.name: found[n.name][0] for n in members},
                  {n.name: found[n.name][1] for n in members}, checks, largest.name,
                  _nbytes(largest),
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
    return best if best is not None and best.largest_bytes > _nbytes(split) else None


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
    thin = _nbytes(split)
    streams = {shape(split), *(shape(nodes[name]) for need in region.needs.values()
                               for name, rows in need.items()
                               if name not in region.rows and isinstance(rows, Rows))}
    reasons = dict(walk.reasons)
    for name in reversed(region.nodes[:-1]):
        node = nodes[name]
        if is_view_value(node) or not has_rule(node) or shape(node) not in streams:
            continue
        larger = max(thin, _nbytes(node))
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


@_at_bounds
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
                   key=_nbytes, reverse=True)[:largest]
    outputs = {a.name for a in order[-1].all_input_nodes} if order[-1].op == "output" else set()
    reasons = [Whole(n.name, _nbytes(n), _reason(n, walk.reasons, outputs)) for n in whole]
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


def loop_of(name: str) -> str | None:
    """The split a chunked program's node ``name`` was made for by its region's loop
    (``add_5_loop_scan`` -> ``add_5``), or None for a node no loop made."""
    base, tag, _ = name.rpartition(f"{LOOP_TAG}_")
    return base if tag and base else None


@_at_bounds
def chunk_program(program: ExportedProgram, found: Sequence[Region],
                  counts: Sequence[int]) -> ExportedProgram:
    """The program with each region run as a loop (``loop.py``) over at most ``counts[i]``
    chunks of at most ``ceil(rows / counts[i])`` rows of ``found[i]``'s split (its rows at the
    dims' upper bounds), as many chunks as the rows need at each size, each chunk's result
    written into its rows of the split; every other node as it was. The loop's body is the
    region on one chunk, planned once. Built from the program's graph without a second trace
    (``rebuild.py``): the values of the new nodes are computed on the program's fake tensors.
    Call it within ``sizes_at`` the dims' upper bounds.

    Pure: ``program`` is not modified, but for its dims' hints (the sizes a trace branches
    on, ``_generic_hints``). Raises ``InputError`` for a count below 1 or above a region's
    rows, or for a value a loop cannot cut into chunks.
    """
    for region, count in zip(found, counts, strict=True):
        if not 1 <= count <= region.extent:
            raise InputError(f"chunks: {count} chunks do not fit the {region.extent} rows of "
                             f"{region.split!r} (dim {region.dim}); choose 1 to "
                             f"{region.extent}")
    chunked = {r.split: (r, n) for r, n in zip(found, counts, strict=True) if n > 1}
    inside = {name for r, _ in chunked.values() for name in (*r.nodes[:-1], *r.checks)}
    build = Rebuild(program)
    nodes = {n.name: n for n in program.graph.nodes}
    if any(r.symbolic is not None for r, _ in chunked.values()):
        _generic_hints(program, build.fake_mode.shape_env)
    for node in program.graph.nodes:
        if node.name in chunked:
            region, count = chunked[node.name]
            build.env[node.name] = Loop(build, nodes, region,
                                        math.ceil(region.extent / count)).emit()
        elif node.name not in inside:
            build.copy(node)
    for node in reversed(build.graph.nodes):  # a weight's view each loop's body takes itself
        if node.op == "call_function" and not node.users and is_view_value(node):
            build.graph.erase_node(node)
    return build.program()


def _generic_hints(program: ExportedProgram, shape_env: Any) -> None:
    """Move the dims' hints (the example's sizes, which a trace of the program branches on)
    to a size inside their range that is no multiple of a chunk (``_probe``'s prime), as if
    the program had been exported at that size: at the example a loop may run one chunk or pad
    no rows, and a trace (this rewrite's, ExecuTorch's) would take that for every size (a view
    of one chunk, a padding dropped). Only the hints change, on the ShapeEnv and on every
    symbolic size of the program's values: every value, size and range stays as exported."""
    points = _points(program)
    if isinstance(points, str):
        return
    _, probe = points
    for symbol, value in probe.items():
        if symbol in shape_env.backed_var_to_val:
            shape_env.backed_var_to_val[symbol] = sympy.Integer(value)
    for module, _ in graph_modules(program.graph_module):
        for node in module.graph.nodes:
            for leaf in pytree.tree_leaves(node.meta.get("val")):
                sizes = (*leaf.shape, *leaf.stride(), leaf.storage_offset()) \
                    if isinstance(leaf, torch.Tensor) else (leaf,)
                for size in sizes:
                    hint = shape_env._maybe_evaluate_static(size.node.expr, compute_hint=True) \
                        if isinstance(size, torch.SymInt) else None
                    if hint is not None:
                        size.node._hint = int(hint)


_MATMULS = {aten.mm.default: 0, aten.addmm.default: 1, aten.bmm.default: 0,
            aten.baddbmm.default: 1}


@_at_bounds
def multiply_adds(program: ExportedProgram) -> int:
    """Multiply-adds of the program's matmuls and convolutions (output elements times the
    contracted size), a loop's body counted once per iteration."""
    return _multiply_adds(program.graph_module)


def _multiply_adds(module: torch.fx.GraphModule) -> int:
    total = 0
    for node in module.graph.nodes:
        out = shape(node)
        described = control_flow_op(node)
        if described is not None and any(o.sliced for o in described.operands):
            sliced = next(o for o in described.operands if o.sliced)
            times = shape(node.args[sliced.position][0])[0]
            total += times * sum(_multiply_adds(getattr(module, sub.target))
                                 for sub in described.subgraph_nodes(node))
        elif node.target in _MATMULS:
            first = shape(node.args[_MATMULS[node.target]])
            total += math.prod(out) * first[-1]
        elif node.target is aten.convolution.default:
            total += math.prod(out) * math.prod(shape(node.args[1])[1:])
    return total


@_at_bounds
def estimate(program: ExportedProgram, found: Sequence[Region], counts: Sequence[int]) -> int:
    """The peak bytes live at once when the program runs in graph order with ``counts[i]``
    chunks for ``found[i]`` and one buffer per value (a view in its source's), read off the
    program as exported, without rewriting it (``parts.peak_in_parts``): a region's values at
    one chunk's rows, a value a region reads from outside live until the region's last chunk,
    a split from its first chunk on. It ranks chunk counts; the plan of the chosen one is the
    real figure."""
    nodes = {n.name: n for n in program.graph.nodes}
    parted = []
    for region, count in zip(found, counts, strict=True):
        rows = math.ceil(region.extent / count)
        parted.append(Parted(region.split, region.nodes, {
            name: math.ceil(tensor_bytes(nodes[name]) * rows / region.extent)
            for name in region.nodes}))
    return peak_in_parts(program, parted)


@dataclass(frozen=True)
class Candidate:
    """One chunk count tried and what it gives."""

    chunks: int  # chunks per region, the most of any (1: the program as exported)
    estimate_bytes: int  # ``estimate``'s peak (graph order, one buffer per value)
    arena_bytes: int | None = None  # its planned arena (tensorplan's greedy, the compile's
    #                                 switches; None: not planned, its estimate ranked lower)
    overhead: float | None = None  # matmul multiply-adds over the program as exported's
    per_region: tuple[int, ...] = ()  # the chunks of each region chunked (``Chunking.regions``'
    #                                   order), for the one planned


@dataclass(frozen=True)
class Chunking:
    """What ``compile(..., chunks=...)`` tried and kept."""

    chosen: Candidate  # the one kept (chunks 1: the program as exported)
    candidates: tuple[Candidate, ...]  # every one estimated, the program as exported first
    regions: tuple[Region, ...]  # the regions found (chunked when chosen.chunks > 1)
    whole: tuple[Whole, ...]  # the largest values left whole and why
    declined: str  # why nothing was chunked ("" when a chunking was kept)
    max_overhead: float  # the multiply-add budget a chunking had to meet


AUTO_COUNTS: tuple[int, ...] = (2, 4, 8, 16, 32)  # the chunk counts "auto" estimates
AUTO_SLACK = 1.05  # "auto" plans the fewest chunks estimated within this of the least
MIN_CHUNK_ROWS = 8  # "auto" leaves a region at least this many rows per chunk: a matmul of
#                    fewer rows takes MKL's small-matrix path, which sums in another order
#                    (not bitwise equal to the whole), and each chunk adds steps
MAX_OVERHEAD = 1.02  # chunking adds steps, not arithmetic


def _checked(chunks: Any) -> tuple[int, ...]:
    if chunks == "auto":
        return AUTO_COUNTS
    if isinstance(chunks, int) and not isinstance(chunks, bool) and chunks >= 1:
        return (chunks,)
    raise InputError(f"chunks: expected None, \"auto\" or a positive number of chunks, got "
                     f"{chunks!r}")


SMALL_REGION = 0.1  # a region whose largest value is below this share of the largest
#                     region's is kept only where it lowers the estimate


def _counts(found: Sequence[Region], count: int, auto: bool) -> list[int]:
    """Each region's chunks for ``count``: at most its rows, a divisor of its dynamic rows,
    and with ``auto`` at most as many as leave ``MIN_CHUNK_ROWS`` rows each."""
    return [r.fits(count, MIN_CHUNK_ROWS if auto else 1) for r in found]


def _worth_it(program: ExportedProgram, found: Sequence[Region], count: int,
              auto: bool) -> list[Region]:
    """The regions that are chunked at ``count``: without those left one chunk, nor the
    small ones (a norm's statistics, a position count) whose chunking does not lower the
    estimated peak: they would add steps only."""
    kept = [r for r, n in zip(found, _counts(found, count, auto), strict=True) if n > 1]
    largest = max((r.largest_bytes for r in kept), default=0)
    for region in sorted(kept, key=lambda r: r.largest_bytes):
        if region.largest_bytes >= SMALL_REGION * largest:
            break
        without = [r for r in kept if r is not region]
        if estimate(program, without, _counts(without, count, auto)) <= \
                estimate(program, kept, _counts(kept, count, auto)):
            kept = without
    return kept


def _fewest(program: ExportedProgram, found: Sequence[Region], counts: Sequence[int]
            ) -> list[int]:
    """``counts`` with each region's lowered to the fewest of ``AUTO_COUNTS`` (or 1) that
    leaves the estimated peak no higher: a region whose own peak is below the program's (an
    MLP beside its layer's scores) runs in fewer, larger chunks, whatever their size, so
    fewer steps, each product on more rows (a product on a few rows re-reads its whole weight:
    ``bench_chunks``' products table)."""
    counts = list(counts)
    peak = estimate(program, found, counts)
    for i, region in sorted(enumerate(found), key=lambda item: item[1].largest_bytes):
        for fewer in sorted({1, *(region.fits(n, MIN_CHUNK_ROWS) for n in AUTO_COUNTS)}):
            if fewer >= counts[i]:
                break
            trial = [*counts[:i], fewer, *counts[i + 1:]]
            if estimate(program, found, trial) <= peak:
                counts = trial
                break
    return counts


def _joined(found: Sequence[Region], counts: Sequence[int]) -> tuple[list[Region], list[int]]:
    """``found`` with each region cut in two whose parts run in as many chunks one region
    again (one loop, not two), and the counts of what is left."""
    found, counts = list(found), list(counts)
    while True:
        index = {r.split: i for i, r in enumerate(found)}
        pair = next(((i, index[r.cut]) for i, r in enumerate(found)
                     if r.uncut is not None and counts[index.get(r.cut, i)] == counts[i]
                     and r.cut in index and set(found[index[r.cut]].nodes) <= set(r.uncut.nodes)),
                    None)
        if pair is None:
            return found, counts
        below, above = pair
        found[below] = found[below].uncut
        del found[above], counts[above]


@dataclass(frozen=True)
class _Rewritten:
    """A chunked program, its regions and their chunks, and its planned arena."""

    program: ExportedProgram
    regions: tuple[Region, ...]
    counts: tuple[int, ...]
    arena_bytes: int


def _rewritten(program: ExportedProgram, found: Sequence[Region], counts: Sequence[int],
               arena_of: Callable[[ExportedProgram], int]) -> _Rewritten | None:
    """``program`` with ``found[i]`` in ``counts[i]`` chunks (cut regions whose parts run
    alike joined, regions of one chunk left as they are) and planned, or None when no region
    is left to chunk. Raises ``chunk_program``'s ``InputError``."""
    joined, counts = _joined(found, counts)
    regions = tuple(r for r, n in zip(joined, counts, strict=True) if n > 1)
    counts = tuple(n for n in counts if n > 1)
    if not regions:
        return None
    chunked = chunk_program(program, regions, counts)
    return _Rewritten(chunked, regions, counts, arena_of(chunked))


def _declined(base: Candidate, reason: str, whole: Sequence[Whole] = ()) -> Chunking:
    return Chunking(base, (base,), (), tuple(whole), reason, MAX_OVERHEAD)


def _points(program: ExportedProgram) -> tuple[dict[Any, int], dict[Any, int]] | str:
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


def _found(program: ExportedProgram
           ) -> tuple[list[Region], list[Whole], dict[Any, int]] | str:
    """The regions at the dims' upper bounds (and those bounds), when the rules read at other
    sizes find the same ones (with dynamic dims), or why not."""
    points = _points(program)
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


def _none_fit() -> str:
    """Why no region is chunked."""
    return f"no region has {2 * MIN_CHUNK_ROWS} rows (two chunks of {MIN_CHUNK_ROWS})"


def choose(program: ExportedProgram, chunks: str | int,
           arena_of: Callable[[ExportedProgram], int]) -> tuple[ExportedProgram, Chunking]:
    """The program to compile and what was tried. Each count (``AUTO_COUNTS`` for ``"auto"``,
    at most each region's rows, a divisor of its rows at every size of dynamic dims, and with
    ``"auto"`` at least ``MIN_CHUNK_ROWS`` rows a chunk at the upper bounds) is ranked by
    ``estimate``; the fewest chunks estimated within ``AUTO_SLACK`` of the least is rewritten
    and planned (``arena_of`` plans a program and returns its arena bytes, at the upper
    bounds), and kept when its arena is strictly smaller than the program as exported's and
    its multiply-adds within ``MAX_OVERHEAD``. A program whose rules differ between sizes of
    its dims, with an unbounded dim, or with no region declines (the reason in
    ``Chunking.declined``). Its reasons name the dims by their ``Dim`` names. The regions are
    read off the program with its products' column parts made apart (``columns.py``), and a
    program declined is returned as it came.
    """
    chosen, chunking = _choose(program, chunks, arena_of)
    return chosen, _in_dim_names(chunking, dim_names(program))


def _in_dim_names(chunking: Chunking, names: Mapping[str, str]) -> Chunking:
    """``chunking`` with the symbols of its reasons written as the user's Dim names."""
    whole = tuple(replace(w, reason=named(w.reason, names)) for w in chunking.whole)
    return replace(chunking, whole=whole, declined=named(chunking.declined, names))


def _choose(program: ExportedProgram, chunks: str | int,
            arena_of: Callable[[ExportedProgram], int]) -> tuple[ExportedProgram, Chunking]:
    counts = _checked(chunks)
    base = Candidate(1, 0, arena_of(program), 1.0)
    parted = split_products(program)
    read = _found(parted)
    if isinstance(read, str):
        return program, _declined(base, read)
    found, whole, upper = read
    with sizes_at(upper):
        chosen, chunking = _chosen(parted, chunks, counts, arena_of, base, found, whole)
    return (program if chosen is parted else chosen), chunking


def _chosen(program: ExportedProgram, chunks: str | int, counts: tuple[int, ...],
            arena_of: Callable[[ExportedProgram], int], base: Candidate,
            found: list[Region], whole: list[Whole]) -> tuple[ExportedProgram, Chunking]:
    base = Candidate(1, estimate(program, found, [1] * len(found)), base.arena_bytes, 1.0)
    if not found:
        return program, _declined(base, "no region: no value made by rows holds a larger one "
                                        "(no attention or MLP over a token dim)", whole)
    auto = chunks == "auto"
    joined, _ = _joined(found, [1] * len(found))  # the counts ranked over regions as found
    estimates = {n: estimate(program, joined, _counts(joined, n, auto)) for n in counts}
    least = min(estimates.values())
    pick = min(n for n in counts if estimates[n] <= least * AUTO_SLACK)
    kept = _worth_it(program, found, pick, auto)
    if not kept:
        return program, _declined(base, _none_fit(), whole)
    per_region = _counts(kept, pick, auto)
    if auto:
        per_region = _fewest(program, kept, per_region)
    try:
        rewritten = _rewritten(program, kept, per_region, arena_of)
    except InputError as error:  # a loop that cannot cut one of its inputs
        return program, _declined(base, str(error), whole)
    if rewritten is None:
        return program, _declined(base, _none_fit(), whole)
    chunked, found = rewritten.program, rewritten.regions
    planned = Candidate(pick, estimates[pick], rewritten.arena_bytes,
                        multiply_adds(chunked) / (multiply_adds(program) or 1),
                        rewritten.counts)
    tried = (base, *(planned if n == pick else Candidate(n, estimates[n]) for n in counts))
    if planned.overhead > MAX_OVERHEAD:
        reason = f"{pick} chunks add multiply-adds ({planned.overhead:.3f}x)"
    elif planned.arena_bytes >= base.arena_bytes:
        reason = f"{pick} chunks plan no smaller than the program as exported"
    else:
        return chunked, Chunking(planned, tried, tuple(found), tuple(whole), "", MAX_OVERHEAD)
    return program, Chunking(base, tried, tuple(found), tuple(whole), reason, MAX_OVERHEAD)
