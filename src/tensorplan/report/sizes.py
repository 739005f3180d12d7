"""A value's dims and bytes as polys in the dynamic dims, so the page can say them at the sizes
its sliders set (the tooltip's shape and bytes at the same sizes as the storage they are in).

Each dim is an int (static), ``{"text": "seq", "poly": [[1, {"seq": 1}]]}`` (a poly in the
dims, ``Poly.to_json``), or ``{"upper": 128}`` (a size known only at run time: its bound).
"""

from __future__ import annotations

import math
from typing import Any

import sympy

from tensorplan.plan.symbolic.dims import SymbolicPlan
from tensorplan.plan.symbolic.sizes import Poly
from tensorplan.plan.symbolic.stack import poly_of
from tensorplan.specs.spec import TensorSpec, canonical


def _as_poly(expr: int | sympy.Expr, symbolic: SymbolicPlan) -> Poly | None:
    """``expr`` as a poly in the plan's dims (by name), or None when it is not one."""
    if isinstance(expr, int):
        return Poly.constant(expr)
    by_symbol = {d.symbol: d.name for d in symbolic.dims}
    names = {s: by_symbol[str(s)] for s in expr.free_symbols if str(s) in by_symbol}
    found = poly_of(expr, names)
    return found if isinstance(found, Poly) else None


def _dim(size: Any, upper: int, symbolic: SymbolicPlan) -> int | dict[str, Any]:
    expr = canonical(size)
    if isinstance(expr, int):
        return expr
    poly = _as_poly(expr, symbolic)
    return {"upper": upper} if poly is None else {"text": poly.text(), "poly": poly.to_json()}


def sized(spec: TensorSpec, symbolic: SymbolicPlan) -> dict[str, Any]:
    """``dims`` (see the module docstring) and ``bytes``: the value's bytes as a poly, or None
    when they are no poly or are not its elements times their size (a strided view's span)."""
    dims = [_dim(s, u, symbolic) for s, u in zip(spec.sym_shape, spec.shape, strict=True)]
    numel = math.prod(canonical(s) for s in spec.sym_shape) * spec.dtype.itemsize
    poly = _as_poly(numel if isinstance(numel, int) else sympy.expand(numel), symbolic)
    dense = math.prod(spec.shape) * spec.dtype.itemsize == spec.nbytes
    return {"dims": dims, "bytes": poly.to_json() if poly is not None and dense else None}
