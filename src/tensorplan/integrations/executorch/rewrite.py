"""A program rewrite before ExecuTorch's lowering: every matrix product on a fast kernel.

``to_edge`` decomposes ``nn.Linear`` into ``permute_copy(weight, [1, 0])`` and ``mm`` /
``addmm``, and GPT-2's ``Conv1D`` into ``addmm(b, x, w)`` with no transpose at all. In the
emitted program a transpose is a real copy made at every call (a buffer of the weight's size in
the arena: a tied embedding's transpose before a language-model head is the largest buffer of
the model), and ExecuTorch 1.5.1's ``addmm.out`` is a naive loop measured about 60 times slower
than its ``linear.out``, ``mm.out`` and ``bmm.out`` (``kernels.SLOW_PRODUCTS``,
``benchmarks/bench_products.py``). :func:`fast_products` rewrites, on ``mm(x, W)`` and
``addmm(b, x, W)`` (``beta`` and ``alpha`` 1) of floating-point values:

1. ``W = permute_copy(w, [1, 0])`` of a 2-D ``w``: ``linear(x, w, b)``, however many products
   read that transpose (a chunked program's chunks share one); the transpose is dropped once
   nothing else reads it;
2. ``W`` a 2-D constant (a parameter, a buffer never written, a lifted constant) read only as
   the ``W`` of products, one of them on a kernel measured slow: the constant is stored
   transposed, once, in place of the original (the constants grow by nothing), and every one
   of those products becomes ``linear``;
3. an ``addmm`` still on a slow kernel: ``mm(x, W)`` then ``add(·, b)``, which writes over the
   product where in-place reuse is on (``add.out`` is measured overlap-safe);
4. a pointwise convolution (a 1x1 kernel, stride 1, no padding, one group) of one contiguous
   image with a constant weight read by nothing else, its result read by no ``cat``, where
   ``convolution.out`` is measured slow (ExecuTorch 1.5.1's is a naive loop, 4-66x its
   ``mm.out`` at MobileNetV2's shapes):
   ``mm(W, x)`` of the weight stored as ``[C_out, C_in]`` (in place of the original) and the
   image viewed as ``[C_in, H * W]``, viewed back as the ``[1, C_out, H, W]`` image it is (the
   views are ExecuTorch's memory views: no copy), a bias stored as ``[C_out, 1, 1]`` and added.

A ``linear`` takes a 1-D bias; any other bias is added after it. Worked example: GPT-2's
``addmm(b, x, w)`` with ``w`` of shape (768, 3072) becomes ``linear(x, w', b)`` with the
constant ``w'`` = ``w.T`` of shape (3072, 768). The values are the same products;
``tests/test_executorch_products.py`` compares rewritten programs with eager PyTorch in
ExecuTorch's runtime.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from tensorplan.integrations.executorch.fold import fold_table
from tensorplan.integrations.executorch.kernels import slow_products
from tensorplan.integrations.executorch.vocabulary import traced_value

# an edge product op -> the out-variant kernel it runs on
_KERNELS: Mapping[str, str] = {"aten.mm.default": "aten::mm.out",
                               "aten.addmm.default": "aten::addmm.out"}
_CONVOLUTION, _CONVOLUTION_KERNEL = "aten.convolution.default", "aten::convolution.out"
_CAT = "aten.cat.default"


@dataclass(frozen=True)
class ProductRewrites:
    """What :func:`fast_products` changed in one program."""

    linears: int  # products of a transposed copy made ``linear`` (rule 1)
    stored_transposed: int  # constant weights stored transposed, their products ``linear`` (2)
    split: int  # ``addmm`` made ``mm`` + ``add`` (rule 3)
    pointwise: int = 0  # 1x1 convolutions made ``mm`` (rule 4)

    def __add__(self, other: ProductRewrites) -> ProductRewrites:
        return ProductRewrites(self.linears + other.linears,
                               self.stored_transposed + other.stored_transposed,
                               self.split + other.split, self.pointwise + other.pointwise)


NONE = ProductRewrites(0, 0, 0)


@dataclass(frozen=True)
class _Product:
    """An ``mm(x, right)`` or ``addmm(bias, x, right)``."""

    node: torch.fx.Node
    x: Any
    right: Any
    bias: Any  # None for ``mm``


def _name(node: Any) -> str:
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return ""
    return getattr(node.target, "__name__", "")


def _product(node: torch.fx.Node) -> _Product | None:
    """The product ``node`` is, when it is one of floating-point values with unit scales."""
    name, value = _name(node), traced_value(node)
    if name not in _KERNELS or not isinstance(value, torch.Tensor) \
            or not value.dtype.is_floating_point:
        return None
    if set(node.kwargs) - {"beta", "alpha"} or any(v != 1 for v in node.kwargs.values()):
        return None
    if name == "aten.mm.default" and len(node.args) == 2:
        return _Product(node, node.args[0], node.args[1], None)
    if name == "aten.addmm.default" and len(node.args) == 3:
        bias, x, right = node.args
        return _Product(node, x, right, bias)
    return None


def _transpose_source(node: Any) -> torch.fx.Node | None:
    """``w`` when ``node`` is ``permute_copy(w, [1, 0])`` of a 2-D ``w``."""
    if _name(node) != "aten.permute_copy.default" or list(node.args[1]) != [1, 0]:
        return None
    value = traced_value(node.args[0])
    return node.args[0] if isinstance(value, torch.Tensor) and value.dim() == 2 else None


def _stored_transposed(exported_program: Any, products: Iterable[_Product],
                       slow: frozenset[str], folded: dict[torch.fx.Node, torch.Tensor]
                       ) -> dict[torch.fx.Node, torch.fx.Node]:
    """Rule 2: each constant to store transposed -> a ``permute_copy`` of it inserted before
    its first reader, folded into a new constant (``fold.fold_table``) once the products read
    it; the table's values are in ``folded`` (the constant's and its transpose's)."""
    from executorch.exir.passes.constant_prop_pass import get_constant_placeholder_dict

    from tensorplan.integrations.executorch.private import exir_ops

    constants = get_constant_placeholder_dict(exported_program)
    readers: dict[torch.fx.Node, list[_Product]] = {}
    for product in products:
        if product.right in constants:
            readers.setdefault(product.right, []).append(product)
    inserted: dict[torch.fx.Node, torch.fx.Node] = {}
    for constant, reading in readers.items():
        value = constants[constant]
        if value.dim() != 2 or len(constant.users) != len(reading) \
                or any(constant in (p.x, p.bias) for p in reading) \
                or not any(_KERNELS[_name(p.node)] in slow for p in reading):
            continue
        with exported_program.graph.inserting_before(reading[0].node):
            transpose = _made(exported_program.graph, constant,
                              exir_ops.edge.aten.permute_copy.default, (constant, [1, 0]),
                              traced_value(constant).t())
        inserted[constant] = transpose
        folded[constant] = value
        folded[transpose] = value.detach().t().contiguous()
    return inserted


def _replace(graph: torch.fx.Graph, product: _Product, core: Any, arguments: tuple) -> None:
    """``product`` replaced by ``core(*arguments)``, plus its bias when ``core`` took none."""
    from tensorplan.integrations.executorch.private import exir_ops

    with graph.inserting_before(product.node):
        made = graph.call_function(core, arguments)
        made.meta.update(product.node.meta)
        if product.bias is not None and len(arguments) == 2:
            added = graph.call_function(exir_ops.edge.aten.add.Tensor, (made, product.bias))
            added.meta.update(product.node.meta)
            made = added
    product.node.replace_all_uses_with(made)
    graph.erase_node(product.node)


def _linear_arguments(product: _Product, weight: torch.fx.Node) -> tuple:
    """``linear``'s arguments: the bias among them when it is 1-D (else added after)."""
    bias = traced_value(product.bias)
    if isinstance(bias, torch.Tensor) and bias.dim() == 1:
        return product.x, weight, product.bias
    return product.x, weight


def fast_products(exported_program: Any, slow: frozenset[str] | None = None) -> ProductRewrites:
    """Rewrite the edge program in place (see the module docstring), the bodies of its loops
    included (rules 1 and 3: a body's constants are its parent's inputs); ``slow``: the
    product kernels to move off (default: those measured slow on the installed runtime,
    ``kernels.slow_products``)."""
    slow = slow_products() if slow is None else slow
    graph = exported_program.graph
    folded: dict[torch.fx.Node, torch.Tensor] = {}
    pointwise = _pointwise_convolutions(exported_program, slow, folded)
    products = [p for p in map(_product, list(graph.nodes)) if p is not None]
    stored = _stored_transposed(exported_program, products, slow, folded)
    linears, split = _rewritten(graph, products, stored, slow)
    for name, body in exported_program.graph_module.named_modules():
        if name and isinstance(body, torch.fx.GraphModule):
            made = _rewritten(body.graph, [p for p in map(_product, list(body.graph.nodes))
                                           if p is not None], {}, slow)
            if any(made):
                body.graph.eliminate_dead_code()
                body.recompile()
            linears, split = linears + made[0], split + made[1]
    if folded:
        fold_table(exported_program, folded)
    elif linears or split:
        graph.eliminate_dead_code()
        exported_program.graph_module.recompile()
    return ProductRewrites(linears, len(stored), split, pointwise)


def _is_pointwise(node: torch.fx.Node, constants: Mapping[torch.fx.Node, torch.Tensor]) -> bool:
    """Whether ``node`` is rule 4's convolution: 1x1, stride 1, no padding, no dilation, not
    transposed, one group, of one static contiguous floating-point image, its weight (and
    bias) constants it alone reads, its result read by no ``cat`` (which makes an input in its
    slice of the output, ``links.py``: a view between them would keep the two apart, as it
    did on MixNet's mixed blocks, 491,520 -> 786,432 B)."""
    if _name(node) != _CONVOLUTION or len(node.args) != 9:
        return False
    image, weight, bias, stride, padding, dilation, transposed, _, groups = node.args
    value, kernel = traced_value(image), constants.get(weight)
    return (isinstance(value, torch.Tensor) and value.dtype.is_floating_point
            and value.dim() == 4 and all(isinstance(size, int) for size in value.shape)
            and value.shape[0] == 1  # (a symbolic size compared here would add a guard)
            and value.is_contiguous() and isinstance(kernel, torch.Tensor)
            and tuple(kernel.shape[2:]) == (1, 1) and len(weight.users) == 1
            and (bias is None or (bias in constants and len(bias.users) == 1))
            and set(stride) == {1} and set(padding) == {0} and set(dilation) == {1}
            and not transposed and groups == 1
            and all(_name(user) != _CAT for user in node.users))


def _made(graph: torch.fx.Graph, like: torch.fx.Node, target: Any, arguments: tuple,
          value: torch.Tensor) -> torch.fx.Node:
    """A new node ``target(*arguments)`` with ``like``'s meta and the traced ``value``."""
    new = graph.call_function(target, arguments)
    new.meta.update(like.meta)
    new.meta["val"] = value
    return new


def _pointwise_convolutions(exported_program: Any, slow: frozenset[str],
                            folded: dict[torch.fx.Node, torch.Tensor]) -> int:
    """Rule 4 on the top-level graph: each convolution made ``mm``; the reshaped constants'
    values in ``folded`` (for ``fold.fold_table``, as rule 2's). Returns how many."""
    if _CONVOLUTION_KERNEL not in slow:
        return 0
    from executorch.exir.passes.constant_prop_pass import get_constant_placeholder_dict

    from tensorplan.integrations.executorch.private import exir_ops

    constants = get_constant_placeholder_dict(exported_program)
    graph, view = exported_program.graph, exir_ops.edge.aten.view_copy.default
    found = [n for n in graph.nodes if _is_pointwise(n, constants)]
    for node in found:
        image, weight, bias = node.args[:3]
        _, channels, height, width = traced_value(image).shape
        kernel = constants[weight]
        made = functools.partial(_made, graph, node)
        with graph.inserting_before(node):
            matrix = made(view, (weight, list(kernel.shape[:2])),
                          traced_value(weight).view(kernel.shape[:2]))
            folded[weight], folded[matrix] = kernel, kernel.detach().flatten(1).clone()
            rows = made(view, (image, [channels, height * width]),
                        traced_value(image).view(channels, height * width))
            product = made(exir_ops.edge.aten.mm.default, (matrix, rows),
                           torch.mm(traced_value(matrix), traced_value(rows)))
            result = made(view, (product, list(traced_value(node).shape)), traced_value(node))
            if bias is not None:
                column = made(view, (bias, [kernel.shape[0], 1, 1]),
                              traced_value(bias).view(kernel.shape[0], 1, 1))
                folded[bias], folded[column] = constants[bias], \
                    constants[bias].detach().view(-1, 1, 1).clone()
                result = made(exir_ops.edge.aten.add.Tensor, (result, column), traced_value(node))
        node.replace_all_uses_with(result)
        graph.erase_node(node)
    return len(found)


def _rewritten(graph: torch.fx.Graph, products: list[_Product],
               stored: Mapping[torch.fx.Node, torch.fx.Node], slow: frozenset[str]
               ) -> tuple[int, int]:
    """Rules 1 to 3 on one graph's ``products``: the products made ``linear`` of a transposed
    copy, and the ``addmm`` split into ``mm`` and ``add``."""
    from tensorplan.integrations.executorch.private import exir_ops

    linears = split = 0
    for node in [p.node for p in products]:
        product = _product(node)  # read now: an earlier rewrite may have replaced an argument
        assert product is not None
        weight = _transpose_source(product.right) or stored.get(product.right)
        if weight is not None:
            _replace(graph, product, exir_ops.edge.aten.linear.default,
                     _linear_arguments(product, weight))
            linears += product.right not in stored
        elif product.bias is not None and _KERNELS[_name(product.node)] in slow:
            _replace(graph, product, exir_ops.edge.aten.mm.default, (product.x, product.right))
            split += 1
    return linears, split
