"""Stage 0': the token dim chunk by chunk — a transformer's peak run in row chunks (a rewrite).

A transformer's peak is an intermediate that grows with the sequence and is made whole: the
attention scores and their softmax (heads x S x S), the MLP's S x 4H, the logits. Each of
their rows is a function of the same rows of a few values (the query rows, the residual
stream's rows) and of values read whole (the keys and values, the weights). Running such a
*region* once per chunk of rows, as a loop whose body is the region on one chunk
(``loop.py``), each chunk written into its slice of the region's output (the *split*), holds
one chunk of the intermediates at a time. ``chunk_emit.chunk_program`` is a pure function from a
program to a program: the chunked program is an ordinary ``ExportedProgram`` for every later
stage.

Regions. ``chunk_regions.regions`` walks the graph from its end. A candidate split ``y`` along
one of its dims has the region of every value whose rows that chunk needs (``rows.py``'s rules,
applied backwards from ``y``) that is read by nothing outside the region and always at the same
rows; a value read whole by a region node (the keys of ``q @ k^T``), read at other rows, read
after the split or without a row rule is computed once, before the chunks, and sliced. A region
is kept when it holds a value larger than its split (scores, an MLP's S x 4H): otherwise
chunking adds steps only. A layer's output is read whole by the next layer's keys and values, so
a region is about one layer: its attention by query rows, its MLP and its residuals.

Exact: every op of a region computes rows of its output from rows of its inputs exactly as it
computes them whole (the softmax of a row is over all its keys; nothing splits a reduction),
and no arithmetic is added: the multiply-adds of the chunked program equal the original's.

Worked example: ``softmax(q @ k^T) @ v`` with ``q = x @ wq``, ``k = x @ wk``, ``v = x @ wv``
(``x`` of 64 rows) in 4 chunks: ``k`` and ``v`` are computed once; a loop of four iterations
computes, for rows ``[16 i, 16 i + 16)`` of ``x``, ``q`` (16 rows), the scores (16 x 64), their
softmax and the output rows, and stacks the four output chunks.

The rewrite is three modules: ``chunk_regions.py`` finds the regions, ``chunk_emit.py`` builds
the chunked program, and this one chooses the chunk counts by an estimate of the peak and the
planned arena.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram

from tensorplan.errors import InputError
from tensorplan.frontend.dim_names import dim_names, named
from tensorplan.ops.control_flow import control_flow_op
from tensorplan.rewrite.chunk_emit import chunk_program
from tensorplan.rewrite.chunk_regions import Whole, at_bounds, found_regions
from tensorplan.rewrite.columns import split_products
from tensorplan.rewrite.grouped import grouped_products
from tensorplan.rewrite.parts import Parted, peak_in_parts, tensor_bytes
from tensorplan.rewrite.region import Region
from tensorplan.rewrite.rows import shape, sizes_at

aten = torch.ops.aten

_MATMULS = {aten.mm.default: 0, aten.addmm.default: 1, aten.bmm.default: 0,
            aten.baddbmm.default: 1}


@at_bounds
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


@at_bounds
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
               arena_of: Callable[[ExportedProgram], int], grouped: bool) -> _Rewritten | None:
    """``program`` with ``found[i]`` in ``counts[i]`` chunks (cut regions whose parts run
    alike joined, regions of one chunk left as they are) and planned, or None when no region
    is left to chunk. Raises ``chunk_program``'s ``InputError``."""
    joined, counts = _joined(found, counts)
    regions = tuple(r for r, n in zip(joined, counts, strict=True) if n > 1)
    counts = tuple(n for n in counts if n > 1)
    if not regions:
        return None
    chunked = chunk_program(program, regions, counts, grouped)
    return _Rewritten(chunked, regions, counts, arena_of(chunked))


def _declined(base: Candidate, reason: str, whole: Sequence[Whole] = ()) -> Chunking:
    return Chunking(base, (base,), (), tuple(whole), reason, MAX_OVERHEAD)


def _none_fit() -> str:
    """Why no region is chunked."""
    return f"no region has {2 * MIN_CHUNK_ROWS} rows (two chunks of {MIN_CHUNK_ROWS})"


def choose(program: ExportedProgram, chunks: str | int,
           arena_of: Callable[[ExportedProgram], int],
           grouped: bool = False) -> tuple[ExportedProgram, Chunking]:
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
    program declined is returned as it came. With ``grouped`` (``compile(reuse=True)``), the
    program as exported is planned with its grouped-query products made on the KV heads
    (``grouped.py``), as the compile goes on to make them, and so is a loop's body.
    """
    chosen, chunking = _choose(program, chunks, arena_of, grouped)
    return chosen, _in_dim_names(chunking, dim_names(program))


def _in_dim_names(chunking: Chunking, names: Mapping[str, str]) -> Chunking:
    """``chunking`` with the symbols of its reasons written as the user's Dim names."""
    whole = tuple(replace(w, reason=named(w.reason, names)) for w in chunking.whole)
    return replace(chunking, whole=whole, declined=named(chunking.declined, names))


def _choose(program: ExportedProgram, chunks: str | int,
            arena_of: Callable[[ExportedProgram], int],
            grouped: bool) -> tuple[ExportedProgram, Chunking]:
    _checked(chunks)  # a count that is no count raises before anything is planned
    base = Candidate(1, 0, arena_of(grouped_products(program) if grouped else program), 1.0)
    parted = split_products(program)
    read = found_regions(parted)
    if isinstance(read, str):
        return program, _declined(base, read)
    found, whole, upper = read
    with sizes_at(upper):
        chosen, chunking = _chosen(parted, chunks, functools.partial(
            _rewritten, parted, arena_of=arena_of, grouped=grouped), base, found, whole)
    return (program if chosen is parted else chosen), chunking


def _chosen(program: ExportedProgram, chunks: str | int,
            rewrite: Callable[[Sequence[Region], Sequence[int]], _Rewritten | None],
            base: Candidate, found: list[Region], whole: list[Whole]
            ) -> tuple[ExportedProgram, Chunking]:
    counts = _checked(chunks)
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
        rewritten = rewrite(kept, per_region)
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
