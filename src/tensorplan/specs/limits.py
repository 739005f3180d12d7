"""What a data-dependent op's inputs allow: the planned upper bound of its output size.

torch's fake kernels bound a data-dependent size, and the ShapeEnv records that bound, but a
kernel can be wrong: ``masked_select`` bounds its output by ``self.numel()``, ignoring that
the mask broadcasts (``x`` of shape ``(4, 1, 6)`` with a ``(1, 5, 6)`` mask selects up to 120
elements, the kernel says 24), and ``unique`` of a dynamic input or ``masked_select`` of two
elements are given no useful bound at all (``sys.maxsize - 1``). For the ops in ``RULES`` the
planned bound is the op's own limit, from its inputs' upper bounds; a ShapeEnv bound below the
one torch's kernel sets came from a ``torch._check`` and is kept when tighter. Every other
data-dependent size (``.item()``, custom ops) is bounded by the ShapeEnv alone.

Worked example: ``masked_select(x, m)`` with ``x: (4, 1, 6)``, ``m: (1, 5, 6)`` gives
``{u0: 120}``; with ``torch._check(y.numel() <= 10)`` after it, ``{u0: 10}``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx

from tensorplan.specs.bounds import Limits, symbol_upper, upper_bound
from tensorplan.specs.trace import TracedValue

aten = torch.ops.aten


@dataclass(frozen=True)
class Limit:
    """How large one data-dependent op's output size can be."""

    most: int        # the largest size the op can produce on inputs of these upper bounds
    torch_bound: int  # the bound torch's fake kernel gives (a smaller ShapeEnv bound is a check)
    dim: int = 0     # the output dim that holds the data-dependent size


Shape = tuple[int, ...]
# (upper-bound shapes of the tensor arguments, the other arguments) -> its Limit
Rule = Callable[[Sequence[Shape | None], Sequence[Any]], Limit]


def _masked_select(shapes: Sequence[Shape | None], args: Sequence[Any]) -> Limit:
    return Limit(most=math.prod(_broadcast_bound(shapes[0], shapes[1])),
                 torch_bound=math.prod(shapes[0]))


def _broadcast_bound(a: Shape, b: Shape) -> Shape:
    """Upper bounds of the broadcast shape, from the upper bounds of two shapes: the larger of
    each aligned pair (upper bounds need not broadcast themselves: ``(s, 2)`` with ``(2, s)``
    broadcasts only where ``s`` is 2, yet bounds to ``(64, 2)`` and ``(2, 64)``)."""
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))


def _numel(shapes: Sequence[Shape | None], args: Sequence[Any]) -> Limit:
    numel = math.prod(shapes[0])
    return Limit(most=numel, torch_bound=numel)


def _unique_dim(shapes: Sequence[Shape | None], args: Sequence[Any]) -> Limit:
    dim = args[1] % len(shapes[0])
    return Limit(most=shapes[0][dim], torch_bound=shapes[0][dim], dim=dim)


RULES: Mapping[Any, Rule] = {
    aten.masked_select.default: _masked_select,
    aten.nonzero.default: _numel,
    aten._unique2.default: _numel,
    aten.unique_consecutive.default: _numel,
    aten.unique_dim.default: _unique_dim,
}


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    return None


def _data_dependent_symbol(value: Any, dim: int) -> sympy.Symbol | None:
    tensor = _first_tensor(value)
    size = tensor.shape[dim] if tensor is not None and tensor.dim() > dim else None
    if not isinstance(size, torch.SymInt):
        return None
    expr = size.node.shape_env.replace(size.node.expr)
    return expr if expr.is_Symbol else None


def _argument_shapes(node: torch.fx.Node, prefix: str, values: Mapping[str, TracedValue],
                     limits: Limits) -> list[Shape | None]:
    shapes: list[Shape | None] = []
    for i, arg in enumerate(node.args):
        value = values[prefix + arg.name].value if isinstance(arg, torch.fx.Node) else None
        where = f"argument {i} of node {node.name!r} ({node.target})"
        shapes.append(tuple(upper_bound(s, where, limits) for s in value.shape)
                      if isinstance(value, torch.Tensor) else None)
    return shapes


def output_limits(values: Mapping[str, TracedValue]) -> dict[sympy.Symbol, int]:
    """The planned upper bound of every data-dependent size that an op of ``RULES`` produces,
    in trace order (a limit may depend on an earlier one: ``nonzero`` of a ``masked_select``)."""
    limits: dict[sympy.Symbol, int] = {}
    for name, traced in values.items():
        node = traced.node
        rule = RULES.get(node.target) if node.op == "call_function" else None
        if rule is None or traced.carried or not node.meta.get("unbacked_bindings"):
            continue
        limit = rule(_argument_shapes(node, name[:len(name) - len(node.name)], values, limits),
                     node.args)
        symbol = _data_dependent_symbol(traced.value, limit.dim)
        if symbol is None:
            continue
        checked = symbol_upper(_first_tensor(traced.value).shape[limit.dim].node.shape_env,
                               symbol)
        tightened = checked is not None and checked < limit.torch_bound
        limits[symbol] = min(checked, limit.most) if tightened else limit.most
    return limits
