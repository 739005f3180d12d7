"""A region run as a loop: chunks of rows over rows of any size, the body planned once.

Unrolled, a region would need the chunks' bounds at every size of the dims (the rows a
multiple of the count, which a plain ``Dim``, a prompt of any length in a range, is not), and
a thousand-node program unrolled sixteen times is sixteen thousand nodes to plan and ship.
Here the region becomes one ``scan`` with no carry (ExecuTorch's emitter turns it into a loop
of jump instructions): its body is the region on one chunk, planned once (at its most rows)
and run as many times as the rows need. Over ``S`` rows of a plain ``Dim`` (any size up to
``S_max``), a region of ``n`` chunks at the bound runs ``ceil(S / c)`` chunks of ``c = ceil(S /
n)`` rows: at most ``n`` chunks of at most ``ceil(S_max / n)`` rows, and a decode step's one row
is one chunk of one row (a fixed chunk of ``S_max / n`` rows, 32 for 1,024 in 32 chunks, would
be 31 rows of padding: 32 times the arithmetic). Static rows, and rows that ``n`` divides at
every size (``64 * blocks`` in chunks of 16), are chunks of a fixed size, padded nowhere. The
loop's stacked result may be written over a row input that dies there (``schedule/reuse.py``):
the residual stream of a layer, chunk by chunk.

Each value the region reads by rows is laid out as ``[chunks, ..., rows, ...]`` before the
loop: cut to the rows the chunks read (an offset, a table longer than the rows), padded with
zeros to ``chunks * rows`` rows, and viewed with the chunk index first (a permute only when a
dim before the rows is not 1). Values read whole and sizes made before the region are passed
to every iteration. The loop stacks the chunks' results; viewed back as the split and cut to
its rows, they are the split. Exact: the rows of a region are computed from the same rows of
its inputs alone (``rows.py``), so a padded row only makes a result row that is cut away.

Worked example: ``softmax(q @ k^T) @ v`` with ``q = x @ wq`` over ``x`` of ``S`` rows (2 to 128)
in 4 chunks: ``c = ceil(S / 4)``; ``x`` is padded to ``c * ceil(S / c)`` rows and viewed
``[ceil(S / c), c, D]``; the body makes ``q`` (``c`` rows), the scores (``c x S``), their
softmax and the ``c`` output rows; the stacked ``[ceil(S / c), c, D]`` is viewed as ``c *
ceil(S / c)`` rows and cut to ``S``. At ``S = 33``: 4 chunks of 9 rows, 3 of them padding; at
``S = 1``: one chunk of one row.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

import sympy
import torch
import torch.fx

from tensorplan.errors import InputError
from tensorplan.ops.control_flow import control_flow_op
from tensorplan.rewrite.parts import is_view_value
from tensorplan.rewrite.rebuild import Rebuild
from tensorplan.rewrite.region import Region, emit_region, made_whole
from tensorplan.rewrite.rows import WHOLE, Need, Rows

aten = torch.ops.aten
LOOP_TAG = "_loop"  # the loop's nodes are named the split's name and this


def _expr(size: Any) -> Any:
    return sympy.Integer(size) if isinstance(size, int) else sympy.expand(size.node.expr)


class Loop:
    """One region emitted into ``build`` as a ``scan`` over chunks of at most ``rows``
    rows."""

    def __init__(self, build: Rebuild, nodes: Mapping[str, torch.fx.Node], region: Region,
                 rows: int, groups: Mapping[str, int]) -> None:
        self.build, self.nodes, self.region, self.rows = build, nodes, region, rows
        self.groups = groups  # products reading KV heads unrepeated (``emit_region``)
        self.split = nodes[region.split]
        extent = region.symbolic if region.symbolic is not None else region.extent
        self.extent = sympy.sympify(extent)  # the split's rows (a polynomial in the dims)
        self.most = math.ceil(region.extent / rows)  # the chunks at the dims' upper bounds

    def _name(self, what: str) -> str:
        return f"{self.region.split}{LOOP_TAG}_{what}"

    def _chunking(self) -> tuple[Any, Any]:
        """The chunk count and the rows of a chunk: ints for static rows; the polynomial
        ``rows of the split / rows`` chunks of ``rows`` when ``rows`` divides it at every size
        (``64 * blocks`` in chunks of 16: no rows padded); else, over ``S`` rows, chunks of
        ``ceil(S / count)`` rows (``count`` the chunks at the bound, so at most ``rows``), as
        many as ``S`` needs, the last padded: a decode step's one row is one chunk of one
        row, not a chunk of ``rows`` padded."""
        if not self.extent.free_symbols:
            return math.ceil(int(self.extent) / self.rows), self.rows
        exact = sympy.expand(self.extent / self.rows)
        if all(c.is_Integer for c in sympy.Poly(exact, *exact.free_symbols).coeffs()):
            return self.build.size(exact), self.rows
        build, total = self.build, self.build.size(self.extent)
        rows = build.arith(operator.floordiv, build.arith(operator.add, total, self.most - 1),
                           self.most)
        made = build.arith(operator.sub, build.arith(operator.add, total, rows), 1)
        return build.arith(operator.floordiv, made, rows), rows

    def _size(self, size: Any) -> int | torch.fx.Node:
        return self.build.size(_expr(size))

    def _operands(self) -> tuple[dict[tuple[str, Need], torch.fx.Node], dict[str, torch.fx.Node]]:
        """The values the region reads from outside: by rows (each ``(name, rows)`` once) and
        whole or as sizes (each name once), in the order the region first reads them."""
        sliced: dict[tuple[str, Need], torch.fx.Node] = {}
        passed: dict[str, torch.fx.Node] = {}
        inside = set(self.region.nodes)
        for name in self.region.nodes:
            node = self.nodes[name]
            if node.target is operator.getitem and node.args[0].name not in inside:
                sliced[(name, self.region.rows[name])] = node
                continue
            for arg in node.all_input_nodes:
                if arg.name in inside:
                    continue
                need = self.region.needs[name].get(arg.name)
                if isinstance(need, Rows):
                    sliced.setdefault((arg.name, need), arg)
                else:
                    passed.setdefault(arg.name, arg)
        return sliced, passed

    def _stacked(self, value: torch.fx.Node, need: Rows, count: Any, rows: Any) -> torch.fx.Node:
        """``value``'s rows the chunks read, ``[count, ..., need.scale * rows, ...]``: cut,
        padded with zeros and viewed with the chunk index first."""
        build, val, dim = self.build, value.meta["val"], need.dim
        per = build.arith(operator.mul, rows, need.scale)
        total = build.arith(operator.mul, count, per)
        total_expr = _expr(total.meta["val"]) if isinstance(total, torch.fx.Node) else \
            sympy.Integer(total)
        available = _expr(val.shape[dim]) - need.offset
        part, tag = value, value.name
        if sympy.expand(available - total_expr) == 0:
            pass
        elif not available.free_symbols and self.most * need.scale * self.rows <= int(available):
            part = build.emit(aten.slice.Tensor, (part, dim, need.offset,
                                                  build.arith(operator.add, total, need.offset)),
                              like=value, name=self._name(f"{tag}_rows"))
        elif sympy.expand(available - need.scale * self.extent) == 0:
            if need.offset:
                part = build.emit(aten.slice.Tensor, (part, dim, need.offset,
                                                      self._size(val.shape[dim])),
                                  like=value, name=self._name(f"{tag}_rows"))
            part = self._padded(part, dim, build.arith(operator.sub, total,
                                                       build.size(available)))
        else:
            raise InputError(f"chunks: {value.name} has {val.shape[dim]} rows along dim {dim}, "
                             f"neither {need.scale} x the split's {self.extent} nor a table "
                             f"longer than the chunks read: a loop cannot cut it")
        if not part.meta["val"].is_contiguous():
            part = build.emit(aten.clone.default, (part,),
                              {"memory_format": torch.contiguous_format}, like=value,
                              name=self._name(f"{tag}_contiguous"))
        sizes = [self._size(s) for s in val.shape]
        before, after = sizes[:dim], sizes[dim + 1:]
        if all(s == 1 for s in before):
            return build.emit(aten.view.default, (part, [count, *before, per, *after]),
                              like=value, name=self._name(f"{tag}_chunks"))
        viewed = build.emit(aten.view.default, (part, [*before, count, per, *after]),
                            like=value, name=self._name(f"{tag}_blocks"))
        order = [dim, *range(dim), *range(dim + 1, val.dim() + 1)]
        return build.emit(aten.permute.default, (viewed, order), like=value,
                          name=self._name(f"{tag}_chunks"))

    def _padded(self, value: torch.fx.Node, dim: int, rows: Any) -> torch.fx.Node:
        """``value`` with ``rows`` rows of zeros after its rows along ``dim``: a
        ``constant_pad_nd``, which exports with a padding of any size, none included (a ``cat``
        with an empty part would be specialized away at an example whose rows need none)."""
        pads: list[Any] = [0] * (2 * (value.meta["val"].dim() - dim))
        pads[-1] = rows
        return self.build.emit(aten.constant_pad_nd.default, (value, pads, 0.0), like=value,
                               name=self._name(f"{value.name}_padded"))

    def _apart(self, *operands: dict[Any, torch.fx.Node]) -> None:
        """Each tensor operand of the loop in a storage of its own: one that shares its storage
        with an earlier operand (the keys and values, views of one projection) is passed as a
        copy, since a loop's body may not read one storage through two inputs (torch's
        ``scan`` refuses it, and ExecuTorch's emitter would bind them apart)."""
        seen: set[str] = set()
        for group in operands:
            for key, node in group.items():
                if not isinstance(node.meta.get("val"), torch.Tensor):
                    continue
                root = _storage_root(node)
                if root in seen:
                    group[key] = self.build.emit(
                        aten.clone.default, (node,), {"memory_format": torch.contiguous_format},
                        like=node, name=self._name(f"{node.name}_apart"))
                else:
                    seen.add(root)

    def emit(self) -> torch.fx.Node:
        """The split, made by the loop."""
        build, region = self.build, self.region
        count, rows = self._chunking()
        sliced, passed = self._operands()
        xs = {key: self._stacked(made_whole(build, node), key[1], count, rows)
              for key, node in sliced.items()}
        weights = {name: node for name, node in passed.items() if _weight_view(node)}
        for view in weights.values():
            passed.setdefault(view.args[0].name, view.args[0])
        extra = {name: made_whole(build, node) for name, node in passed.items()
                 if name not in weights}
        self._apart(xs, extra)
        body = Rebuild(build.source)
        inputs: dict[Any, torch.fx.Node] = {}
        for key, stacked in xs.items():
            inputs[key] = _placeholder(body, f"{key[0]}_rows", stacked.meta["val"].select(0, 0))
        for name, node in extra.items():
            inputs[name] = _placeholder(body, name, node.meta["val"])
        chunk_rows: Any = rows
        if isinstance(rows, torch.fx.Node):  # the chunk's rows, a size of the body's own
            extra[rows.name] = rows
            made_rows = _placeholder(body, "chunk_rows", rows.meta["val"])
            chunk_rows = _expr(rows.meta["val"])
            body.known_size(chunk_rows, made_rows)
        for name, view in weights.items():
            inputs[name] = body.emit(view.target, (inputs[view.args[0].name], *view.args[1:]),
                                     view.kwargs, like=view, name=name)

        def read(arg: torch.fx.Node, need: Need | None) -> torch.fx.Node:
            return inputs[arg.name if need is None or need == WHOLE else (arg.name, need)]

        made = emit_region(body, self.nodes, region, (0, chunk_rows), read, self.groups)
        body.graph.output((made,))
        loop = build.graph.create_node(
            "call_function", torch.ops.higher_order.scan,
            (build.subgraph(body.graph, self._name("body")), [], list(xs.values()),
             list(extra.values())), name=self._name("scan"))
        loop.meta = {k: v for k, v in self.split.meta.items()
                     if k not in ("val", "tensor_meta", "unbacked_bindings")}
        scan = control_flow_op(loop)
        assert scan is not None
        with body.fake_mode:
            loop.meta["val"] = scan.stacked_outputs(
                [[node.meta["val"] for node in arg] if isinstance(arg, list) else arg
                 for arg in loop.args], (made.meta["val"],))
        stacked = build.emit(operator.getitem, (loop, 0), like=self.split,
                             name=self._name("stacked"))
        return self._unstacked(stacked, count, rows)

    def _unstacked(self, stacked: torch.fx.Node, count: Any, rows: Any) -> torch.fx.Node:
        """The loop's ``[count, ..., rows, ...]`` as the split: the chunk index merged back
        into the rows, cut to the split's rows."""
        build, dim, name = self.build, self.region.dim, self.region.split
        val = self.split.meta["val"]
        sizes = [self._size(s) for s in val.shape]
        before, after = sizes[:dim], sizes[dim + 1:]
        total = build.arith(operator.mul, count, rows)
        padded = not (isinstance(total, int) and total == int(self.extent))
        if not all(s == 1 for s in before):
            order = [*range(1, dim + 1), 0, *range(dim + 1, val.dim() + 1)]
            stacked = build.emit(aten.permute.default, (stacked, order), like=self.split,
                                 name=self._name("unstacked"))
            stacked = build.emit(aten.clone.default, (stacked,),
                                 {"memory_format": torch.contiguous_format}, like=self.split,
                                 name=self._name("contiguous"))
        merged = build.emit(aten.view.default, (stacked, [*before, total, *after]),
                            like=self.split, name=self._name("rows") if padded else name)
        if not padded:
            return merged
        return build.emit(aten.slice.Tensor, (merged, dim, 0, build.size(self.extent)),
                          like=self.split, name=name)


def _weight_view(node: torch.fx.Node) -> bool:
    """A view of a program input (a weight's transpose, ``permute(w, [1, 0])``): the loop
    passes the input and its body takes the view, so a product in the body reads the weight
    itself (ExecuTorch's ``linear``, no transposed copy of the weight in the arena)."""
    return node.op == "call_function" and is_view_value(node) and \
        node.target is not operator.getitem and node.args[0].op == "placeholder" and \
        not any(isinstance(a, torch.fx.Node) for a in (*node.args[1:], *node.kwargs.values()))


def _storage_root(node: torch.fx.Node) -> str:
    """The name of the value whose storage ``node``'s value is in (through views)."""
    while node.op == "call_function" and is_view_value(node):
        node = node.args[0]
    return node.name


def _placeholder(body: Rebuild, name: str, value: Any) -> torch.fx.Node:
    node = body.graph.placeholder(name)
    node.meta["val"] = value
    return node
