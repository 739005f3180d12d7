"""Memory layouts: dim orders read from traced values, and when two layouts are the same memory.

A dim order lists a tensor's dims from the outermost to the innermost in memory: ``(0, 1, 2, 3)``
is contiguous NCHW, ``(0, 2, 3, 1)`` is channels_last. Two dim orders are the *same layout* when
they address the same bytes, which is the case when they agree once size-1 dims are dropped.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import sympy
import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils._sympy.functions import Max


def traced_dim_order(value: torch.Tensor) -> tuple[int, ...]:
    """The dim order ``torch.Tensor.dim_order()`` reports for a (fake) traced value.

    Symbolic and unbacked strides work: ``nonzero``'s ``(u0, 2)`` output with strides
    ``(1, u0)`` gives ``(1, 0)``. Where size-1 dims make several orders address the same memory,
    torch's canonical choice is kept (channels_last with C=1 is ``(0, 2, 3, 1)``). No guard is
    added to the program's ShapeEnv while deciding.

    >>> traced_dim_order(torch.empty(2, 1, 4, 5, memory_format=torch.channels_last))
    (0, 2, 3, 1)
    """
    shape, strides = tuple(value.shape), value.stride()
    if all(type(d) is int for d in (*shape, *strides)):
        return _static_dim_order(shape, strides)
    shape_env = _shape_env_of(value)
    if shape_env is None:
        return tuple(value.dim_order())
    with shape_env.suppress_guards():
        return tuple(value.dim_order())


@functools.lru_cache(maxsize=4096)
def _static_dim_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...]:
    """``dim_order()`` of a tensor of static sizes and strides (it depends on nothing else;
    a transformer repeats a few hundred of them thousands of times)."""
    with unset_fake_temporarily():
        return tuple(torch.empty_strided(shape, strides, device="meta").dim_order())


def _shape_env_of(value: torch.Tensor):
    mode = getattr(value, "fake_mode", None)
    return getattr(mode, "shape_env", None)


def dense_strides(shape: Sequence[int], dim_order: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a dense tensor of ``shape`` laid out in ``dim_order``.

    >>> dense_strides((2, 3, 4, 5), (0, 2, 3, 1))
    (60, 1, 15, 3)
    """
    strides = [0] * len(shape)
    step = 1
    for dim in reversed(dim_order):
        strides[dim] = step
        step *= max(int(shape[dim]), 1)
    return tuple(strides)


def view_strides(value: torch.Tensor, dim_order: Sequence[int]) -> tuple | None:
    """The traced strides of ``value`` when they are not those of a dense tensor in
    ``dim_order`` (ints and SymInts, as traced), else None.

    Strides of size-1 dims address nothing and are not compared. An ``expand``'s 0 strides, a
    step slice or an ``as_strided`` window are kept; a permuted dense tensor is dense.

    >>> view_strides(torch.empty(3, 1).expand(3, 4), (0, 1))
    (1, 0)
    >>> view_strides(torch.empty(2, 3).t(), (1, 0)) is None
    True
    """
    strides, sizes = tuple(value.stride()), tuple(value.shape)
    dense: list[object] = [0] * len(sizes)
    step: object = 1
    for dim in reversed(dim_order):
        dense[dim] = step
        step = step * torch.sym_max(sizes[dim], 1)  # as torch computes dense strides
    env = _shape_env_of(value)

    def same(a: object, b: object) -> bool:
        return _unit_max_dropped(size_expression(a), env) == \
            _unit_max_dropped(size_expression(b), env)

    differs = any(size_expression(sizes[d]) != 1 and not same(strides[d], dense[d])
                  for d in range(len(sizes)))
    return strides if differs else None


def _unit_max_dropped(expr: object, shape_env: object) -> object:
    """``expr`` with each ``Max(1, e)`` written ``e`` where ``e`` is at least 1 in its range:
    torch writes a dense stride over a size ``Max(1, size)`` or not, and sympy cannot drop the
    ``Max`` of a size it knows nothing of (a chunk's ``ceil(S / n)`` rows)."""
    if not isinstance(expr, sympy.Basic) or shape_env is None:
        return expr
    return expr.replace(
        lambda e: isinstance(e, (sympy.Max, Max)) and len(e.args) == 2 and 1 in e.args and
        shape_env.bound_sympy(next(a for a in e.args if a != 1)).lower >= 1,
        lambda e: next(a for a in e.args if a != 1))


def size_expression(size: object) -> object:
    """An int, or a SymInt's expression in its ShapeEnv's canonical symbols (compared, never
    guarded)."""
    if not isinstance(size, torch.SymInt):
        return int(size)
    node = size.node
    expr = node.shape_env.replace(node.expr)
    return int(expr) if expr.is_number else expr


def same_layout(shape: Sequence[int], order_a: Sequence[int], order_b: Sequence[int]) -> bool:
    """True when two dim orders of a tensor of ``shape`` address the same bytes.

    Size-1 dims take no room, so NCHW and NHWC of a ``(2, 3, 1, 1)`` tensor are one layout; a
    tensor with no elements addresses no bytes, so all its orders are one layout.

    >>> same_layout((2, 3, 1, 1), (0, 1, 2, 3), (0, 2, 3, 1))
    True
    >>> same_layout((2, 3, 4, 4), (0, 1, 2, 3), (0, 2, 3, 1))
    False
    """
    def significant(order: Sequence[int]) -> list[int]:
        return [d for d in order if int(shape[d]) != 1]

    if len(order_a) != len(order_b):
        return False
    return any(int(s) == 0 for s in shape) or significant(order_a) == significant(order_b)
