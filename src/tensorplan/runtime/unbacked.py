"""Data-dependent sizes at run time: bind a node's unbacked symbols from its result, check them
against the planned bound, and copy the result into its planned views."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import resolve_unbacked_bindings
from torch.utils import _pytree as pytree

from tensorplan.errors import InputError
from tensorplan.runtime.frames import Views
from tensorplan.runtime.shapes import Bindings
from tensorplan.specs.spec import TensorSpec


def _canonical_symbol(shape_env: Any, symbol: sympy.Symbol) -> sympy.Symbol:
    replaced = shape_env.replace(symbol) if shape_env is not None else symbol
    return replaced if replaced.is_Symbol else symbol


def _check_shape(name: str, op: Any, value: torch.Tensor, spec: TensorSpec,
                 traced: tuple[int, ...]) -> None:
    """The result fits its planned bound and has the sizes the program was traced with
    (``traced``: the spec's sizes with this run's symbols bound, the result's own included)."""
    if any(actual > bound for actual, bound in zip(value.shape, spec.shape, strict=True)):
        raise InputError(
            f"runtime: node {name!r} ({op}) produced shape {tuple(value.shape)}, above its "
            f"planned upper bound {spec.shape}; recompile with a larger bound "
            "(torch._check on the size, or a larger Dim max)")
    if tuple(value.shape) != traced:
        raise InputError(
            f"runtime: node {name!r} ({op}) produced shape {tuple(value.shape)}, but "
            f"torch.export traced the program for {traced} (it assumed a data-dependent size "
            "from how it is used, and ExportedProgram.module() refuses this input too); bound "
            "the size with torch._check instead of relying on it")


def binder(node: torch.fx.Node, name: str, views: Views,
           shape_env: Any) -> Callable[[Any, Bindings], Any]:
    """A function ``bind(result, bindings)`` that binds the node's unbacked symbols from its
    result, checks each tensor against its planned bound and traced sizes (``InputError``
    otherwise), copies it into its planned view and returns the views (the result itself for
    non-tensor values)."""
    symbols = resolve_unbacked_bindings(shape_env, node.meta.get("unbacked_bindings")) or {}
    facts = views.facts
    multi = isinstance(facts.specs.get(name), tuple)

    def bind(result: Any, b: Bindings) -> Any:
        for symbol, path in symbols.items():
            b[_canonical_symbol(shape_env, symbol)] = int(pytree.key_get(result, path))
        if not facts.is_tensor(name):
            return result
        items = list(result) if multi else [result]
        placed = []
        for i, (value, spec) in enumerate(zip(items, facts.items(name), strict=True)):
            if spec is None:
                placed.append(value)
                continue
            index = i if multi else None
            _check_shape(name, node.target, value, spec, facts.shapes[(name, index)].evaluate(b))
            view = views.of(name, index, b)
            view.copy_(value)
            placed.append(view)
        return tuple(placed) if multi else placed[0]
    return bind
