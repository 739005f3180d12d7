"""Which ExecuTorch kernels give eager's values when their ``out`` sits on an input's bytes.

In-place reuse in a ``.pte`` means an out-variant kernel writes its result over an argument that
dies there. Nothing in ExecuTorch promises which kernels tolerate that (its ``addmm`` and ``mm``
give wrong values; its ``constant_pad_nd`` refuses a block that overlaps where it is written),
so tensorplan only does it where it was measured: each entry below was lowered with the overlap
made, run in ExecuTorch's runtime (the pip wheel's portable kernels) on odd sizes, and compared
with eager PyTorch by ``tests/test_executorch_kernels.py``, which runs every entry again on
each test run.

``OVERLAP_SAFE[version][op]`` names the arguments of the out-variant ``op`` (schema name and
overload, e.g. ``"aten::add.out"``) whose bytes ``out`` may take over; an op not listed never
reuses. ``BYTE_COPIES[version]`` lists the ops whose ``out`` is a byte copy of an argument (a
reshape): ``out`` may start on those bytes whatever the shapes. ``CAT_IN_SLICES[version]`` says
whether ``cat.out`` may be given inputs made in the slices of its output that they are copied
to. ``PAD_IN_TAIL[version]`` says whether ``constant_pad_nd.out`` may be given an input that
lies in the last bytes of its output: its kernel writes the output front to back, copying the
input block by block, and refuses (``InvalidArgument``) any block whose source and destination
overlap, so an input placed where every block it copies starts at least one block past where
that block is written is read before it is written over (``links.py`` places it only there;
measured on odd sizes and pads like the tables here). ``BROADCASTING[version][op]`` names the
arguments of the out-variant ``op`` that its kernel broadcasts to the result's shape (over
new leading dims and size-1 dims, the other operands broadcast too): an ``expand`` read only
there may be dropped (``broadcasts.py``); measured by ``tests/test_executorch_broadcasts.py``.
``SLOW_PRODUCTS[version]`` names the matrix-product kernels measured slow against the
runtime's others at the same product (``benchmarks/bench_products.py``: ExecuTorch 1.5.1's
``addmm.out`` runs 128x768x3072 in about 1.4 s, its ``linear.out``, ``mm.out`` and ``bmm.out``
in about 24 ms; its ``convolution.out`` runs a 1x1 convolution of MobileNetV2's shapes in 4-66x
the time of ``mm.out`` on the same product): ``rewrite.py`` moves products off them.
A runtime version not listed gets none of these.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping

# out-variant ops measured with ExecuTorch 1.5.1's portable kernels, by overwritable argument
_PORTABLE_1_5_1: Mapping[str, frozenset[str]] = {
    **{f"aten::{name}.out": frozenset({"self"}) for name in (
        "abs", "ceil", "cos", "exp", "floor", "gelu", "hardtanh", "log", "neg", "reciprocal",
        "relu", "round", "rsqrt", "sigmoid", "sin", "sqrt", "tanh", "clamp", "leaky_relu",
        "elu", "erf", "_softmax", "_log_softmax")},
    "aten::pow.Tensor_Scalar_out": frozenset({"self"}),
    **{f"aten::{name}.out": frozenset({"self", "other"}) for name in (
        "add", "sub", "mul", "div", "maximum", "minimum")},
    "aten::pow.Tensor_Tensor_out": frozenset({"self", "exponent"}),
    "aten::where.self_out": frozenset({"self", "other"}),
    "aten::native_layer_norm.out": frozenset({"input"}),
    "aten::_native_batch_norm_legit_no_training.out": frozenset({"input"}),
}

# out-variant ops whose out is a copy of the argument's bytes in the same order (a reshape), so
# out may start on that argument's bytes whatever its shape; measured like the table above
_BYTE_COPIES_1_5_1: Mapping[str, frozenset[str]] = {
    "aten::view_copy.out": frozenset({"self"}),
    "aten::alias_copy.out": frozenset({"self"}),
}

# out-variant ops whose kernels broadcast the named arguments (every tensor argument of each):
# each was given that argument unexpanded, in every position, from rank 2 under a rank-4
# result, with size-1 middle dims, a size-1 last dim, and beside another broadcast operand.
# Not here: masked_fill and floor_divide, which to_edge decomposes (into where and div)
_BROADCASTING_1_5_1: Mapping[str, frozenset[str]] = {
    **{f"aten::{name}.out": frozenset({"self", "other"}) for name in (
        "add", "sub", "mul", "div", "maximum", "minimum", "logical_and", "logical_or",
        "logical_xor", "atan2")},
    "aten::div.out_mode": frozenset({"self", "other"}),
    **{f"aten::{name}.Tensor_out": frozenset({"self", "other"}) for name in (
        "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor",
        "fmod", "remainder")},
    "aten::pow.Tensor_Tensor_out": frozenset({"self", "exponent"}),
    "aten::where.self_out": frozenset({"condition", "self", "other"}),
}

# product kernels measured at a small fraction of the runtime's fastest product kernel
_SLOW_PRODUCTS_1_5_1 = frozenset({"aten::addmm.out", "aten::convolution.out"})

OVERLAP_SAFE: Mapping[str, Mapping[str, frozenset[str]]] = {"1.5.1": _PORTABLE_1_5_1}
BYTE_COPIES: Mapping[str, Mapping[str, frozenset[str]]] = {"1.5.1": _BYTE_COPIES_1_5_1}
CAT_IN_SLICES: Mapping[str, bool] = {"1.5.1": True}
PAD_IN_TAIL: Mapping[str, bool] = {"1.5.1": True}
BROADCASTING: Mapping[str, Mapping[str, frozenset[str]]] = {"1.5.1": _BROADCASTING_1_5_1}
SLOW_PRODUCTS: Mapping[str, frozenset[str]] = {"1.5.1": _SLOW_PRODUCTS_1_5_1}


def installed_version() -> str:
    """The installed ``executorch`` package's version, e.g. ``"1.5.1"``."""
    return importlib.metadata.version("executorch")


def overlap_safe(version: str | None = None) -> Mapping[str, frozenset[str]]:
    """The measured table for ``version`` (default: the installed runtime); empty if unmeasured."""
    return OVERLAP_SAFE.get(installed_version() if version is None else version, {})


def byte_copies(version: str | None = None) -> Mapping[str, frozenset[str]]:
    """The measured byte-copy ops for ``version`` (default: installed); empty if unmeasured."""
    return BYTE_COPIES.get(installed_version() if version is None else version, {})


def cat_in_slices(version: str | None = None) -> bool:
    """Whether ``cat.out`` was measured to allow inputs made in its output's slices."""
    return CAT_IN_SLICES.get(installed_version() if version is None else version, False)


def pad_in_tail(version: str | None = None) -> bool:
    """Whether ``constant_pad_nd.out`` was measured to allow its input in its output's tail."""
    return PAD_IN_TAIL.get(installed_version() if version is None else version, False)


def broadcasting(version: str | None = None) -> Mapping[str, frozenset[str]]:
    """The measured broadcasting kernels for ``version`` (default: installed); empty if
    unmeasured."""
    return BROADCASTING.get(installed_version() if version is None else version, {})


def slow_products(version: str | None = None) -> frozenset[str]:
    """The product kernels measured slow for ``version`` (default: installed); empty if
    unmeasured."""
    return SLOW_PRODUCTS.get(installed_version() if version is None else version, frozenset())
