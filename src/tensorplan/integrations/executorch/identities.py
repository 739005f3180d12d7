"""A program rewrite before ExecuTorch's lowering: copies that change nothing are dropped.

``to_edge`` keeps ops that copy their input into a tensor equal to it, byte for byte:

- ``constant_pad_nd(x, [0, 0, ...])``: Hugging Face's TF-style "same" padding pads every 1x1
  convolution by zero (HF MobileNetV2: 34 of its 52 pads);
- ``expand_copy(x, sizes)`` to the shape ``x`` already has (scaled dot-product attention's
  decomposition expands the scores and the value to their own shapes);
- ``permute_copy(x, [0, 1, ...])``;
- ``slice_copy`` that keeps the whole shape;
- ``clone`` / ``_clone_dim_order`` / ``_to_dim_order_copy`` keeping the dtype and dim order.

In the emitted program each is a kernel call that reads the input and writes a second buffer
of the same bytes: arena room and traffic for nothing. :func:`identity_copies_removed` makes
their readers read the input instead, when the copy's value has the input's shape, dtype and
dim order (from the traced ``meta["val"]``), is not a graph output, and its input is an op's
value or a graph input that is not a mutated buffer (a copy of a buffer may be a snapshot
taken before the buffer is written), nor a buffer's new value (measured: ExecuTorch's
re-inplace pass makes an ``index_put`` into a buffer write the buffer itself, and a view read
straight from that ``index_put`` keeps storage of its own that nothing writes; the Whisper
decoder's ``.pte`` read its value cache there and was 0.42 off eager). The dim order is
compared as ExecuTorch labels it, size-1 dims included: its kernels check the label, so a copy
that only relabels the same bytes stays.
Which ops copy their input is said by name: no schema or tag says it (a ``permute_copy`` or an
``as_strided_copy`` to the same shape may move every element). The values are the same
tensors; the tests compare the rewritten programs with eager PyTorch in ExecuTorch's runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from torch.export.graph_signature import OutputKind
from torch.fx.experimental.symbolic_shapes import statically_known_true

from tensorplan.integrations.executorch.vocabulary import nodes_replaced


def same_size(a: Any, b: Any) -> bool:
    """True when two sizes are known equal (ints, or symbols proven equal)."""
    return bool(statically_known_true(a == b))


def _zero_pad(node: torch.fx.Node) -> bool:
    return all(same_size(p, 0) for p in node.args[1])


def _identity_permutation(node: torch.fx.Node) -> bool:
    return list(node.args[1]) == list(range(len(node.args[1])))


def _always(node: torch.fx.Node) -> bool:
    return True


# op name -> what else must hold, besides the value's shape, dtype and dim order being the
# input's, for the op to copy its input unchanged
_COPIES: dict[str, Callable[[torch.fx.Node], bool]] = {
    "aten.constant_pad_nd.default": _zero_pad,
    "aten.expand_copy.default": _always,
    "aten.permute_copy.default": _identity_permutation,
    "aten.slice_copy.Tensor": _always,
    "aten.clone.default": _always,
    "dim_order_ops._clone_dim_order.default": _always,
    "dim_order_ops._to_dim_order_copy.default": _always,
}


def _unchanged(node: torch.fx.Node) -> bool:
    """True when ``node``'s value equals its first argument's, shape, dtype and layout."""
    check = _COPIES.get(getattr(node.target, "__name__", ""))
    source = node.args[0] if node.args else None
    if check is None or not isinstance(source, torch.fx.Node):
        return False
    out, given = node.meta.get("val"), source.meta.get("val")
    if not isinstance(out, torch.Tensor) or not isinstance(given, torch.Tensor):
        return False
    return (out.dtype == given.dtype and out.dim() == given.dim()
            and all(same_size(a, b) for a, b in zip(out.shape, given.shape, strict=True))
            and _dim_order(out) is not None and _dim_order(out) == _dim_order(given)
            and check(node))


def _dim_order(value: torch.Tensor) -> tuple[int, ...] | None:
    """The tensor's dim order, or None when its strides leave it ambiguous."""
    try:
        return tuple(value.dim_order())
    except (RuntimeError, ValueError, TypeError):
        return None


def _mutated_buffers(exported_program: Any) -> set[str]:
    signature = exported_program.graph_signature
    mutated = set(signature.buffers_to_mutate.values())
    return {spec.arg.name for spec in signature.input_specs
            if getattr(spec, "target", None) in mutated}


def _new_buffer_values(exported_program: Any) -> set[str]:
    """Names of the nodes whose values the program writes back to its buffers."""
    return {spec.arg.name for spec in exported_program.graph_signature.output_specs
            if spec.kind == OutputKind.BUFFER_MUTATION}


def buffer_values(exported_program: Any) -> set[str]:
    """Names of the graph inputs of the buffers the program mutates and of the nodes whose
    values it writes back to its buffers: a copy of either must stay (module docstring)."""
    return _mutated_buffers(exported_program) | _new_buffer_values(exported_program)


def identity_copies_removed(exported_program: Any) -> int:
    """Rewrite the edge program in place (see the module docstring); return how many copies
    were dropped."""
    mutated = buffer_values(exported_program)

    def source(node: torch.fx.Node) -> torch.fx.Node | None:
        if node.op != "call_function" or not _unchanged(node):
            return None
        copied = node.args[0]
        if any(user.op == "output" for user in node.users) or copied.op not in (
                "call_function", "placeholder") or copied.name in mutated:
            return None
        return copied
    return nodes_replaced(exported_program, source)
