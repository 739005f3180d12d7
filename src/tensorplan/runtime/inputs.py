"""Checking user inputs against what the program was compiled for, and binding their sizes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch
from torch.export import ExportedProgram
from torch.export._tree_utils import reorder_kwargs
from torch.utils import _pytree as pytree

from tensorplan.errors import InputError
from tensorplan.frontend.dim_names import named
from tensorplan.frontend.roles import Roles
from tensorplan.runtime.lower import ProgramFacts
from tensorplan.runtime.shapes import Bindings
from tensorplan.specs.spec import TensorSpec


def flatten_inputs(in_spec: pytree.TreeSpec, args: tuple, kwargs: Mapping[str, Any]) -> list:
    """The user inputs as the flat list the graph's user placeholders expect."""
    try:
        flat, spec = pytree.tree_flatten((tuple(args), reorder_kwargs(dict(kwargs), in_spec)))
    except Exception as error:
        raise InputError(f"runtime: inputs do not match the compiled signature: {error}") from None
    if spec != in_spec:
        raise InputError(f"runtime: the inputs are not structured as at compile time: "
                         f"{_outline(spec)}, the program takes {_outline(in_spec)}; pass the "
                         "same positional arguments, keywords and containers")
    return flat


def _outline(spec: pytree.TreeSpec) -> str:
    """One line for a call's (args, kwargs) spec: how many positional arguments, which keywords,
    how many leaves."""
    args, kwargs = spec.children() if spec.num_children == 2 else (spec, None)
    keywords = ", ".join(map(str, kwargs.context)) if kwargs is not None and kwargs.context else ""
    return (f"{args.num_children} positional argument(s)"
            + (f", keywords {keywords}" if keywords else "") + f" ({spec.num_leaves} leaves)")


def _range(program: ExportedProgram, symbol: sympy.Symbol) -> tuple[int, int | None]:
    ranges = program.range_constraints.get(symbol)
    if ranges is None:
        return 0, None
    upper = ranges.upper
    return int(ranges.lower), (int(upper) if upper.is_Integer else None)


def _check_tensor(name: str, value: Any, spec: TensorSpec) -> None:
    if not isinstance(value, torch.Tensor):
        raise InputError(f"runtime: input {name!r} must be a tensor, got {type(value).__name__}")
    if value.device.type != "cpu":
        raise InputError(f"runtime: input {name!r} is on {value.device}; the program runs on "
                         "the CPU: pass it with .cpu()")
    if value.dtype != spec.dtype:
        raise InputError(f"runtime: input {name!r} has dtype {value.dtype}, the program was "
                         f"compiled for {spec.dtype}; convert it with .to({spec.dtype})")
    if value.dim() != len(spec.shape):
        raise InputError(f"runtime: input {name!r} has rank {value.dim()} (shape "
                         f"{tuple(value.shape)}), expected rank {len(spec.shape)}")


def bind_inputs(program: ExportedProgram, roles: Roles, values: Sequence[Any],
                facts: ProgramFacts) -> Bindings:
    """Check every user input and return the sizes bound to the input symbols.

    Raises ``InputError`` naming the input, the dim (by its ``Dim`` name), the value and the
    allowed range, or the constant the program was specialised to.
    """
    try:
        return _bind(program, roles, values, facts)
    except InputError as error:  # the checks below print symbols; the user wrote Dim names
        raise InputError(named(error, facts.specs.dim_names)) from None


def _bind(program: ExportedProgram, roles: Roles, values: Sequence[Any],
          facts: ProgramFacts) -> Bindings:
    names, constants = roles.user_inputs, roles.specialised
    if len(values) != len(names):
        raise InputError(f"runtime: expected {len(names)} inputs ({', '.join(names)}), "
                         f"got {len(values)}")
    bindings: Bindings = {}
    derived: list[tuple[str, int, int, sympy.Expr]] = []
    for name, value in zip(names, values, strict=True):
        if name in constants:
            _check_constant(name, value, constants[name])
            continue
        spec = facts.specs.get(name)
        if not isinstance(spec, TensorSpec):
            continue
        _check_tensor(name, value, spec)
        dims = facts.shapes[(name, None)].dims
        for dim, (size, expr) in enumerate(zip(value.shape, dims, strict=True)):
            if isinstance(expr, int) or expr.is_Symbol:
                _bind_dim(program, name, dim, int(size), expr, bindings)
            else:
                derived.append((name, dim, int(size), expr))
    _bind_derived(program, derived, bindings)
    return bindings


def _bind_derived(program: ExportedProgram, derived: list[tuple[str, int, int, sympy.Expr]],
                  bindings: Bindings) -> None:
    """Check dims given as expressions (a derived ``Dim``: ``2 * n``, ``n + 1``); a symbol that
    no input carries bare is solved from the first linear expression that holds it alone."""
    while derived:
        progress = False
        for item in list(derived):
            name, dim, size, expr = item
            unbound = [s for s in expr.free_symbols if s not in bindings]
            if len(unbound) > 1:
                continue
            if unbound:
                _bind_dim(program, name, dim, _solve(name, dim, size, expr, unbound[0]),
                          unbound[0], bindings)
            value = int(expr.xreplace({s: sympy.Integer(bindings[s]) for s in expr.free_symbols}))
            if value != size:
                raise InputError(f"runtime: dim {dim} of input {name!r} is {size}, but the "
                                 f"program was compiled for {expr} = {value} "
                                 f"({_given(expr, bindings)})")
            derived.remove(item)
            progress = True
        if not progress:
            name, dim, _, expr = derived[0]
            raise InputError(f"runtime: dim {dim} of input {name!r} is {expr}, and no input "
                             f"gives its symbols on their own; export with a plain Dim there")


def _solve(name: str, dim: int, size: int, expr: sympy.Expr, symbol: sympy.Symbol) -> int:
    """The value of ``symbol`` that makes the linear ``expr`` equal ``size``."""
    base = int(expr.xreplace({symbol: sympy.Integer(0)}))
    slope = int(expr.xreplace({symbol: sympy.Integer(1)})) - base
    if slope == 0 or (size - base) % slope:
        raise InputError(f"runtime: dim {dim} of input {name!r} is {size}, but the program "
                         f"was compiled for {expr}: no integer {symbol} gives {size}")
    return (size - base) // slope


def _given(expr: sympy.Expr, bindings: Bindings) -> str:
    return ", ".join(f"{s} = {bindings[s]}" for s in sorted(expr.free_symbols, key=str))


def _check_constant(name: str, value: Any, compiled: Any) -> None:
    if type(value) is not type(compiled) or value != compiled:
        raise InputError(f"runtime: input {name!r} is {value!r}, but the program was exported "
                         f"with {compiled!r} and specialised to it; compile again with "
                         f"{value!r} to run with it")


def _bind_dim(program: ExportedProgram, name: str, dim: int, size: int,
              expr: int | sympy.Expr, bindings: Bindings) -> None:
    if isinstance(expr, int):
        if size != expr:
            raise InputError(f"runtime: dim {dim} of input {name!r} is {size}, but the program "
                             f"was compiled for exactly {expr}; export with a Dim to vary it")
        return
    lower, upper = _range(program, expr)
    if size < lower or (upper is not None and size > upper):
        raise InputError(f"runtime: dim {dim} of input {name!r} is {size}, outside the range "
                         f"[{lower}, {upper}] of {expr} the program was compiled for")
    if bindings.setdefault(expr, size) != size:
        raise InputError(f"runtime: dim {dim} of input {name!r} is {size}, but {expr} is "
                         f"{bindings[expr]} in another input: they must be equal")
