"""Whether a step's failure is the user's: a check of the program's own that the data fails,
or a kernel refusing the values of its index arguments.

A step that raises on inputs that passed the runtime's checks is a bug of ours (the run's
``InternalError``) unless it is an ``aten._assert_scalar`` (a ``torch._check`` of the model's,
or a bound torch.export derived for a size read from the data: eager fails it too), or both of
these hold, in which case it is an ``InputError``:

1. one of the node's index arguments holds a value outside ``[0, n)`` of the dim it indexes.
   Which arguments those are comes from the op's schema: a tensor (or a list of tensors)
   named ``index`` or ``indices``, indexing the ``self`` (or ``weight``) tensor along the
   ``dim`` argument, or along dim ``k`` for the ``k``-th tensor of a list, or along dim 0 of
   ``weight`` for an op without a ``dim`` (``embedding``);
2. the node's own op, run eagerly on the same argument values, raises too: the refusal is
   torch's, not our out-variant's or our views' (``index.Tensor`` takes ``-1``, so a ``-1`` is
   never blamed on the user).

Worked example: ``aten.embedding.default(weight, indices)`` with ``weight`` of 256 rows and
``indices`` holding 300 fails in ``index_select``; eager ``embedding`` raises ``IndexError``
too, so the run raises ``InputError``: "run: node 'embedding' (aten.embedding.default)
refuses the values of its indices (the input 'tokens'): 300 is outside the valid range
[0, 255] of dim 0 of weight (size 256), and eager PyTorch refuses it too (IndexError: ...);
pass values in [0, 255]".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from tensorplan.errors import InputError

_INDEX_NAMES = ("index", "indices")   # schema names of index arguments
_TABLE_NAMES = ("self", "weight")     # schema names of the tensor they index
_INDEX_DTYPES = (torch.int64, torch.int32)


@dataclass(frozen=True)
class OutOfRange:
    """One index argument holding a value outside the dim it indexes."""

    argument: str  # its schema name ("indices", "index", or "indices[1]" in a list)
    value: int     # the offending value (the largest when one is too large, else the least)
    table: str     # the schema name of the tensor it indexes
    dim: int       # the dim it indexes
    size: int      # that dim's size: the valid values are [0, size)


def refusal(node: torch.fx.Node, prefix: str, args: list, kwargs: dict) -> InputError | None:
    """The ``InputError`` for the failure of the step of ``node`` (in the graph ``prefix``) on
    these argument values, when it is the user's (see the module docstring); None when it is
    ours."""
    op = node.target
    if not isinstance(op, torch._ops.OpOverload):
        return None
    if op is torch.ops.aten._assert_scalar.default:
        return InputError(_failed_check(node, prefix, args))
    found = next(out_of_range(op, args, kwargs), None)
    if found is None:
        return None
    eager = _eager_refusal(op, args, kwargs)
    if eager is None:
        return None
    return InputError(_message(node, prefix, found, eager))


def _failed_check(node: torch.fx.Node, prefix: str, args: list) -> str:
    checked = node.args[0]
    what = f"{checked.name} = {checked.target.__name__}({', '.join(map(str, checked.args))})" \
        if isinstance(checked, torch.fx.Node) and callable(checked.target) else str(checked)
    return (f"run: node {prefix}{node.name!r} ({node.target}) fails on these inputs: "
            f"{args[1] if len(args) > 1 else 'the program check'} ({what}). The model "
            "checks a size read from its data (a torch._check, or the bound torch.export "
            "derived for it) and eager PyTorch fails it too; the plan holds sizes within "
            "that bound only. Pass inputs within it, or export with a larger bound "
            "(torch._check(size <= N)) and compile again")


def out_of_range(op: torch._ops.OpOverload, args: list, kwargs: Mapping[str, Any]
                 ) -> Iterator[OutOfRange]:
    """Each index argument of ``op`` (by its schema) whose values leave its dim's range.

    >>> weight, indices = torch.zeros(256, 4), torch.tensor([[1, 300]])
    >>> next(out_of_range(torch.ops.aten.embedding.default, [weight, indices], {}))
    OutOfRange(argument='indices', value=300, table='weight', dim=0, size=256)
    """
    bound = _bound(op, args, kwargs)
    table_name = next((name for name in _TABLE_NAMES
                       if isinstance(bound.get(name), torch.Tensor)), None)
    if table_name is None:
        return
    table, dim = bound[table_name], bound.get("dim")
    for name in _INDEX_NAMES:
        given = bound.get(name)
        if isinstance(given, torch.Tensor) and (dim is not None or table_name == "weight"):
            yield from _checked(name, given, table_name, table, 0 if dim is None else dim)
        elif isinstance(given, (list, tuple)) and dim is None:
            for k, index in enumerate(given):
                if isinstance(index, torch.Tensor):
                    yield from _checked(f"{name}[{k}]", index, table_name, table, k)


def _bound(op: torch._ops.OpOverload, args: list, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments by their schema names."""
    names = [a.name for a in op._schema.arguments]
    return {**dict(zip(names, args, strict=False)), **kwargs}


def _checked(argument: str, index: torch.Tensor, table_name: str, table: torch.Tensor,
             dim: int) -> Iterator[OutOfRange]:
    """``index``'s offending value along ``dim`` of ``table``, if it has one."""
    if index.dtype not in _INDEX_DTYPES or index.numel() == 0 \
            or not -table.dim() <= dim < table.dim():
        return
    dim %= table.dim()
    size, largest, least = table.shape[dim], int(index.max()), int(index.min())
    if largest >= size:
        yield OutOfRange(argument, largest, table_name, dim, size)
    elif least < 0:
        yield OutOfRange(argument, least, table_name, dim, size)


def _eager_refusal(op: torch._ops.OpOverload, args: list, kwargs: dict) -> str | None:
    """What eager PyTorch says when it runs ``op`` on these arguments, None if it accepts."""
    try:
        with torch.no_grad():
            op(*args, **kwargs)
    except Exception as error:  # the refusal itself is what is asked for
        return f"{type(error).__name__}: {' '.join(str(error).split())}"
    return None


def _message(node: torch.fx.Node, prefix: str, found: OutOfRange, eager: str) -> str:
    """The refusal: the node, the op, the argument (and the input it is), the value, the
    valid range, eager's own words and what to do."""
    valid = f"[0, {found.size - 1}]" if found.size else "none (the dim is empty)"
    source = _source(node, found.argument, prefix)
    return (f"run: node {prefix + node.name!r} ({node.target}) refuses the values of its "
            f"{found.argument}{source}: {found.value} is outside the valid range {valid} of "
            f"dim {found.dim} of {found.table} (size {found.size}), and eager PyTorch refuses "
            f"it too ({eager}); pass values in {valid}")


def _source(node: torch.fx.Node, argument: str, prefix: str) -> str:
    """`` (the input 'tokens')`` when the argument is a top-level placeholder, else ``""``."""
    name, _, position = argument.partition("[")
    schema = [a.name for a in node.target._schema.arguments]
    given = node.kwargs.get(name)
    if given is None and name in schema and schema.index(name) < len(node.args):
        given = node.args[schema.index(name)]
    if position and isinstance(given, (list, tuple)):
        given = given[int(position.rstrip("]"))]
    if prefix or not isinstance(given, torch.fx.Node) or given.op != "placeholder":
        return ""
    return f" (the input {given.name!r})"
