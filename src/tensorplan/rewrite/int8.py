"""The int8 kernels of ExecuTorch's Cortex-M backend as the patch rewrite reads them.

A Cortex-M program (``to_edge`` with ``cortex_m_edge_compile_config``, then
``CortexMPassManager``) runs its layers as ``cortex_m::`` kernels on int8 channels-last
tensors. No schema says which argument is a kernel's stride or which input is the image
(DESIGN rule 5), so each kernel the rewrite can run patch by patch is named here by its schema
name, with the positions of its arguments as ``backends/cortex_m/ops/operators.yaml`` declares
them:

- ``quantized_conv2d(input, weight, bias, stride, padding, dilation, input_offset, ...)``: the
  weight is ``[out, kh, kw, in]``; a padded input element reads as the input's zero point
  (``-input_offset``), as CMSIS-NN pads;
- ``quantized_depthwise_conv2d(input, weight, bias, stride, padding, dilation,
  depth_multiplier, input_offset, ...)``: the weight is ``[1, kh, kw, out]``, one window per
  output channel;
- ``quantized_add(self, ..., other, ...)``: pointwise on its images, arguments 0 and 4;
- ``quantized_mul(self, ..., other, ...)`` (arguments 0 and 2), ``minimum(self, other)`` (0
  and 1), ``quantized_activation(input, lut)`` (0, a sigmoid's table): pointwise, as their
  reference implementations compute them (broadcasting, element by element). One of the two
  may be the same at every pixel (hardswish's ``minimum`` with a 0-d constant, a
  squeeze-excitation gate of shape ``[1, C, 1, 1]``): every patch reads it whole;
- ``quantize_per_tensor(input, ...)`` of the float input image: pointwise on argument 0. The
  patch rewrite tries it both ways: run once, whole, before the patches, which are cut from
  its int8 result (the float image dies there: best when it is in the arena), and run per
  patch on the float image's patches (no whole int8 copy: best when the image is outside).

A kernel's scratch buffer (its schema's ``scratch`` argument, an ``alloc`` whose size CMSIS-NN
computes from the channels and the kernel's size, not the image's) is made anew for each patch's
call, so it lives only while that call runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch.fx


@dataclass(frozen=True)
class Int8Conv:
    """Where a Cortex-M convolution's window is in its arguments."""

    stride: int        # argument positions
    padding: int
    dilation: int
    input_offset: int  # minus the input's zero point: the value of a padded input element
    depthwise: bool    # one window per output channel (weight [1, kh, kw, out])


_CONVS = {
    "cortex_m::quantized_conv2d": Int8Conv(3, 4, 5, 6, depthwise=False),
    "cortex_m::quantized_depthwise_conv2d": Int8Conv(3, 4, 5, 7, depthwise=True),
}
_QUANTIZE = "cortex_m::quantize_per_tensor"
_POINTWISE = {  # the positions of the arguments that carry the image (or the same at each pixel)
    "cortex_m::quantized_add": (0, 4),
    "cortex_m::quantized_mul": (0, 2),
    "cortex_m::minimum": (0, 1),
    "cortex_m::quantized_activation": (0,),
    _QUANTIZE: (0,),
}


def schema_name(target: Any) -> str | None:
    """The qualified schema name of an operator (an ATen or an ExecuTorch edge overload)."""
    schema = getattr(target, "_schema", None)
    return getattr(schema, "name", None)


def quantizes(node: torch.fx.Node) -> bool:
    """A Cortex-M ``quantize_per_tensor`` node (float to int8)."""
    return node.op == "call_function" and schema_name(node.target) == _QUANTIZE


def int8_conv(node: torch.fx.Node) -> Int8Conv | None:
    """The window positions of a Cortex-M convolution node, or None for any other node."""
    return _CONVS.get(schema_name(node.target)) if node.op == "call_function" else None


def image_positions(node: torch.fx.Node) -> tuple[int, ...] | None:
    """The positions of the image arguments of a Cortex-M kernel the rewrite runs patch by
    patch (a convolution's input, a pointwise kernel's images), or None."""
    if int8_conv(node) is not None:
        return (0,)
    return _POINTWISE.get(schema_name(node.target)) if node.op == "call_function" else None


def kernel_size(node: torch.fx.Node) -> tuple[int, int]:
    """A Cortex-M convolution's kernel rows and columns, from its channels-last weight."""
    weight = node.args[1].meta["val"]
    return int(weight.shape[1]), int(weight.shape[2])


def padding_value(node: torch.fx.Node, conv: Int8Conv) -> float:
    """The int8 value a padded input element reads as: the input's zero point."""
    return float(-node.args[conv.input_offset])


def macs_per_output(node: torch.fx.Node, conv: Int8Conv) -> int:
    """Multiply-adds of one output element: the window, times the input channels unless the
    convolution is depthwise."""
    window = math.prod(kernel_size(node))
    return window if conv.depthwise else window * int(node.args[1].meta["val"].shape[3])


def unpadded(args: list[Any], conv: Int8Conv) -> tuple[Any, ...]:
    """A convolution's arguments with no padding of its own (its input padded already)."""
    args = list(args)
    args[conv.padding] = [0, 0]
    return tuple(args)
