"""Finding the ATen out-variant of an operator from its schema.

An out-variant of a functional op takes the same arguments (same names *and* types, so
``le.Scalar`` never picks ``le.Tensor_out``) plus one ``Tensor(x!)`` out argument per return. The
tensor-options arguments of factory ops (``dtype``, ``layout``, ``device``, ``pin_memory``) may be
missing from it: the out tensor carries them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

_TENSOR_OPTIONS = frozenset({"dtype", "layout", "device", "pin_memory"})


@dataclass(frozen=True)
class OutVariant:
    """How to call an op so that it writes into preallocated tensors."""

    op: torch._ops.OpOverload       # the out overload
    out_names: tuple[str, ...]       # keyword names of its out arguments, one per return
    dropped: tuple[str, ...]         # functional arguments it does not take (tensor options)


def _signature(arguments) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in arguments]


def _matches(functional: torch._ops.OpOverload,
             candidate: torch._ops.OpOverload) -> OutVariant | None:
    schema = candidate._schema
    outs = [a for a in schema.arguments if a.is_out]
    if not outs or len(outs) != len(functional._schema.returns):
        return None
    inputs = _signature(a for a in schema.arguments if not a.is_out)
    wanted = _signature(functional._schema.arguments)
    dropped = tuple(name for name, _ in wanted
                    if name in _TENSOR_OPTIONS and name not in {n for n, _ in inputs})
    if [w for w in wanted if w[0] not in dropped] != inputs:
        return None
    return OutVariant(candidate, tuple(a.name for a in outs), dropped)


@functools.cache
def out_variant(op: torch._ops.OpOverload) -> OutVariant | None:
    """The out-variant of ``op``, or None when ATen has none.

    >>> out_variant(torch.ops.aten.le.Scalar).op
    <OpOverload(op='aten.le', overload='Scalar_out')>
    >>> out_variant(torch.ops.aten.max.dim).out_names
    ('max', 'max_values')
    """
    if any(a.is_out for a in op._schema.arguments):
        return None
    packet = op.overloadpacket
    for name in packet.overloads():
        found = _matches(op, getattr(packet, name))
        if found is not None:
            return found
    return None


@functools.cache
def inplace_variant(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The in-place twin of a functional op (``index_put`` -> ``index_put_``), or None.

    Its schema must take the same arguments and write its first one (``Tensor(a!) self``).
    """
    namespace = getattr(torch.ops, op.namespace, None)
    packet = getattr(namespace, op.overloadpacket.__name__ + "_", None) if namespace else None
    if packet is None or op._overloadname not in packet.overloads():
        return None
    candidate = getattr(packet, op._overloadname)
    arguments = candidate._schema.arguments
    writes_self = bool(arguments) and arguments[0].alias_info is not None \
        and arguments[0].alias_info.is_write
    same = _signature(arguments) == _signature(op._schema.arguments)
    return candidate if writes_self and same else None
