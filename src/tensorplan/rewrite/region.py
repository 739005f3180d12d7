"""A region of a program: the values made once per chunk of a split's rows, and how one chunk
of it is emitted into a new graph.

``chunks.py`` finds the regions (``rows.py``'s rules); ``loop.py`` emits each once, as the
body of a loop, with :func:`emit_region`, which reads every value made outside the region
through a callback (the body's inputs).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from tensorplan.rewrite.grouped import grouped_product
from tensorplan.rewrite.rebuild import Rebuild
from tensorplan.rewrite.rows import RESHAPES, Need, Rows, shape

aten = torch.ops.aten
Span = tuple[Any, Any]  # rows [start, stop): ints, or sympy polynomials in the dynamic dims


@dataclass(frozen=True)
class Region:
    """The values made once per chunk of a split's rows."""

    split: str  # the value made chunk by chunk by the loop (the region's last node)
    dim: int  # the split's dim the chunks divide
    extent: int  # the split's rows along it (at the dims' upper bounds)
    nodes: tuple[str, ...]  # every node run per chunk, in graph order (the split last)
    rows: Mapping[str, Rows]  # each node's rows for a chunk of the split's
    needs: Mapping[str, Mapping[str, Need]]  # what each node reads of each input
    checks: tuple[str, ...]  # checks (``_assert_tensor_metadata``) of region values, dropped
    largest: str  # the region's largest value made whole as exported
    largest_bytes: int
    symbolic: Any = None  # the split's rows as a sympy polynomial in the dims (None: static)
    cut: str = ""  # the split of the region above this one's cut ("": not cut)
    uncut: Region | None = None  # this region and the one above its cut, one region

    def fits(self, count: int, least_rows: int = 1) -> int:
        """The chunks a loop runs (at the upper bounds) for at most ``count`` chunks of at least
        ``least_rows`` rows: a loop runs chunks of ``ceil(extent / n)`` rows, as many as the
        extent needs, the last padded (``loop.py``), so ``n`` is the most up to ``count`` whose
        chunk has ``least_rows`` rows, and no chunk is all padding: 127 rows in at most 16
        chunks of 8 rows are 16 chunks, one row padded (not 15 of 9, eight rows padded).

        >>> from dataclasses import replace
        >>> region = Region("y", 1, 127, ("y",), {}, {}, (), "y", 0)
        >>> region.fits(16, 8), region.fits(32, 8), replace(region, extent=197).fits(32, 8)
        (16, 16, 25)
        """
        for chunks in range(min(count, self.extent), 1, -1):
            rows = math.ceil(self.extent / chunks)
            if rows >= least_rows:
                return math.ceil(self.extent / rows)
        return 1


# A value made outside a region as a region node reads it: its rows (``Rows``), all of it
# (``WHOLE``), or a size made before the region (None).
Read = Callable[[torch.fx.Node, "Need | None"], Any]


def made_whole(build: Rebuild, node: torch.fx.Node) -> torch.fx.Node:
    """The node of the new graph holding ``node``'s value, made outside every region: an item
    of a tuple made whole that only a region read is taken from its tuple here."""
    if node.name not in build.env:
        build.env[node.name] = build.emit(
            operator.getitem, (build.env[node.args[0].name], node.args[1]), like=node,
            name=node.name)
    return build.env[node.name]


def _one(build: Rebuild, node: torch.fx.Node, rows: Rows, args: tuple[Any, ...],
         kwargs: Mapping[str, Any], chunk: Span) -> torch.fx.Node:
    """One region node on one chunk: its inputs already cut to the chunk's rows."""
    if node.target is aten.slice.Tensor and node.args[1] % len(shape(node)) == rows.dim:
        return args[0]  # its input was cut to the slice's rows of the chunk
    if node.target in RESHAPES or node.target is aten.expand.default:
        size = list(args[1])
        start, stop = rows.span(chunk)
        size[rows.dim] = build.size(stop - start)
        args = (args[0], size, *args[2:])
    return build.emit(node.target, args, kwargs, like=node, name=node.name)


def emit_region(build: Rebuild, nodes: Mapping[str, torch.fx.Node], region: Region,
                chunk: Span, read: Read, groups: Mapping[str, int]) -> torch.fx.Node:
    """The split's rows ``chunk``: every region node emitted into ``build`` on its rows of the
    chunk (named as its original), a value made outside the region as ``read`` gives it; a
    product named in ``groups`` reads its second operand's KV heads, each for that many query
    heads (``grouped.py``: ``read`` gives it unrepeated)."""
    local: dict[str, torch.fx.Node] = {}
    for name in region.nodes:
        node, needs = nodes[name], region.needs[name]

        def value(arg: torch.fx.Node, needs: Mapping[str, Need] = needs) -> Any:
            return local[arg.name] if arg.name in local else read(arg, needs.get(arg.name))

        source = node.args[0] if node.target is operator.getitem else None
        if source is not None and source.name not in local:  # an item of a tuple made whole
            local[name] = read(node, region.rows[name])
            continue
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), value)
        local[name] = grouped_product(build, args[:2], groups[name], like=node) \
            if name in groups else _one(build, node, region.rows[name], args, kwargs, chunk)
    return local[region.split]
