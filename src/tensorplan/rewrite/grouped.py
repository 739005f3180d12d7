"""Grouped-query attention's repeated key and value heads, read without the repeat (a rewrite).

A model with fewer key/value heads than query heads (grouped-query attention: Llama 3, Qwen,
Gemma, SmolLM2) repeats each KV head for its group of ``r`` query heads before the two products
of attention (transformers' ``repeat_kv``: ``unsqueeze``, ``expand``, ``clone``, ``view``): a
copy ``r`` times the size of the keys (in a decode step, ``r`` times a layer's whole cache),
and one of the values. Query head ``g * r + j`` reads KV head ``g``, so the ``r`` query heads of
a group can share one product: the queries ``[B * h, T, D]`` viewed ``[B * kv, r * T, D]``
times the keys ``[B * kv, D, S]`` are the scores viewed ``[B * kv, r * T, S]``, the same dot
products over the same inputs. :func:`grouped_products` makes each such product that way: the
ops between the repeat and the product (a transpose, a scale, a view merging batch and heads)
run on the KV heads, ``1 / r`` of their bytes and arithmetic, and the repeat is never made.
Queries whose heads lie apart in memory (a prefill's ``[B, T, h, D]`` transposed) are copied
to ``[B * h, T, D]`` first: a copy of the queries for one of the keys, ``r`` times larger.

The chunks run first (a chunk of query rows is no slice of ``r * T`` rows); a loop's body
makes its products this way itself (``chunk_emit.py`` with :class:`HeadsOnce` and
:func:`grouped_product`), passed the KV heads.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.fx.experimental.symbolic_shapes import statically_known_true

from tensorplan.rewrite.rebuild import Rebuild, only_reader, value_shape

aten = torch.ops.aten
_VIEWS = (aten.view.default, aten._unsafe_view.default)
_SCALES = (aten.mul.Scalar, aten.div.Scalar, aten.mul.Tensor, aten.div.Tensor)


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Whether two shapes are equal for every size of the dims (no guard added)."""
    return len(a) == len(b) and all(statically_known_true(x == y)
                                    for x, y in zip(a, b, strict=True))


def _call(node: Any, *targets: Any) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" \
        and node.target in targets


@dataclass(frozen=True)
class _Repeat:
    """``source``'s heads (dim 1) each repeated ``group`` times, made by ``made``."""

    source: torch.fx.Node
    group: int
    made: tuple[torch.fx.Node, ...]  # unsqueeze, expand, clone, view: left out


@dataclass(frozen=True)
class Grouped:
    """A product whose second operand is a repeat followed by ``steps``."""

    repeat: _Repeat
    steps: tuple[tuple[torch.fx.Node, int], ...]  # each op and the heads' dim in its output
    product: torch.fx.Node


def _repeat(view: torch.fx.Node) -> _Repeat | None:
    """The repeat ``view`` ends (``view(clone(expand(unsqueeze(x, 2))))`` of ``x``'s heads,
    each read by the next alone), or None."""
    clone = view.args[0]
    if not _call(view, *_VIEWS) or not _call(clone, aten.clone.default) \
            or only_reader(clone) is not view:
        return None
    expand = clone.args[0]
    if not _call(expand, aten.expand.default) or only_reader(expand) is not clone:
        return None
    unsqueeze = expand.args[0]
    if not _call(unsqueeze, aten.unsqueeze.default) or only_reader(unsqueeze) is not expand:
        return None
    source, kept = unsqueeze.args[0], value_shape(unsqueeze.args[0])
    grown, out = value_shape(expand), value_shape(view)
    if len(kept) < 3 or unsqueeze.args[1] % (len(kept) + 1) != 2 \
            or not isinstance(grown[2], int) or grown[2] < 2:
        return None
    group = grown[2]
    if not _same(grown, (*kept[:2], group, *kept[2:])) \
            or not _same(out, (kept[0], kept[1] * group, *kept[2:])):
        return None
    return _Repeat(source, group, (unsqueeze, expand, clone, view))


def _heads_dim(node: torch.fx.Node, before: tuple, heads: int) -> int | None:
    """The heads' dim in ``node``'s output when ``node`` keeps the repeat's grouping (its one
    tensor input has the heads at dim ``heads``), or None."""
    after = value_shape(node)
    if _call(node, aten.permute.default):
        dims = [d % len(before) for d in node.args[1]]
        return heads if dims[:heads + 1] == list(range(heads + 1)) else None
    if _call(node, aten.expand.default, aten.clone.default):
        return heads if _same(after, before) else None
    if _call(node, *_SCALES):  # by a number: the same at every head
        return heads if not isinstance(node.args[1], torch.fx.Node) else None
    if _call(node, *_VIEWS):
        if _same(after[:heads + 1], before[:heads + 1]):
            return heads
        merged = (before[0] * before[1], *before[2:])
        return 0 if heads == 1 and _same(after, merged) else None
    return None


def _grouped(view: torch.fx.Node) -> Grouped | None:
    """The product read, through ops that keep the grouping, by the repeat ``view`` ends, as its
    second operand with the heads merged into its batch dim; or None."""
    repeat = _repeat(view)
    if repeat is None:
        return None
    steps: list[tuple[torch.fx.Node, int]] = []
    node, heads = view, 1
    while (reader := only_reader(node)) is not None and reader.args[0] is node:
        if _call(reader, aten.bmm.default):
            return None
        heads_next = _heads_dim(reader, value_shape(node), heads)
        if heads_next is None:
            return None
        steps.append((reader, heads_next))
        node, heads = reader, heads_next
    product = only_reader(node)
    if product is None or not _call(product, aten.bmm.default) or heads != 0 \
            or product.args[1] is not node or product.args[0] is node:
        return None
    return Grouped(repeat, tuple(steps), product)


def found_groups(program: ExportedProgram) -> dict[str, Grouped]:
    """Every grouped product of the top-level graph, by the name of the repeat's view."""
    found = {}
    for node in program.graph.nodes:
        if _call(node, *_VIEWS):
            grouped = _grouped(node)
            if grouped is not None:
                found[node.name] = grouped
    return found


class HeadsOnce:
    """The chains of ``found`` emitted on the KV heads while ``build`` copies a program node by
    node: the repeat left out, each op after it on the KV heads (the last one's value also under
    its own name, for a loop that reads it whole), each product grouped."""

    def __init__(self, build: Rebuild, found: Mapping[str, Grouped]) -> None:
        self.build, self.found = build, found
        self._by_step = {step.name: grouped for grouped in found.values()
                         for step, _ in (*grouped.steps, (grouped.product, 0))}
        self._left_out = {n.name for grouped in found.values() for n in grouped.repeat.made[:-1]}
        self._made: dict[str, torch.fx.Node] = {}  # a chain node's name -> its KV-heads value

    def emitted(self, node: torch.fx.Node) -> bool:
        """Whether ``node`` belongs to a chain: emitted here (or left out), not to be copied."""
        build, grouped = self.build, self._by_step.get(node.name)
        if node.name in self._left_out:
            return True
        if node.name in self.found:
            self._made[node.name] = _source(build, self.found[node.name].repeat, node)
        elif grouped is not None and node is grouped.product:
            build.env[node.name] = grouped_product(
                build, (build.env[node.args[0].name], self._made[node.args[1].name]),
                grouped.repeat.group, like=node)
        elif grouped is not None:
            self._made[node.name] = _step(build, grouped, node, self._made)
            if node is grouped.steps[-1][0]:
                build.env[node.name] = self._made[node.name]
        else:
            return False
        return True


def grouped_products(program: ExportedProgram) -> ExportedProgram:
    """``program`` with each batched product (``bmm``) that reads a tensor's heads repeated
    (grouped-query attention's keys or values) made as one product per KV head over its group of
    query heads, the repeat never made and the ops between it and the product run on the KV
    heads. Every other node is copied as it is; the product's value keeps its name, shape and
    values. ``program`` itself when there is none. Pure."""
    found = found_groups(program)
    if not found:
        return program
    build = Rebuild(program)
    heads = HeadsOnce(build, found)
    for node in program.graph.nodes:
        if not heads.emitted(node):
            build.copy(node)
    return build.program()


def _source(build: Rebuild, repeat: _Repeat, view: torch.fx.Node) -> torch.fx.Node:
    """The KV heads as the repeat's copy laid them out: contiguous (a copy only when not)."""
    source = build.env[repeat.source.name]
    if statically_known_true(repeat.source.meta["val"].is_contiguous()):
        return source
    return build.emit(aten.clone.default, (source,), {"memory_format": torch.contiguous_format},
                      like=view, name=f"{view.name}_heads")


def _size_of(build: Rebuild, node: torch.fx.Node, dim: int) -> int | torch.fx.Node:
    """The size of ``node``'s value along ``dim``: an int, or read off the value itself (in a
    loop's body too, where the program's dims are no sizes of its inputs)."""
    size = node.meta["val"].shape[dim]
    if isinstance(size, int):
        return size
    return build.emit(aten.sym_size.int, (node, dim), like=node, name=f"{node.name}_size{dim}")


def _step(build: Rebuild, grouped: Grouped, node: torch.fx.Node,
          made: dict[str, torch.fx.Node]) -> torch.fx.Node:
    """``node``'s op on the KV heads (a view's heads dim divided by the group)."""
    value = made[node.args[0].name]
    if _call(node, aten.expand.default):
        return value
    heads = dict(grouped.steps)[node]
    args = (value, *torch.fx.node.map_arg(node.args[1:], lambda n: build.env[n.name]))
    if _call(node, *_VIEWS):
        sizes = list(args[1])
        group = grouped.repeat.group
        sizes[heads] = sizes[heads] if sizes[heads] == -1 else (
            sizes[heads] // group if isinstance(sizes[heads], int)
            else build.arith(operator.floordiv, sizes[heads], group))
        args = (value, sizes)
    return build.emit(node.target, args, node.kwargs, like=node, name=f"{node.name}_heads")


def grouped_product(build: Rebuild, operands: tuple[torch.fx.Node, torch.fx.Node], group: int,
                    *, like: torch.fx.Node) -> torch.fx.Node:
    """``bmm(queries, kv)`` of queries ``[B * h, T, D]`` and KV heads ``[B * h / group, D, S]``
    (new nodes of ``build``), each KV head read by its ``group`` query heads: the queries viewed
    ``[B * h / group, group * T, D]`` (copied first when their heads lie apart), one product,
    viewed back ``[B * h, T, S]`` under ``like``'s name."""
    queries, kv = operands
    batch, rows, depth, keys = (*(_size_of(build, queries, d) for d in range(3)),
                                _size_of(build, kv, 2))  # read before the queries may die
    laid = queries.meta["val"]
    if not (statically_known_true(laid.shape[1] == 1)  # the heads apart in memory
            or statically_known_true(laid.stride(0) == laid.shape[1] * laid.stride(1))):
        queries = build.emit(aten.clone.default, (queries,),
                             {"memory_format": torch.contiguous_format}, like=like,
                             name=f"{like.name}_rows")
    queries = build.emit(aten.view.default,
                         (queries, [_size_of(build, kv, 0), build.arith(operator.mul, rows, group),
                                    depth]),
                         like=like, name=f"{like.name}_queries")
    shared = build.emit(aten.bmm.default, (queries, kv), like=like, name=f"{like.name}_grouped")
    return build.emit(aten.view.default, (shared, [batch, rows, keys]), like=like,
                      name=like.name)
