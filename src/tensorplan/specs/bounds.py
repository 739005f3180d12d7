"""Upper bounds of symbolic sizes, read from the ShapeEnv's value ranges.

A data-dependent size whose op tensorplan knows (``limits.py``) is bounded by what that op's
inputs allow instead: the ``Limits`` passed here override those symbols' upper bounds.

A range's arithmetic bounds each operation apart, which is exact for a polynomial with
positive coefficients but not for sizes that read one dim twice through a division: a loop
over ``n = ceil(S / c)`` chunks of ``c = ceil(S / 32)`` rows pads to ``n * c`` rows, at most
1,024 for ``S <= 1023``, but ranges bound ``n`` and ``c`` apart (at most 1,054 and 32) and give
far more. Such a size of one dim is evaluated at every size of the dim's range instead
(``_exact_upper``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np
import sympy
import torch
from torch.utils._sympy.functions import CeilDiv, FloorDiv, Mod, PythonMod
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
    if _is_finite(upper) and len(ranges) == 1 and expr.has(*_DIVISIONS):
        (symbol, known), = ranges.items()
        upper = _exact_upper(expr, symbol, int(known.lower), int(known.upper)) \
            if known is not None and _is_finite(known.lower) and _is_finite(known.upper) \
            else upper
    if not _is_finite(upper):
        symbols = ", ".join(sorted(str(s) for s in expr.free_symbols)) or str(expr)
        raise UnboundedShapeError(
            f"propagate: size {expr} of {where} has no finite upper bound (symbols: {symbols}); "
            f"{_HOW_TO_BOUND}")
    return int(upper)


_DIVISIONS = (FloorDiv, CeilDiv, Mod, PythonMod)
_MOST_POINTS = 1 << 16  # a dim's range evaluated whole up to this many sizes
_AS_NUMPY = {"FloorDiv": np.floor_divide, "CeilDiv": lambda a, b: -np.floor_divide(-a, b),
             "Mod": np.mod, "PythonMod": np.mod,
             "Min": lambda *a: functools.reduce(np.minimum, a),
             "Max": lambda *a: functools.reduce(np.maximum, a)}


@functools.lru_cache(maxsize=4096)
def _exact_upper(expr: sympy.Expr, symbol: sympy.Symbol, lower: int, upper: int) -> int:
    """The largest value of ``expr`` (one dim's size through divisions) over the dim's range
    ``[lower, upper]``, evaluated at each of its sizes; past ``_MOST_POINTS`` sizes, or for a
    function numpy does not evaluate, the range arithmetic's bound."""
    fallback = int(bound_sympy(expr, {symbol: ValueRanges(lower, upper)}).upper)
    if upper - lower >= _MOST_POINTS:
        return fallback
    try:
        evaluate = sympy.lambdify([symbol], expr, modules=[_AS_NUMPY, "numpy"])
        values = np.broadcast_to(evaluate(np.arange(lower, upper + 1, dtype=np.int64)),
                                 (upper - lower + 1,))
    except (NameError, TypeError, ValueError, ZeroDivisionError):
        return fallback
    return min(fallback, int(values.max()))


def symbol_upper(shape_env, symbol: sympy.Symbol) -> int | None:
    """The ShapeEnv's upper bound of one symbol (None when it has none)."""
    upper = shape_env.bound_sympy(symbol).upper
    return int(upper) if _is_finite(upper) else None


def _is_finite(value: sympy.Expr) -> bool:
    return isinstance(value, (int, sympy.Integer))
