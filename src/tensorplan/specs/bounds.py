"""Upper bounds of symbolic sizes, read from the ShapeEnv's value ranges.

A data-dependent size whose op tensorplan knows (``limits.py``) is bounded by what that op's
inputs allow instead: the ``Limits`` passed here override those symbols' upper bounds.
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy
import torch
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from tensorplan.errors import UnboundedShapeError

# A data-dependent size symbol -> its planned upper bound (replaces the ShapeEnv's).
Limits = Mapping[sympy.Symbol, int]

_HOW_TO_BOUND = (
    "bound it: give the input dim a Dim(name, min=..., max=...) in dynamic_shapes, or, for a "
    "data-dependent size, add torch._check(size <= N) after the op that produces it"
)


def upper_bound(size: int | torch.SymInt, where: str, limits: Limits | None = None) -> int:
    """The largest value ``size`` can take, from its ShapeEnv value range.

    Plain ints are their own bound; symbols in ``limits`` take the upper bound given there. A
    symbolic size with no finite upper bound raises ``UnboundedShapeError`` naming the symbol
    and ``where`` (the node it belongs to) — there is never a fallback to the example size.
    """
    if not isinstance(size, torch.SymInt):
        return int(size)
    node = size.node
    shape_env = node.shape_env
    expr = shape_env.replace(node.expr)
    ranges = {s: shape_env.var_to_range.get(s) for s in expr.free_symbols}
    for symbol in ranges.keys() & (limits or {}).keys():
        known = ranges[symbol]
        ranges[symbol] = ValueRanges(known.lower if known is not None else 0, limits[symbol])
    upper = bound_sympy(expr, ranges).upper
    if not _is_finite(upper):
        symbols = ", ".join(sorted(str(s) for s in expr.free_symbols)) or str(expr)
        raise UnboundedShapeError(
            f"propagate: size {expr} of {where} has no finite upper bound (symbols: {symbols}); "
            f"{_HOW_TO_BOUND}")
    return int(upper)


def symbol_upper(shape_env, symbol: sympy.Symbol) -> int | None:
    """The ShapeEnv's upper bound of one symbol (None when it has none)."""
    upper = shape_env.bound_sympy(symbol).upper
    return int(upper) if _is_finite(upper) else None


def _is_finite(value: sympy.Expr) -> bool:
    return isinstance(value, (int, sympy.Integer))
