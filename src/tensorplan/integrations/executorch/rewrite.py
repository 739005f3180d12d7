"""A program rewrite before ExecuTorch's lowering: matrix products of a transposed copy become
``linear``.

``to_edge`` decomposes ``nn.Linear`` into ``permute_copy(weight, [1, 0])`` and ``mm`` /
``addmm``. In the emitted program that transpose is a real copy made at every call: a buffer of
the weight's size in the arena (a tied embedding's transpose before a language-model head is
the largest buffer of the model), or, with constant propagation, a second copy of a tied weight
in the constants. ExecuTorch's runtime has ``linear.out``, which reads the weight as it is, so
:func:`linear_without_transposes` rewrites

- ``mm(x, permute_copy(w, [1, 0]))`` into ``linear(x, w)``;
- ``addmm(b, x, permute_copy(w, [1, 0]))`` (default ``beta`` and ``alpha``, 1-D ``b``) into
  ``linear(x, w, b)``;

when the transpose has no other reader (otherwise it stays, and so does the product). The values
are the same products; ``tests/test_executorch_pte.py`` compares every rewritten program with
eager PyTorch in ExecuTorch's runtime.
"""

from __future__ import annotations

from typing import Any

import torch.fx


def _is(node: Any, name: str) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" \
        and getattr(node.target, "__name__", "") == name


def _transposed_weight(node: Any) -> torch.fx.Node | None:
    """``w`` when ``node`` is ``permute_copy(w, [1, 0])`` of a 2-D ``w`` read by nothing else."""
    if not _is(node, "aten.permute_copy.default") or len(node.users) != 1:
        return None
    weight, dims = node.args[0], list(node.args[1])
    value = weight.meta.get("val") if isinstance(weight, torch.fx.Node) else None
    if dims != [1, 0] or value is None or value.dim() != 2:
        return None
    return weight


def _linear_arguments(node: torch.fx.Node) -> tuple | None:
    """(x, w[, b]) for an ``mm`` / ``addmm`` that is a linear layer, else None."""
    if _is(node, "aten.mm.default") and not node.kwargs:
        weight = _transposed_weight(node.args[1])
        return None if weight is None else (node.args[0], weight)
    if _is(node, "aten.addmm.default") and not node.kwargs and len(node.args) == 3:
        bias, x, transposed = node.args
        weight = _transposed_weight(transposed)
        bias_value = bias.meta.get("val") if isinstance(bias, torch.fx.Node) else None
        if weight is None or bias_value is None or bias_value.dim() != 1:
            return None
        return x, weight, bias
    return None


def linear_without_transposes(exported_program: Any) -> int:
    """Rewrite the edge program in place (see the module docstring); return how many products
    became ``linear``."""
    from executorch.exir.dialects._ops import ops as exir_ops

    graph = exported_program.graph
    rewritten = 0
    for node in list(graph.nodes):
        arguments = _linear_arguments(node)
        if arguments is None:
            continue
        with graph.inserting_before(node):
            linear = graph.call_function(exir_ops.edge.aten.linear.default, arguments)
        linear.meta.update(node.meta)
        node.replace_all_uses_with(linear)
        graph.erase_node(node)
        rewritten += 1
    if rewritten:
        graph.eliminate_dead_code()
        exported_program.graph_module.recompile()
    return rewritten
