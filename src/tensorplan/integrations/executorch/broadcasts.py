"""A program rewrite before ExecuTorch's lowering: an expand read only by kernels that broadcast
is dropped.

In the edge program every ``expand`` is an ``expand_copy`` kernel that writes its input out in
full, and ``repeat`` of size-1 dims is the same copy. When the copy is read only by kernels that
broadcast that argument themselves (an attention mask ``(B, 1, 1, S)`` expanded to
``(B, H, S, S)`` and added to the scores), the full buffer is arena room and traffic for
nothing. :func:`broadcast_copies_removed` gives those readers the unexpanded input instead::

    mask (1, 1, 1, 8) -> expand_copy (1, 4, 8, 8) -> add(scores (1, 4, 8, 8), ·) (1, 4, 8, 8)
    mask (1, 1, 1, 8) ---------------------------> add(scores (1, 4, 8, 8), ·) (1, 4, 8, 8)

An expand is dropped only when all of these hold (shapes from the traced ``meta["val"]``):

- it is ``expand_copy``, or a ``repeat`` whose every count above 1 falls on a size-1 dim or a
  new leading dim (a repeat that tiles real data stays);
- every reader is an op whose ExecuTorch kernel (its out variant, as ExecuTorch's out-variant
  pass picks it) was measured to broadcast the argument the expand is passed as
  (``kernels.broadcasting``), and the expand is passed as nothing else (not inside a list);
- each reader's tensor operands, with the expand replaced by its input, still broadcast to
  exactly the reader's shape, rank included (so the result and its planned bytes do not
  change; BART's ``arange(64)`` expanded to ``(1, 64)`` and added to a zero-dim constant
  stays: without it the sum is ``(64,)``);
- its input has rank at least 1 (a zero-dim tensor takes a lower part in type promotion than
  the dimensioned expand did, which could change the result's dtype) and ExecuTorch's
  contiguous dim order label, as the expand has (its kernels check the labels);
- it is not a graph output, and its input is an op's value or a graph input that is not a
  mutated buffer nor a buffer's new value (a copy of a buffer may be a snapshot taken before the
  buffer is written; see ``identities.py`` for the measured case).

Dropping it never grows the live bytes at any step: the input is no larger than the copy, and
it now lives until the copy's last reader, over steps where the copy was live. Which ops copy
their input is said by name (no schema or tag says it); which kernels broadcast is measured
(``tests/test_executorch_broadcasts.py`` runs every entry in ExecuTorch's runtime against
eager PyTorch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx

from tensorplan.integrations.executorch import kernels
from tensorplan.integrations.executorch.identities import buffer_values, same_size
from tensorplan.integrations.executorch.links import op_key
from tensorplan.integrations.executorch.vocabulary import traced_value


def _shape(node: Any) -> tuple[Any, ...] | None:
    value = traced_value(node)
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def _repeat_is_expand(node: torch.fx.Node) -> bool:
    """True when ``repeat(x, counts)`` only repeats size-1 dims of ``x`` (aligned right, as
    ``repeat`` aligns them) or makes new leading dims."""
    source, counts = _shape(node.args[0]), list(node.args[1])
    if source is None or len(counts) < len(source):
        return False
    padded = [1] * (len(counts) - len(source)) + list(source)
    return all(same_size(count, 1) or same_size(size, 1)
               for count, size in zip(counts, padded, strict=True))


def _expands(node: torch.fx.Node) -> bool:
    """True when ``node``'s value is its first argument broadcast to its shape."""
    name = getattr(node.target, "__name__", "")
    if name == "aten.expand_copy.default":
        return True
    return name == "aten.repeat.default" and _repeat_is_expand(node)


def _kernel(reader: torch.fx.Node) -> str | None:
    """The op key of the out-variant kernel ExecuTorch will run for ``reader``, or None."""
    to_out = getattr(reader.target, "to_out_variant", None)
    if reader.op != "call_function" or to_out is None:
        return None
    try:
        return op_key(to_out())
    except (RuntimeError, AssertionError):  # an op without an out variant
        return None


def _passed_as(reader: torch.fx.Node, node: torch.fx.Node) -> set[str] | None:
    """Schema names of the arguments of ``reader`` that are ``node``; None when ``node`` is
    also passed inside a list or tuple argument."""
    names = set()
    for index, argument in enumerate(reader.target._schema.arguments):
        value = reader.args[index] if index < len(reader.args) else reader.kwargs.get(
            argument.name)
        if value is node:
            names.add(argument.name)
        elif isinstance(value, (list, tuple)) and any(item is node for item in value):
            return None
    return names


def _broadcast_to(shapes: Sequence[tuple[Any, ...]], result: tuple[Any, ...]) -> bool:
    """True when ``shapes`` broadcast to exactly ``result`` (as torch broadcasts them): each
    fits under it (aligned right, every dim 1 or the result's), one has its rank, and every
    result dim not 1 is some shape's own."""
    if any(len(shape) > len(result) for shape in shapes) or not any(
            len(shape) == len(result) for shape in shapes):
        return False
    for offset, size in enumerate(reversed(result)):
        dims = [shape[-1 - offset] for shape in shapes if offset < len(shape)]
        if not all(same_size(d, 1) or same_size(d, size) for d in dims):
            return False
        if not same_size(size, 1) and not any(same_size(d, size) for d in dims):
            return False
    return True


def _broadcasting_reader(reader: torch.fx.Node, node: torch.fx.Node,
                         table: Mapping[str, frozenset[str]]) -> bool:
    """True when ``reader`` may read ``node``'s input in place of ``node``."""
    listed = table.get(_kernel(reader) or "")
    passed = _passed_as(reader, node) if listed is not None else None
    if not passed or not passed <= listed:
        return False
    source = node.args[0]
    operands = [_shape(source if arg is node else arg) for arg in reader.all_input_nodes]
    result = _shape(reader)
    return result is not None and _broadcast_to([s for s in operands if s is not None], result)


def _contiguous(node: torch.fx.Node) -> bool:
    """True when ``node``'s value has ExecuTorch's contiguous dim order label."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return False
    try:
        return tuple(value.dim_order()) == tuple(range(value.dim()))
    except (RuntimeError, ValueError, TypeError):  # strides that leave the order ambiguous
        return False


def _dims(node: torch.fx.Node) -> int:
    """How many dims ``node``'s value has (0 for a value that is no tensor)."""
    value = node.meta.get("val")
    return value.dim() if isinstance(value, torch.Tensor) else 0


def _droppable(node: torch.fx.Node, written: set[str],
               table: Mapping[str, frozenset[str]]) -> bool:
    """True when the expand ``node`` may be dropped (see the module docstring)."""
    source = node.args[0] if node.args else None
    if not isinstance(source, torch.fx.Node) or not _expands(node):
        return False
    if source.op not in ("call_function", "placeholder") or source.name in written:
        return False
    if _dims(source) == 0 or not _contiguous(source) or not _contiguous(node) or not node.users:
        return False
    return all(user.op != "output" and _broadcasting_reader(user, node, table)
               for user in node.users)


def broadcast_copies_removed(exported_program: Any,
                             table: Mapping[str, frozenset[str]] | None = None) -> int:
    """Rewrite the edge program in place (see the module docstring); return how many expands
    were dropped. ``table`` (out-variant op key -> the arguments its kernel broadcasts)
    replaces the measured ``kernels.broadcasting()``: for measuring, not for shipping."""
    table = kernels.broadcasting() if table is None else table
    graph = exported_program.graph
    written = buffer_values(exported_program)
    dropped = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or not _droppable(node, written, table):
            continue
        node.replace_all_uses_with(node.args[0])
        graph.erase_node(node)
        dropped += 1
    if dropped:
        exported_program.graph_module.recompile()
    return dropped
