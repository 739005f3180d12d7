"""Upper bounds of symbolic sizes, read from the ShapeEnv's value ranges."""

from __future__ import annotations

import sympy
import torch

from .errors import UnboundedShapeError

_HOW_TO_BOUND = (
    "bound it: give the input dim a Dim(name, min=..., max=...) in dynamic_shapes, or, for a "
    "data-dependent size, add torch._check(size <= N) after the op that produces it"
)


def upper_bound(size: int | torch.SymInt, where: str) -> int:
    """The largest value ``size`` can take, from its ShapeEnv value range.

    Plain ints are their own bound. A symbolic size with no finite upper bound raises
    ``UnboundedShapeError`` naming the symbol and ``where`` (the node it belongs to) — there is
    never a fallback to the example size.
    """
    if not isinstance(size, torch.SymInt):
        return int(size)
    node = size.node
    shape_env = node.shape_env
    expr = shape_env.replace(node.expr)
    upper = shape_env.bound_sympy(expr).upper
    if not _is_finite(upper):
        symbols = ", ".join(sorted(str(s) for s in expr.free_symbols)) or str(expr)
        raise UnboundedShapeError(
            f"propagate: size {expr} of {where} has no finite upper bound (symbols: {symbols}); "
            f"{_HOW_TO_BOUND}")
    return int(upper)


def _is_finite(value: sympy.Expr) -> bool:
    return isinstance(value, (int, sympy.Integer))
