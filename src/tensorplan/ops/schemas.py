"""What operator schemas say, shared by the stages that read them (the rewrites, alias
analysis, constant folding, the runtime, the ExecuTorch integration)."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import torch
import torch.fx


def signature(arguments: Iterable[torch.Argument]) -> list[tuple[str, str]]:
    """(name, type) of each schema argument: what two overloads must share to be twins."""
    return [(a.name, str(a.type)) for a in arguments]


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
    same = signature(arguments) == signature(op._schema.arguments)
    return candidate if writes_self and same else None


# Return types of ops that report sizes (``sym_size``, ``sym_numel``, ``sym_stride``).
_SIZE_TYPES = frozenset({"SymInt", "int", "SymInt[]", "int[]"})


def returns_sizes(op: torch._ops.OpOverload) -> bool:
    """True for ops whose result is sizes, which follow from the input sizes alone."""
    returns = op._schema.returns
    return bool(returns) and all(str(r.type) in _SIZE_TYPES for r in returns)


def is_view(op: torch._ops.OpOverload) -> bool:
    """True when every result of ``op`` is a view of an argument (``Tensor(a)``, no write)."""
    returns = op._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write
                                 for r in returns)


# The keyword arguments of every ATen factory (its TensorOptions).
_FACTORY_OPTIONS = frozenset({"dtype", "layout", "device", "pin_memory"})


def reads_only_metadata(op: torch._ops.OpOverload) -> bool:
    """True for the factories that take their sizes and options from a tensor argument and
    read none of its elements: ATen's ``*_like`` and ``new_*`` families (``full_like``,
    ``zeros_like``, ``new_ones``), recognised by a factory's keyword arguments and those
    names; random ones (``rand_like``) are factories too but are never folded."""
    name = op._schema.name.partition("::")[2]
    options = {a.name for a in op._schema.arguments if a.kwarg_only}
    return _FACTORY_OPTIONS <= options and (name.endswith("_like") or name.startswith("new_"))


def scratch_position(node: torch.fx.Node) -> int | None:
    """The position of a kernel's ``scratch`` argument (CMSIS-NN's working buffer, made for
    that one call), from its schema; None for a node without one. The kernel writes that
    buffer though its schema only reads it: the value passed there is never a constant."""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    names = [a.name for a in schema.arguments] if schema is not None else []
    if "scratch" not in names or names.index("scratch") >= len(node.args):
        return None
    return names.index("scratch")


def is_scratch_of(node: torch.fx.Node, user: torch.fx.Node) -> bool:
    """``node`` is passed to ``user`` as its ``scratch`` buffer (``scratch_position``)."""
    position = scratch_position(user)
    return position is not None and user.args[position] is node
