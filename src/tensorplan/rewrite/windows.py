"""The spatial rules of the patch rewrite (``patches.py``): which ops run patch by patch, and
what input region each output region reads.

An op with a spatial window (a convolution of any stride, dilation, groups and padding, ATen
or Cortex-M int8; max and average pooling; ``constant_pad_nd``) has a :class:`Window`: output
rows ``[o0, o1)`` read input rows ``[o0 * s - p, (o1 - 1) * s - p + d * (k - 1) + 1)``, and a
padded input element reads as its ``fill``. Pointwise ops (by their ``torch.Tag.pointwise``, or
named for the Cortex-M kernels in ``int8.py``) and inference batch norm read the same region
of each image operand; an operand the same at every pixel is read whole. A ``mean`` or ``sum``
over the two spatial dims is a reduction (run once, before the patches).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from tensorplan.rewrite.int8 import image_positions, int8_conv, kernel_size, padding_value

Span = tuple[int, int]  # [start, stop) of rows or columns, maybe outside the value's extent
Region = tuple[Span, Span]  # (rows, columns)
Grid = tuple[int, int]  # (rows, columns) of patches

aten = torch.ops.aten
CONV = aten.convolution.default
BATCH_NORM = aten._native_batch_norm_legit_no_training.default
MAX_POOL = aten.max_pool2d_with_indices.default
AVG_POOL = aten.avg_pool2d.default
PAD = aten.constant_pad_nd.default
_IDENTITY_LIKE = {aten.clone.default, aten._to_copy.default}
MEAN, SUM = aten.mean.dim, aten.sum.dim_IntList


@dataclass(frozen=True)
class Window:
    """How an op's output rows and columns map to its input's: ``kernel``, ``stride``,
    ``padding`` (before) and ``dilation`` per spatial dim, and the value of padded input."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    fill: float

    def needs(self, out: Region) -> Region:
        """The (unclipped) input region the output region ``out`` reads."""
        return tuple(  # type: ignore[return-value]
            (o0 * s - p, (o1 - 1) * s - p + d * (k - 1) + 1)
            for (o0, o1), k, s, p, d in zip(out, self.kernel, self.stride, self.padding,
                                            self.dilation, strict=True))


def _pair(value: Sequence[int] | int) -> tuple[int, int]:
    values = [value] if isinstance(value, int) else list(value)
    return (values[0], values[-1])


def window(node: torch.fx.Node) -> Window | None:
    """The spatial window of a 4-D op the rewrite can run patch by patch, or None."""
    op, args = node.target, node.args
    conv8 = int8_conv(node)
    if conv8 is not None:
        return Window(kernel_size(node), _pair(args[conv8.stride]), _pair(args[conv8.padding]),
                      _pair(args[conv8.dilation]), padding_value(node, conv8))
    if op is CONV:
        weight = args[1].meta["val"]
        if args[6] or weight.dim() != 4:
            return None
        return Window(tuple(weight.shape[2:]), _pair(args[3]), _pair(args[4]), _pair(args[5]),
                      0.0)
    if op is MAX_POOL:
        kernel = _pair(args[1])
        stride = _pair(args[2]) if len(args) > 2 and args[2] else kernel
        ceil = len(args) > 5 and args[5]
        indices_read = any(user.args[1] == 1 for user in node.users)
        if ceil or indices_read:
            return None
        return Window(kernel, stride, _pair(args[3]) if len(args) > 3 else (0, 0),
                      _pair(args[4]) if len(args) > 4 else (1, 1), -math.inf)
    if op is AVG_POOL:
        kernel = _pair(args[1])
        stride = _pair(args[2]) if len(args) > 2 and args[2] else kernel
        padding = _pair(args[3]) if len(args) > 3 else (0, 0)
        ceil, counts = (args[4] if len(args) > 4 else False), (args[5] if len(args) > 5 else True)
        divisor = args[6] if len(args) > 6 else None
        if ceil or divisor is not None or (not counts and padding != (0, 0)):
            return None
        return Window(kernel, stride, padding, (1, 1), 0.0)
    if op is PAD:
        pad = list(args[1]) + [0] * (4 - len(args[1]))
        if len(args[1]) > 4 or min(pad) < 0:
            return None
        return Window((1, 1), (1, 1), (pad[2], pad[0]), (1, 1), float(args[2]) if len(args) > 2
                      else 0.0)
    return None


def _first(node: Any) -> Any:
    """A node's traced value, or the first of a tuple of them (batch norm, max pool)."""
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value[0] if isinstance(value, (tuple, list)) and value else value


def is_spatial(node: Any) -> bool:
    value = _first(node)
    return isinstance(value, torch.Tensor) and value.dim() == 4


def _image_of(arg: Any, extent: tuple[int, int]) -> bool:
    """``arg`` carries the image at ``extent`` (not a per-channel weight broadcast over it)."""
    return is_spatial(arg) and spatial_extent(arg) == extent and extent != (1, 1)


def _constant_over_space(arg: Any) -> bool:
    """A tensor argument whose last two dims (where it has them) are 1: the same at every
    pixel, so every patch reads all of it."""
    value = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return isinstance(value, torch.Tensor) and all(int(d) == 1 for d in value.shape[-2:])


def spatial_extent(node: torch.fx.Node) -> tuple[int, int]:
    shape = _first(node).shape
    return int(shape[2]), int(shape[3])


def runs_per_patch(node: torch.fx.Node) -> bool:
    """A 4-D op the rewrite runs patch by patch (windowed, pointwise, batch norm, getitem)."""
    if node.op != "call_function" or not is_spatial(node):
        return False
    op = node.target
    if op is operator.getitem:
        return node.args[1] == 0 and node.args[0].target in (BATCH_NORM, MAX_POOL) \
            and runs_per_patch(node.args[0])
    if op in (CONV, MAX_POOL, AVG_POOL, PAD) or int8_conv(node) is not None:
        return window(node) is not None
    positions = image_positions(node)
    if positions is not None:  # a Cortex-M pointwise kernel
        return _pointwise_over(node, [node.args[i] for i in positions])
    if op is BATCH_NORM:
        return True
    aten_op = op if isinstance(op, torch._ops.OpOverload) \
        else getattr(op, "_op", op)  # an edge-dialect operator wraps its ATen overload
    if isinstance(aten_op, torch._ops.OpOverload) and (torch.Tag.pointwise in aten_op.tags
                                                       or aten_op in _IDENTITY_LIKE):
        return _pointwise_over(node, node.all_input_nodes)
    return False


def _pointwise_over(node: torch.fx.Node, operands: Sequence[Any]) -> bool:
    """A pointwise ``node`` runs per patch when one of its tensor ``operands`` is the image
    and every other is the image too or the same at every pixel (read whole by each patch)."""
    out = spatial_extent(node)
    return any(_image_of(a, out) for a in operands) and all(
        _image_of(a, out) or _constant_over_space(a) for a in operands)


def spatial_inputs(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The arguments of a per-patch op that carry the image (the rest are weights, scalars)."""
    if node.target is operator.getitem:
        return [node.args[0]]
    if node.target in (CONV, BATCH_NORM, MAX_POOL, AVG_POOL, PAD) \
            or int8_conv(node) is not None:
        return [node.args[0]]
    positions = image_positions(node)
    operands = node.all_input_nodes if positions is None else [node.args[i] for i in positions]
    return [a for a in operands if _image_of(a, spatial_extent(node))]


def reduces_space(node: torch.fx.Node) -> bool:
    """A ``mean`` or ``sum`` of a 4-D value over exactly its two spatial dims."""
    if node.target not in (MEAN, SUM) or node.kwargs.get("dtype") is not None \
            or not is_spatial(node.args[0]):
        return False
    dims = node.args[1] if len(node.args) > 1 else None
    return dims is not None and sorted(d % 4 for d in dims) == [2, 3]
