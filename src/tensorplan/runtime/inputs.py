"""Checking user inputs against what the program was compiled for, and binding their sizes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch
from torch.export import ExportedProgram
from torch.export._tree_utils import reorder_kwargs
from torch.utils import _pytree as pytree

from ..errors import InputError
from ..spec import TensorSpec
from .shapes import Bindings, SymbolicShape


def flatten_inputs(in_spec: pytree.TreeSpec, args: tuple, kwargs: Mapping[str, Any]) -> list:
    """The user inputs as the flat list the graph's user placeholders expect."""
    try:
        flat, spec = pytree.tree_flatten((tuple(args), reorder_kwargs(dict(kwargs), in_spec)))
    except Exception as error:
        raise InputError(f"runtime: inputs do not match the compiled signature: {error}") from None
    if spec != in_spec:
        raise InputError(f"runtime: expected inputs structured as {in_spec}, got {spec} "
                         f"({len(flat)} leaves); pass the same structure as at compile time")
    return flat


def _range(program: ExportedProgram, symbol: sympy.Symbol) -> tuple[int, int | None]:
    ranges = program.range_constraints.get(symbol)
    if ranges is None:
        return 0, None
    upper = ranges.upper
    return int(ranges.lower), (int(upper) if upper.is_Integer else None)


def _check_tensor(name: str, value: Any, spec: TensorSpec) -> None:
    if not isinstance(value, torch.Tensor):
        raise InputError(f"runtime: input {name!r} must be a tensor, got {type(value).__name__}")
    if value.dtype != spec.dtype:
        raise InputError(f"runtime: input {name!r} has dtype {value.dtype}, the program was "
                         f"compiled for {spec.dtype}; convert it with .to({spec.dtype})")
    if value.dim() != len(spec.shape):
        raise InputError(f"runtime: input {name!r} has rank {value.dim()} (shape "
                         f"{tuple(value.shape)}), expected rank {len(spec.shape)}")


def bind_inputs(program: ExportedProgram, names: Sequence[str], values: Sequence[Any],
                specs: Mapping[str, Any], shapes: Mapping[str, SymbolicShape]) -> Bindings:
    """Check every input and return the sizes bound to the input symbols.

    Raises ``InputError`` naming the input, the dim, the value and the allowed range.
    """
    if len(values) != len(names):
        raise InputError(f"runtime: expected {len(names)} inputs ({', '.join(names)}), "
                         f"got {len(values)}")
    bindings: Bindings = {}
    for name, value in zip(names, values, strict=True):
        spec = specs.get(name)
        if not isinstance(spec, TensorSpec):
            continue
        _check_tensor(name, value, spec)
        for dim, (size, expr) in enumerate(zip(value.shape, shapes[name].dims, strict=True)):
            _bind_dim(program, name, dim, int(size), expr, bindings)
    return bindings


def _bind_dim(program: ExportedProgram, name: str, dim: int, size: int,
              expr: int | sympy.Expr, bindings: Bindings) -> None:
    if isinstance(expr, int):
        if size != expr:
            raise InputError(f"runtime: dim {dim} of input {name!r} is {size}, but the program "
                             f"was compiled for exactly {expr}; export with a Dim to vary it")
        return
    if not expr.is_Symbol:
        return
    lower, upper = _range(program, expr)
    if size < lower or (upper is not None and size > upper):
        raise InputError(f"runtime: dim {dim} of input {name!r} is {size}, outside the range "
                         f"[{lower}, {upper}] of {expr} the program was compiled for")
    if bindings.setdefault(expr, size) != size:
        raise InputError(f"runtime: dim {dim} of input {name!r} is {size}, but {expr} is "
                         f"{bindings[expr]} in another input: they must be equal")
