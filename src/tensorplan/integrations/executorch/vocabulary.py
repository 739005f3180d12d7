"""What tensorplan reads of ExecuTorch's out-variant graph, named once for every module here.

After ``to_executorch``'s memory-format passes, a graph holds ``memory.alloc`` nodes (the
buffers out-variant kernels write), ``memory.view`` nodes (views made at load time, in their
input's storage) and, in ``node.meta["spec"]``, ExecuTorch's ``TensorSpec`` of each value
(several for an ``alloc`` of a list of outputs); a spec placed inside another's storage names it
in ``storage_base`` (tensorplan's links, ``links.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.fx


def is_alloc(node: Any) -> bool:
    """``node`` is ExecuTorch's ``memory.alloc``: a buffer an out-variant kernel writes."""
    from executorch.exir import memory

    return isinstance(node, torch.fx.Node) and node.op == "call_function" \
        and node.target is memory.alloc


def is_memory_view(node: Any) -> bool:
    """``node`` is ExecuTorch's ``memory.view``: a view made at load time, in its input's
    storage."""
    from executorch.exir import memory

    return isinstance(node, torch.fx.Node) and node.op == "call_function" \
        and node.target is memory.view


def is_contiguous(spec: Any) -> bool:
    """True when a spec's dims are laid out in their logical order."""
    return list(spec.dim_order) == list(range(len(spec.shape)))


def specs_in(value: Any) -> list[Any]:
    """The TensorSpecs a ``meta["spec"]`` value holds (a list of them for an ``alloc`` of
    several outputs; none for a value that is no tensor)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    return [s for s in items if hasattr(s, "allocated_memory")]


def traced_value(node: Any) -> Any:
    """The value export traced for ``node`` (``meta["val"]``: a fake tensor, a list of them, a
    symbolic int), or None for an argument that is no node."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def tensor_spec(node: Any) -> Any:
    """The single spec of a node (a ``TensorSpec``, or the ``_ViewSpec`` of a view), or None."""
    if not isinstance(node, torch.fx.Node):
        return None
    spec = node.meta.get("spec")
    return spec if type(spec).__name__ in ("TensorSpec", "_ViewSpec") else None


def storage_base(spec: Any) -> Any:
    """The spec whose storage ``spec`` lies in, its ``storage_base`` links followed to the end
    (``spec`` itself when it has none)."""
    while getattr(spec, "storage_base", None) is not None:
        spec = spec.storage_base
    return spec


BOUND_INPUTS = "tensorplan_bound_inputs"  # a loop body's meta key: ``mark_bound_inputs``


def loop_operands(node: Any) -> tuple[list[Any], list[Any]] | None:
    """A loop's carried operands and the operands its emitted loop slices, as ExecuTorch's
    emitter reads them (``_emit_scan``: ``scan(body, init, xs, extra)``; ``_emit_map``: the
    first mapped operand only), or None for a node that is no ``scan`` / ``map``. Its first
    outputs are the carried values, the others stacked results."""
    if getattr(node, "op", None) != "call_function":
        return None
    if node.target is torch.ops.higher_order.scan:
        return list(node.args[1]), list(node.args[2])
    if node.target is torch.ops.higher_order.map_impl:
        return [], list(node.args[1])[:1]
    return None


def mark_bound_inputs(graph_module: torch.fx.GraphModule) -> None:
    """Write on every ``scan`` / ``map`` body under ``graph_module`` (``meta[BOUND_INPUTS]``)
    the names of its placeholders that ExecuTorch's emitter binds to the parent's values: the
    carried values and the operands passed whole (only the slices of the scanned inputs are
    written each iteration into the body's own tensors). ExecuTorch's planning gives a loop
    body's inputs memory of their own (``alloc_graph_input=True``), unused for these."""
    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            operands = loop_operands(node)
            if operands is None:
                continue
            carried, sliced = map(len, operands)
            own = range(carried, carried + sliced)
            body = getattr(module, node.args[0].target)
            inputs = [n for n in body.graph.nodes if n.op == "placeholder"]
            body.meta[BOUND_INPUTS] = frozenset(
                p.name for i, p in enumerate(inputs) if i not in own)


def bound_input_specs(graph_module: Any) -> set[Any]:
    """The specs of the placeholders ``mark_bound_inputs`` marked on ``graph_module`` (none
    for another graph): the planning leaves them without memory."""
    bound = getattr(graph_module, "meta", {}).get(BOUND_INPUTS, frozenset())
    return {spec for node in graph_module.graph.nodes
            if node.op == "placeholder" and node.name in bound
            for spec in specs_in(node.meta.get("spec"))} if bound else set()


def written_arguments(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The Node arguments ``node`` may write by its schema (its ``out`` arguments aside; every
    argument of a call with no schema, a delegate's or a loop's, but a view or a ``getitem``)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return [] if is_memory_view(node) or node.target.__name__ == "getitem" \
            else list(node.all_input_nodes)
    from executorch.exir.operator.convert import get_out_args_from_opoverload, is_out_variant

    outs = set(get_out_args_from_opoverload(node.target)) \
        if is_out_variant(schema.name, schema.overload_name) else set()
    named = dict(zip((a.name for a in schema.arguments), node.args, strict=False))
    named.update(node.kwargs)
    return [named[a.name] for a in schema.arguments
            if a.alias_info is not None and a.alias_info.is_write and a.name not in outs
            and isinstance(named.get(a.name), torch.fx.Node)]


def nodes_replaced(exported_program: Any,
                   replacement: Callable[[torch.fx.Node], torch.fx.Node | None]) -> int:
    """Rewrite the program in place: every node for which ``replacement`` gives another node
    (one already in the graph, or made by it before this one) has its readers read that node
    and is erased; the graph is recompiled when any was. Return how many were replaced."""
    graph = exported_program.graph
    replaced = 0
    for node in list(graph.nodes):
        other = replacement(node)
        if other is None:
            continue
        node.replace_all_uses_with(other)
        graph.erase_node(node)
        replaced += 1
    if replaced:
        exported_program.graph_module.recompile()
    return replaced
