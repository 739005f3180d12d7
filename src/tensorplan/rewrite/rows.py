"""Row rules: which rows of its inputs an op needs for some rows of its output.

The chunk rewrite (``chunks.py``) runs part of a program once per chunk of a *split* value's
rows along one dim. Every value of that part is then computed on a set of rows along one of
its own dims: :class:`Rows` ``(dim, scale, offset)`` says that chunk ``[a, b)`` of the split's
rows is rows ``[offset + scale * a, offset + scale * b)`` of ``dim`` here (``scale`` above 1
after a reshape that merges the dim with inner ones, ``offset`` after a slice).

:func:`input_rows` is the rule of one op: given the rows of its output, the rows of each tensor
input it reads (``WHOLE``: all of it, such as the keys of ``q @ k^T`` or a weight), or None
when the op cannot compute those rows from rows of its inputs (a reduction over the dim, a
matmul contracting it, a ``cat`` along it). Exact by construction: an output row is a function
of the input rows named and of the whole inputs alone.

Where the rules come from (DESIGN rule 5): ``torch.Tag.pointwise`` (output element = f(input
elements at the broadcast index), so any input is sliced alike or broadcast whole); views and
shape ops from their dims and sizes; the rest are named with the argument that keeps the rule
(the reduced dims of a reduction, the normalized dims of a layer norm, the contracted dim of a
matmul), since the schemas do not say which dims an op mixes.

Sizes are integers: in a program with dynamic dims, a size (a ``SymInt``) is read at the point
:func:`sizes_at` sets (``chunks.py`` reads the rules at the dims' upper bounds and again at
other sizes, and keeps a region only where both agree).

Worked example: ``bmm(q [4, 64, 32], k_t [4, 32, 64])`` with rows ``Rows(1, 1, 0)`` of its
output (query rows) needs ``Rows(1, 1, 0)`` of ``q`` and all of ``k_t``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

import sympy
import torch
import torch.fx

aten = torch.ops.aten


@dataclass(frozen=True)
class Rows:
    """Chunk ``[a, b)`` of the split's rows is rows ``[offset + scale * a, offset + scale * b)``
    of ``dim`` of this value."""

    dim: int
    scale: int = 1
    offset: int = 0

    def span(self, chunk: tuple[int, int]) -> tuple[int, int]:
        """The rows ``[start, stop)`` of this value that chunk ``[a, b)`` of the split is."""
        return self.offset + self.scale * chunk[0], self.offset + self.scale * chunk[1]


WHOLE = "whole"  # an input read whole by every chunk
Need = Rows | str  # what an op needs of one input: its rows, or WHOLE

# Ops whose output has their first input's shape, each element from the same element.
_SAME_SHAPE = frozenset({aten.clone.default, aten._to_copy.default, aten.alias.default,
                         aten.full_like.default, aten.zeros_like.default,
                         aten.ones_like.default, aten.detach.default})
RESHAPES = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default})
# Reductions over the dims of one argument (position, and whether dims may be one int).
_REDUCTIONS = {aten.sum.dim_IntList: 1, aten.mean.dim: 1, aten.amax.default: 1,
               aten.amin.default: 1, aten.any.dim: 1, aten.any.dims: 1, aten.all.dim: 1,
               aten.var.correction: 1, aten.argmax.default: 1, aten.argmin.default: 1,
               aten.max.dim: 1, aten.min.dim: 1, aten.prod.dim_int: 1,
               aten.logsumexp.default: 1}
# Ops along one dim that keep every other dim's rows apart (argument position of the dim).
_ALONG_ONE_DIM = {aten._softmax.default: 1, aten._log_softmax.default: 1,
                  aten.cumsum.default: 1, aten.softmax.int: 1, aten.topk.default: 2,
                  aten.sort.default: 1}


_POINT: ContextVar[Mapping[Any, int] | None] = ContextVar("point", default=None)


class Unsized(Exception):
    """A size that is no number at the point :func:`sizes_at` set (a symbol it lacks, such as
    one bound to data)."""


@contextmanager
def sizes_at(point: Mapping[Any, int]) -> Iterator[None]:
    """Within it, every symbolic size reads as its value with each symbol (a sympy symbol of
    the program's ShapeEnv) at ``point``'s integer."""
    token = _POINT.set(point)
    try:
        yield
    finally:
        _POINT.reset(token)


def current_point() -> Mapping[Any, int]:
    """The point :func:`sizes_at` set (empty outside it)."""
    return _POINT.get() or {}


def size_of(size: Any) -> int:
    """An int, or a ``SymInt`` at the point :func:`sizes_at` set. Raises ``Unsized`` when it
    is no number there."""
    if isinstance(size, int):
        return size
    value = sympy.sympify(size.node.expr.xreplace(current_point()))
    if not value.is_number:
        symbols = sorted(map(str, value.free_symbols))
        raise Unsized(f"the size {size.node.expr} depends on {symbols}")
    return int(value)


def sizes(value: torch.Tensor) -> tuple[int, ...]:
    """A tensor's sizes as ints (see :func:`size_of`)."""
    found = tuple(value.shape)
    return found if all(type(d) is int for d in found) else tuple(map(size_of, found))


def shape(node: Any) -> tuple[int, ...] | None:
    """The shape of a node's tensor value (the first tensor of a tuple), or None."""
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if isinstance(value, (tuple, list)):
        value = next((v for v in value if isinstance(v, torch.Tensor)), None)
    return sizes(value) if isinstance(value, torch.Tensor) else None


def _tensor_inputs(node: torch.fx.Node) -> list[torch.fx.Node]:
    return [n for n in node.all_input_nodes if shape(n) is not None]


def _broadcast(out: tuple[int, ...], rows: Rows, arg: torch.fx.Node) -> Need | None:
    """The rows of ``arg`` broadcast to ``out``: the aligned dim's rows, WHOLE when the dim
    is broadcast (absent or 1), None when it is neither."""
    own = shape(arg)
    dim = rows.dim - (len(out) - len(own))
    if dim < 0 or own[dim] == 1:
        return WHOLE
    return replace(rows, dim=dim) if own[dim] == out[rows.dim] else None


def _elementwise(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    out = shape(node)
    needs = {arg.name: _broadcast(out, rows, arg) for arg in _tensor_inputs(node)}
    return None if None in needs.values() else needs


def _same_shape(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    source = node.args[0]
    return {source.name: rows} if shape(source) == shape(node) else None


def reshaped_rows(source: Sequence[int], out: Sequence[int], rows: Rows) -> Rows | None:
    """The rows of a reshape's input for ``rows`` of its output: the input dim whose outer and
    block sizes are the output dim's, ``scale`` times the inner sizes' ratio (None when no
    input dim holds those rows as one span, such as the tokens of a batch above 1 merged)."""
    d = rows.dim
    outer, block = math.prod(out[:d]), math.prod(out[d:])
    inner = math.prod(out[d + 1:])
    for e in range(len(source)):
        if math.prod(source[:e]) == outer and math.prod(source[e:]) == block:
            source_inner = math.prod(source[e + 1:])
            if source_inner and inner % source_inner == 0:
                factor = inner // source_inner
                return Rows(e, rows.scale * factor, rows.offset * factor)
    return None


def _reshape(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    source = node.args[0]
    found = reshaped_rows(shape(source), shape(node), rows)
    return None if found is None else {source.name: found}


def _expand(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    need = _broadcast(shape(node), rows, node.args[0])
    return None if need is None else {node.args[0].name: need}


def _dims(value: Any, rank: int) -> list[int]:
    values = [value] if isinstance(value, int) else list(value or range(rank))
    return [d % rank for d in values]


def _reduction(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    source = node.args[0]
    rank = len(shape(source))
    at = _REDUCTIONS[node.target]
    dims = _dims(node.args[at] if len(node.args) > at else node.kwargs.get("dim"), rank)
    keep = shape(node) is not None and len(shape(node)) == rank
    kept = [d for d in range(rank) if keep or d not in dims]
    own = kept[rows.dim]
    return None if own in dims else {source.name: replace(rows, dim=own)}


def _along_one_dim(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    source = node.args[0]
    at = _ALONG_ONE_DIM[node.target]
    dim = (node.args[at] if len(node.args) > at else node.kwargs.get("dim", -1))
    return None if dim % len(shape(source)) == rows.dim else {source.name: rows}


def _layer_norm(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    source = node.args[0]
    if rows.dim >= len(shape(source)) - len(node.args[1]):
        return None
    needs: dict[str, Need] = {n.name: WHOLE for n in _tensor_inputs(node)}
    needs[source.name] = rows
    return needs


def _permute(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    rank = len(shape(node))
    if node.target is aten.permute.default:
        order = [d % rank for d in node.args[1]]
    else:
        order = list(range(rank))
        a, b = node.args[1] % rank, node.args[2] % rank
        order[a], order[b] = order[b], order[a]
    return {node.args[0].name: replace(rows, dim=order[rows.dim])}


def _unsqueeze(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    at = node.args[1] % len(shape(node))
    if rows.dim == at:
        return None
    return {node.args[0].name: replace(rows, dim=rows.dim - (rows.dim > at))}


def _squeeze(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    source = node.args[0]
    rank = len(shape(source))
    dims = _dims(node.args[1] if len(node.args) > 1 else None, rank)
    kept = [d for d in range(rank) if not (d in dims and shape(source)[d] == 1)]
    return {source.name: replace(rows, dim=kept[rows.dim])}


def _select(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    at = node.args[1] % len(shape(node.args[0]))
    return {node.args[0].name: replace(rows, dim=rows.dim + (rows.dim >= at))}


def _slice(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    source = node.args[0]
    extent = shape(source)
    dim = node.args[1] % len(extent) if len(node.args) > 1 else 0
    step = node.args[4] if len(node.args) > 4 else 1
    if dim != rows.dim:
        return {source.name: rows}
    start = node.args[2] if len(node.args) > 2 and node.args[2] is not None else 0
    if step != 1 or not isinstance(start, int):
        return None
    start = max(0, start + extent[dim] if start < 0 else min(start, extent[dim]))
    return {source.name: replace(rows, offset=rows.offset + start)}


def _split(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    dim = node.args[2] if len(node.args) > 2 else 0
    source = node.args[0]
    return None if dim % len(shape(source)) == rows.dim else {source.name: rows}


def _cat(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    dim = node.args[1] if len(node.args) > 1 else 0
    if dim % len(shape(node)) == rows.dim:
        return None
    return _elementwise(node, rows)


def _matmul(a: torch.fx.Node, b: torch.fx.Node, batch: int, rows: Rows
            ) -> dict[str, Need] | None:
    """``a @ b`` over ``batch`` leading dims: batch rows from both, M rows from ``a``, N rows
    from ``b``; the contracted dim is never the output's."""
    if rows.dim < batch:
        needs = {a.name: rows, b.name: rows}
    elif rows.dim == batch:
        needs = {a.name: rows, b.name: WHOLE}
    else:
        needs = {a.name: WHOLE, b.name: rows}
    return None if a.name == b.name else needs


def _mm(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    return _matmul(node.args[0], node.args[1], 0, rows)


def _bmm(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    return _matmul(node.args[0], node.args[1], 1, rows)


def _with_bias(node: torch.fx.Node, rows: Rows, batch: int) -> dict[str, Need] | None:
    needs = _matmul(node.args[1], node.args[2], batch, rows)
    bias = _broadcast(shape(node), rows, node.args[0])
    if needs is None or bias is None or node.args[0].name in needs:
        return None
    return {**needs, node.args[0].name: bias}


def _addmm(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    return _with_bias(node, rows, 0)


def _baddbmm(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    return _with_bias(node, rows, 1)


def _embedding(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    weight, indices = node.args[0], node.args[1]
    if rows.dim >= len(shape(indices)):
        return None
    return {weight.name: WHOLE, indices.name: rows}


def _index(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    """``x[None.., i, j, ..]``: leading dims of ``x``, then the indices' broadcast dims, then
    the rest of ``x``; an index tensor's rows broadcast like a pointwise op's."""
    source, indices = node.args[0], list(node.args[1])
    lead = next(i for i, index in enumerate(indices) if index is not None)
    given = indices[lead:]
    if any(index is None for index in given):
        return None
    out = shape(node)
    width = len(out) - (len(shape(source)) - len(given))
    if lead <= rows.dim < lead + width:
        local = Rows(rows.dim - lead, rows.scale, rows.offset)
        needs: dict[str, Need] = {source.name: WHOLE}
        for index in given:
            need = _broadcast(out[lead:lead + width], local, index)
            if need is None or index.name == source.name:
                return None
            needs[index.name] = need
        return needs
    dim = rows.dim if rows.dim < lead else rows.dim - width + len(given)
    return {source.name: replace(rows, dim=dim), **{i.name: WHOLE for i in given}}


def _getitem(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    return {node.args[0].name: rows}


_RULES = {
    aten.permute.default: _permute, aten.transpose.int: _permute,
    aten.unsqueeze.default: _unsqueeze, aten.squeeze.dim: _squeeze,
    aten.squeeze.dims: _squeeze, aten.squeeze.default: _squeeze,
    aten.select.int: _select, aten.slice.Tensor: _slice, aten.expand.default: _expand,
    aten.split_with_sizes.default: _split, aten.split.Tensor: _split, aten.cat.default: _cat,
    aten.mm.default: _mm, aten.bmm.default: _bmm, aten.addmm.default: _addmm,
    aten.baddbmm.default: _baddbmm, aten.native_layer_norm.default: _layer_norm,
    aten.embedding.default: _embedding, aten.index.Tensor: _index,
    operator.getitem: _getitem,
    **dict.fromkeys(RESHAPES, _reshape), **dict.fromkeys(_SAME_SHAPE, _same_shape),
    **dict.fromkeys(_REDUCTIONS, _reduction), **dict.fromkeys(_ALONG_ONE_DIM, _along_one_dim),
}


def has_rule(node: torch.fx.Node) -> bool:
    """The op has a row rule (it may still refuse some rows)."""
    op = node.target
    return node.op == "call_function" and (op in _RULES or (
        isinstance(op, torch._ops.OpOverload) and torch.Tag.pointwise in op.tags
        and torch.Tag.nondeterministic_seeded not in op.tags))


def input_rows(node: torch.fx.Node, rows: Rows) -> dict[str, Need] | None:
    """What ``node`` needs of each tensor input (by name) for ``rows`` of its output, or None
    when those rows are not a function of rows of its inputs."""
    if not has_rule(node) or shape(node) is None or rows.dim >= len(shape(node)):
        return None
    rule = _RULES.get(node.target, _elementwise)
    return rule(node, rows)
