"""Stage 2: one ``TensorSpec`` for every value of a program, subgraphs included.

Worked example: a linear layer ``y = x @ W.T + b`` with ``x: Dim('b', max=64) x 8`` gives

    p_weight   f32[4,8]        dim_order=(0,1)  const
    x          f32[b<=64,8]    dim_order=(0,1)  2048B
    permute    f32[8,4]        dim_order=(1,0)  (a view of p_weight)
    addmm      f32[b<=64,4]    dim_order=(0,1)  1024B

(each dynamic dim by its ``Dim`` name, ``SpecTable.dim_names``; torch's symbol where none is known)
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.export import ExportedProgram

from tensorplan.errors import UnboundedShapeError
from tensorplan.frontend.dim_names import dim_names, named
from tensorplan.frontend.roles import Roles, read_roles
from tensorplan.specs.bounds import Limits, upper_bound
from tensorplan.specs.layout import dense_strides, traced_dim_order, view_strides
from tensorplan.specs.limits import output_limits
from tensorplan.specs.spec import MAX_BYTES, Entry, SpecTable, TensorSpec
from tensorplan.specs.trace import TracedValue, carried_spec, retrace


def tensor_spec(value: torch.Tensor, where: str, const: bool = False,
                limits: Limits | None = None) -> TensorSpec:
    """The spec of one traced tensor: upper-bound shape, its layout, dense strides/bytes, and
    its traced strides where they are not dense (a view's ``view_strides``).

    ``where`` names the value in error messages (an unbounded dim raises
    ``UnboundedShapeError``); ``limits`` bound data-dependent sizes (``limits.py``).

    >>> tensor_spec(torch.empty(2, 3, 4, 5, memory_format=torch.channels_last), "x").strides
    (60, 1, 15, 3)
    """
    sym_shape = tuple(value.shape)
    shape = tuple(upper_bound(size, f"dim {i} of {where}", limits)
                  for i, size in enumerate(sym_shape))
    dim_order = traced_dim_order(value)
    nbytes = math.prod(shape) * value.dtype.itemsize
    if nbytes > MAX_BYTES:
        raise UnboundedShapeError(
            f"propagate: {where} would take {nbytes:,} B at its upper-bound shape {shape}, "
            "more than a 64-bit size holds; lower its bounds (the Dim maxima, or "
            "torch._check(size <= N) after a data-dependent op)")
    return TensorSpec(shape=shape, sym_shape=sym_shape, dtype=value.dtype, dim_order=dim_order,
                      strides=dense_strides(shape, dim_order),
                      nbytes=nbytes, const=const,
                      view_strides=view_strides(value, dim_order),
                      view_offset=value.storage_offset())


def _entry(value: Any, where: str, const: bool, limits: Limits) -> Entry:
    if isinstance(value, torch.Tensor):
        return tensor_spec(value, where, const, limits)
    if isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value):
        return tuple(tensor_spec(v, f"{where}[{i}]", const, limits)
                     if isinstance(v, torch.Tensor) else None for i, v in enumerate(value))
    return None


def _spec_of(name: str, traced: TracedValue, constants: frozenset[str],
             limits: Limits) -> Entry:
    if traced.carried:
        return carried_spec(traced.node)
    node = traced.node
    where = f"node {name!r} ({node.target if node.op == 'call_function' else node.op})"
    return _entry(traced.value, where, "/" not in name and name in constants, limits)


def propagate(program: ExportedProgram, roles: Roles | None = None) -> SpecTable:
    """Give every value of ``program`` a ``TensorSpec`` from one fake re-trace.

    The program (its graph, ``node.meta`` and signature) is left unchanged, and calling this
    twice gives equal tables. A data-dependent size is bounded by what its op's inputs allow
    where ``limits.py`` knows the op, else by the ShapeEnv. Raises ``UnboundedShapeError`` for
    a dim with no finite upper bound and ``UnsupportedOpError`` for a node that cannot be
    re-traced. ``roles`` (read from the program when not given) says which placeholders are
    constants.
    """
    constants = (roles or read_roles(program)).constants
    names = dim_names(program)
    try:
        values = retrace(program)
        limits = output_limits(values)
        entries = {name: _spec_of(name, traced, constants, limits)
                   for name, traced in values.items()}
    except UnboundedShapeError as error:  # it names the size's symbols: say the Dim names
        raise UnboundedShapeError(named(error, names)) from None
    return SpecTable(entries, names)
