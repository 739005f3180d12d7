"""A product whose output columns are read apart, made as one product per part (a rewrite
before the chunks).

GPT-2's attention makes its queries, keys and values as one product, ``x @ W`` with ``W`` of
``3 H`` columns, split by columns afterwards. A chunk of the attention reads the queries by
rows and the keys and values whole, so the one product is read whole and the region of rows
starts after it: the queries' ``S x H`` is made whole with the rest. :func:`split_products`
makes each part its own product, ``x @ W[:, part]`` (a view of the weight's columns, and of
the bias's), so the queries are made chunk by chunk and only the keys and values whole. Each
output element is the same dot product over the same inputs: the multiply-adds are unchanged
and the parts equal the split of the whole.
"""

from __future__ import annotations

import operator

import torch
import torch.fx
from torch.export import ExportedProgram

from tensorplan.rewrite.rebuild import Rebuild, only_reader, value_shape

aten = torch.ops.aten
_PRODUCTS = (aten.mm.default, aten.addmm.default)


def _split_of(product: torch.fx.Node) -> tuple[torch.fx.Node | None, torch.fx.Node] | None:
    """The view (or None) and the ``split_with_sizes`` along the columns that are the only
    readers after ``product`` and whose parts are read by ``getitem`` alone, or None."""
    reader = only_reader(product)
    view = reader if reader is not None and reader.target is aten.view.default else None
    split = only_reader(view) if view is not None else reader
    if split is None or split.target is not aten.split_with_sizes.default:
        return None
    rank = len(value_shape(split.args[0]))
    dim = split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
    if dim % rank != rank - 1 or (view is not None
                                  and value_shape(view)[-1] != value_shape(product)[-1]):
        return None
    if not all(user.target is operator.getitem for user in split.users):
        return None
    return view, split


def _fused(program: ExportedProgram) -> dict[str, tuple[torch.fx.Node | None, torch.fx.Node]]:
    """Every 2-D product (``mm``, ``addmm``) whose columns are split into parts."""
    found = {}
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target in _PRODUCTS and len(value_shape(node)) == 2:
            split = _split_of(node)
            if split is not None:
                found[node.name] = split
    return found


def split_products(program: ExportedProgram) -> ExportedProgram:
    """``program`` with each product whose output columns are split into parts
    (``split_with_sizes`` along its last dim, after a view or not) made as one product per
    part over a view of the weight's columns (and the bias's); each part's value keeps its
    ``getitem``'s name. ``program`` itself when there is none. Pure."""
    fused = _fused(program)
    if not fused:
        return program
    skipped = {n.name for view, split in fused.values()
               for n in (view, split, *split.users) if n is not None}
    build = Rebuild(program)
    for node in program.graph.nodes:
        if node.name in fused:
            _emit_parts(build, node, *fused[node.name])
        elif node.name not in skipped:
            build.copy(node)
    return build.program()


def _emit_parts(build: Rebuild, product: torch.fx.Node, view: torch.fx.Node | None,
                split: torch.fx.Node) -> None:
    """One product per part of ``split``, each read under its ``getitem``'s name."""
    columns = value_shape(product)[-1]
    bias = product.args[0] if product.target is aten.addmm.default else None
    env = build.env
    start = 0
    for item in sorted(split.users, key=lambda user: user.args[1]):
        size = split.args[1][item.args[1]]
        stop = start + size
        part = f"{product.name}_part{item.args[1]}"
        weight = build.emit(aten.slice.Tensor, (env[product.args[-1].name], 1, start, stop),
                            like=product, name=f"{part}_weight")
        operands = (env[product.args[-2].name], weight)
        if bias is not None:
            sliced = bool(value_shape(bias)) and value_shape(bias)[-1] == columns
            operands = (build.emit(aten.slice.Tensor, (env[bias.name], len(value_shape(bias)) - 1,
                                                       start, stop),
                                   like=product, name=f"{part}_bias")
                        if sliced else env[bias.name], *operands)
        made = build.emit(product.target, operands, like=product,
                          name=part if view is not None else item.name)
        if view is not None:
            sizes = torch.fx.node.map_arg(view.args[1], lambda n: env[n.name])
            made = build.emit(aten.view.default, (made, [*sizes[:-1], size]), like=view,
                              name=item.name)
        env[item.name] = made
        start = stop
