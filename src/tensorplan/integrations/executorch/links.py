"""In-place reuse and concatenation in place on an ExecuTorch out-variant graph, as spec links.

ExecuTorch says "this tensor lives inside that one" with ``TensorSpec.storage_base`` and
``storage_base_offset``: its planners place the spec inside its base and its storage verifier
accepts the overlap. This module finds where such a link saves memory and is safe, for one
graph module in its current node order (after ExecuTorch's ``ToOutVarPass``, so every op writes
into a ``memory.alloc``'d ``out``):

- **in place**: an op whose kernel is measured to tolerate it (``kernels.overlap_safe``) gets
  its ``out`` on the bytes of an argument of the same shape, dtype and dim order that is read by
  no later node (through any view of it); a measured byte copy (``kernels.byte_copies``: a
  ``view_copy`` ExecuTorch could not make a view) gets it on an argument of the same size;
- **concatenation in place**: each input of a ``cat.out`` that is made by an out-variant op,
  read by nothing after the ``cat``, and starts at an aligned offset of a contiguous slice
  (every dim before the ``cat`` dim has size 1, and the inputs before it have static sizes),
  is made directly in its slice of the output (``kernels.cat_in_slices``);
- **a loop's result over its input**: a ``scan``'s or ``map``'s stacked output on the bytes of
  an input it slices that dies there (``_loop_link``: each slice is read before the same bytes
  are written);
- **pad in its tail**: the whole storage of a ``constant_pad_nd.out``'s input (its value and
  the values made over it in place), read by nothing after the pad (a graph input only where
  inputs may be written over), is placed in the last bytes of the pad's output, where every
  block the kernel copies is read at least one block after the bytes it writes
  (``kernels.pad_in_tail``; ``_tail_offset``).

Worked example: in ``h = relu(x @ w); y = h + 1`` the ``add.out`` may write over ``h``, which
dies there: one link ``(add's out -> relu's out, offset 0)``; ``addmm`` is not in the table, so
``relu``'s out never sits on the ``addmm`` result.

Links are found by :func:`find_links` (it changes nothing) and made by :func:`apply_links`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from tensorplan.integrations.executorch.vocabulary import (
    is_alloc,
    is_contiguous,
    is_memory_view,
    loop_operands,
    tensor_spec,
)

CAT_OP = "aten::cat.out"
PAD_OP = "aten::constant_pad_nd.out"


@dataclass(frozen=True)
class Link:
    """One spec made inside another: ``spec``'s bytes start ``offset`` bytes into ``base``."""

    spec: Any  # executorch.exir.tensor.TensorSpec placed inside base
    base: Any  # the TensorSpec whose storage it lives in
    offset: int  # byte offset of spec inside base
    kind: str  # "in-place" (out over a dying argument), "concat" (input made in its slice)
    #            or "pad" (a pad's input made in the tail of its output)
    node: str  # name of the op node where the link is made


@dataclass(frozen=True)
class LinkRules:
    """What may be linked in one graph (from the kernel table and the planning pass)."""

    overlap_safe: Mapping[str, frozenset[str]]  # op key -> arguments out may write over
    byte_copies: Mapping[str, frozenset[str]]  # op key -> arguments out is a byte copy of
    concat: bool  # inputs may be made in the slices of a cat's output
    pad: bool  # a pad's input may be made in the tail of its output
    alignment: int  # every linked spec's offset inside its base is a multiple of this
    planned: frozenset[int]  # id() of the specs this graph's planner places
    inputs: bool  # graph inputs (placeholders) may be written over


def op_key(target: Any) -> str | None:
    """``"namespace::name.overload"`` of an op node's target, or None for a non-op target."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return None
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


class StorageGroups:
    """Storages of one graph as groups of specs: views and links join their base's group,
    and each group knows the index of the last node that reads any of its specs."""

    def __init__(self, graph: torch.fx.Graph, spec_refs: Sequence[list[Any]],
                 forever: set[int]) -> None:
        self.parent: dict[int, int] = {}
        self.spec: dict[int, Any] = {}
        for node in graph.nodes:
            view, base = tensor_spec(node), tensor_spec(node.args[0]) if node.args else None
            if is_memory_view(node) and view is not None and base is not None:
                self._join(view, base)
        self.last: dict[int, int] = {}
        for index, refs in enumerate(spec_refs):
            for spec in refs:
                self._add(spec)
                root = self.find(spec)
                self.last[root] = max(self.last.get(root, index), index)
        for key in forever:
            if key in self.spec:
                self.last[self.find(self.spec[key])] = len(spec_refs)
        for spec in list(self.spec.values()):
            if spec.storage_base is not None:
                self.join(spec, spec.storage_base)

    def _add(self, spec: Any) -> None:
        if id(spec) not in self.parent:
            self.parent[id(spec)] = id(spec)
            self.spec[id(spec)] = spec

    def find(self, spec: Any) -> int:
        """The group key of ``spec``."""
        self._add(spec)
        key = id(spec)
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def _join(self, member: Any, base: Any) -> None:
        self.parent[self.find(member)] = self.find(base)

    def join(self, member: Any, base: Any) -> None:
        """Put ``member``'s group into ``base``'s; the group dies when the later of them does."""
        a, b = self.find(member), self.find(base)
        if a != b:
            self.parent[a] = b
            self.last[b] = max(self.last.get(a, -1), self.last.get(b, -1))

    def dies_at(self, spec: Any, index: int) -> bool:
        """True when no node after ``index`` reads ``spec`` or anything sharing its storage."""
        return self.last.get(self.find(spec), math.inf) == index


def spec_references(graph: torch.fx.Graph, graph_signature: Any) -> list[list[Any]]:
    """Per node (graph order), the specs ExecuTorch counts it as using when it computes
    lifetimes: the node's own and those of its Node arguments."""
    from executorch.exir.memory_planning import collect_specs_from_nodes, filter_nodes

    return [list(collect_specs_from_nodes(
        filter_nodes(itertools.chain([node], node.args, node.kwargs.values())),
        graph_signature, ignore_graph_input=False, ignore_const=False, ignore_out_var_node=False,
        dedup=False, do_assertion=False, ignore_dynamic_unbound_tensor=False))
        for node in graph.nodes]


def mutable_buffer_specs(graph: torch.fx.Graph, graph_signature: Any) -> set[int]:
    """id() of the specs of mutable buffers: state that lives across calls, never reused."""
    if graph_signature is None:
        return set()
    mutated = set(graph_signature.buffers_to_mutate.values())
    found = set()
    for node in graph.find_nodes(op="placeholder"):
        fqn = graph_signature.inputs_to_buffers.get(node.target)
        if fqn in mutated and tensor_spec(node) is not None:
            found.add(id(tensor_spec(node)))
    return found


def find_links(graph: torch.fx.Graph, graph_signature: Any, rules: LinkRules) -> list[Link]:
    """The concat and in-place links the graph admits in its current order (see module doc).

    Concatenation is decided first; an in-place link is then only made over an argument whose
    whole storage (its views, its slices, what is already linked to it) dies at the op; a pad's
    input is placed last, with the storage the in-place links made of it.
    """
    nodes = list(graph.nodes)
    groups = StorageGroups(graph, spec_references(graph, graph_signature),
                     mutable_buffer_specs(graph, graph_signature))
    links: list[Link] = []
    if rules.concat:
        for index, node in enumerate(nodes):
            if op_key(node.target) == CAT_OP:
                links += _concat_links(node, index, groups, rules)
    linked = {id(link.spec) for link in links}
    for index, node in enumerate(nodes):
        link = _in_place_link(node, index, groups, rules, linked) or \
            _loop_link(node, index, groups, rules, linked)
        if link is not None:
            linked.add(id(link.spec))
            links.append(link)
            groups.join(link.spec, link.base)
    if rules.pad:
        bases = {id(link.spec): link for link in links}
        for index, node in enumerate(nodes):
            link = _pad_link(node, index, groups, rules, bases) \
                if op_key(node.target) == PAD_OP else None
            if link is not None:
                bases[id(link.spec)] = link
                links.append(link)
                groups.join(link.spec, link.base)
    return links


def apply_links(links: Sequence[Link]) -> None:
    """Write each link onto its spec (``storage_base``, ``storage_base_offset``)."""
    for link in links:
        link.spec.storage_base = link.base
        link.spec.storage_base_offset = link.offset


def _static(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and all(isinstance(d, int) for d in value.shape)


def _concat_links(node: torch.fx.Node, index: int, groups: StorageGroups,
                  rules: LinkRules) -> Iterator[Link]:
    """Links of the ``cat`` inputs that can be made in their slices of its output."""
    out = tensor_spec(node.kwargs.get("out"))
    inputs = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    value = node.meta.get("val")
    if out is None or not is_contiguous(out) or not _static(value) or id(out) not in rules.planned:
        return
    dim %= value.dim()
    if math.prod(value.shape[:dim]) != 1:
        return
    roots = [groups.find(tensor_spec(arg)) if tensor_spec(arg) is not None else None
             for arg in inputs]
    offset = 0
    for position, arg in enumerate(inputs):
        spec, arg_value = tensor_spec(arg), arg.meta.get("val")
        if not _static(arg_value):
            return
        if (is_alloc(arg.kwargs.get("out")) and spec is not None and spec.storage_base is None
                and id(spec) in rules.planned and not spec.const and is_contiguous(spec)
                and spec.dtype == out.dtype and roots.count(roots[position]) == 1
                and roots[position] != groups.find(out) and offset % rules.alignment == 0
                and groups.dies_at(spec, index)):
            groups.join(spec, out)
            yield Link(spec, out, offset, "concat", node.name)
        offset += arg_value.numel() * arg_value.element_size()


def _arguments(node: torch.fx.Node) -> dict[str, Any]:
    """The op node's arguments by schema name."""
    schema = node.target._schema
    named = dict(node.kwargs)
    for argument, value in zip(schema.arguments, node.args, strict=False):
        named[argument.name] = value
    return named


def _first_out(node: torch.fx.Node) -> tuple[Any, Any]:
    """The spec and traced value of an out-variant node's first output."""
    from executorch.exir.operator.convert import get_out_args_from_opoverload

    names = get_out_args_from_opoverload(node.target)
    value = node.meta.get("val")
    if isinstance(value, (tuple, list)):
        value = value[0]
    return tensor_spec(node.kwargs.get(names[0])), value


def view_base(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose storage a chain of ExecuTorch ``memory.view`` nodes reads."""
    while is_memory_view(node):
        node = node.args[0]
    return node


def _in_place_link(node: torch.fx.Node, index: int, groups: StorageGroups, rules: LinkRules,
                   linked: set[int]) -> Link | None:
    """The link putting the op's first output over an argument that dies here, or None."""
    key = op_key(node.target) or ""
    allowed = rules.overlap_safe.get(key) or rules.byte_copies.get(key)
    if node.op != "call_function" or not allowed:
        return None
    reshape = key in rules.byte_copies
    out, out_value = _first_out(node)
    if out is None or out.storage_base is not None or id(out) in linked \
            or id(out) not in rules.planned or not isinstance(out_value, torch.Tensor):
        return None
    arguments = _arguments(node)
    tensors = {name: arg for name, arg in arguments.items()
               if tensor_spec(arg) is not None and arg is not node.kwargs.get("out")}
    for name in [n for n in tensors if n in allowed]:
        arg = tensors[name]
        root = groups.find(tensor_spec(arg))
        if any(groups.find(tensor_spec(other)) == root and other_name not in allowed
               for other_name, other in tensors.items()):
            continue
        base = _overwritable_base(arg, out, out_value, rules, reshape)
        if base is not None and groups.dies_at(base, index):
            return Link(out, base, 0, "in-place", node.name)
    return None


def _loop_link(node: torch.fx.Node, index: int, groups: StorageGroups, rules: LinkRules,
               linked: set[int]) -> Link | None:
    """The link putting a loop's first stacked output over an input it slices that dies
    there, or None. ExecuTorch's emitter copies each iteration's slices into the body's inputs
    (``select_copy``) before the body runs and writes the body's result into its slice of the
    stacked output (``et_copy_index``) after it, so slice ``i`` of the input is read before
    the same bytes are written."""
    operands = loop_operands(node)
    if operands is None:
        return None
    carried, sliced = operands
    specs, values = node.meta.get("spec"), node.meta.get("val")
    if not isinstance(specs, (list, tuple)) or len(specs) <= len(carried):
        return None
    out, out_value = specs[len(carried)], values[len(carried)]
    if out is None or out.storage_base is not None or id(out) in linked \
            or id(out) not in rules.planned:
        return None
    for arg in sliced:
        base = _overwritable_base(arg, out, out_value, rules, reshape=False)
        if base is not None \
                and sum(groups.find(tensor_spec(a)) == groups.find(base) for a in sliced) == 1 \
                and groups.dies_at(base, index):
            return Link(out, base, 0, "in-place", node.name)
    return None


def _overwritable_base(arg: torch.fx.Node, out: Any, out_value: torch.Tensor, rules: LinkRules,
                       reshape: bool) -> Any:
    """The spec of ``arg``'s storage (its view base's) when ``out`` may take its bytes: same
    shape (symbolically; for a byte copy, the same number of elements), dtype and dense
    layout, and a planned, non-constant value; None otherwise."""
    base_node = view_base(arg)
    base, value = tensor_spec(base_node), arg.meta.get("val")
    if not isinstance(value, torch.Tensor) or base is None:
        return None
    if base_node.op == "placeholder" and not rules.inputs:
        return None
    same_shape = str(value.numel()) == str(out_value.numel()) if reshape \
        else [str(d) for d in value.shape] == [str(d) for d in out_value.shape]
    fits = (same_shape and value.dtype == out_value.dtype and id(base) in rules.planned
            and not base.const and is_contiguous(out) and is_contiguous(base)
            and base.allocated_memory >= out.allocated_memory
            and (arg is base_node or base.nbytes() == out.nbytes()))
    return base if fits else None


def _pad_link(node: torch.fx.Node, index: int, groups: StorageGroups, rules: LinkRules,
              bases: Mapping[int, Link]) -> Link | None:
    """The link placing the storage of a pad's input (``bases``: the links found so far, by
    id() of the linked spec) in the tail of the pad's output, or None."""
    out, arg = tensor_spec(node.kwargs.get("out")), view_base(node.args[0])
    value, arg_value = node.meta.get("val"), node.args[0].meta.get("val")
    if out is None or (arg.op == "placeholder" and not rules.inputs) or tensor_spec(arg) is None \
            or not _static(value) or not _static(arg_value) or id(out) not in rules.planned \
            or out.storage_base or not is_contiguous(out) or arg_value.dtype != value.dtype:
        return None
    root = tensor_spec(arg)
    while id(root) in bases and bases[id(root)].offset == 0:
        root = bases[id(root)].base
    if id(root) in bases or root.storage_base is not None or id(root) not in rules.planned \
            or root.const or not is_contiguous(root) or groups.find(root) == groups.find(out) \
            or root.nbytes() != arg_value.numel() * arg_value.element_size() \
            or not groups.dies_at(root, index):
        return None
    offset = _tail_offset(list(node.args[1]), tuple(arg_value.shape), tuple(value.shape),
                          value.element_size(), rules.alignment,
                          out.allocated_memory - root.allocated_memory)
    return None if offset is None else Link(root, out, offset, "pad", node.name)


def _tail_offset(pads: list[int], shape: tuple[int, ...], padded: tuple[int, ...],
                 itemsize: int, alignment: int, room: int) -> int | None:
    """The byte offset, a multiple of ``alignment`` and at most ``room``, at which a dense
    input of ``shape`` may lie in its dense padded output of shape ``padded``, or None.

    The kernel writes the output front to back and copies the input in blocks (all of the dims
    from the last padded one on); the input is read before it is written over when each block
    is read at least one block past where it is written. Blocks are written ever further past
    where they are read, so the last block decides.

    >>> _tail_offset([0, 1, 0, 1], (1, 2, 4, 4), (1, 2, 5, 5), 4, 16, 50 * 4 - 32 * 4)
    64
    >>> _tail_offset([1, 0, 1, 0], (1, 2, 4, 4), (1, 2, 5, 5), 4, 16, 50 * 4 - 32 * 4) is None
    True
    """
    rank = len(shape)
    before = [0] * (rank - len(pads) // 2) + pads[0::2][::-1]
    after = [0] * (rank - len(pads) // 2) + pads[1::2][::-1]
    dims = [d for d in range(rank) if before[d] or after[d]]
    if not dims or min(pads) < 0 or math.prod(shape) == 0:
        return None
    last = dims[-1]
    block = math.prod(shape[last:])
    strides = [math.prod(padded[d + 1:]) for d in range(rank)]
    written = sum((shape[d] - 1 + before[d]) * strides[d] for d in range(last)) \
        + before[last] * strides[last]
    read = math.prod(shape) - block
    offset = room // alignment * alignment
    return offset if offset >= (written - read + block) * itemsize else None
