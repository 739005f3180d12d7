"""A program rewrite before ExecuTorch's lowering: a kernel's scratch buffer stays a buffer.

ExecuTorch's Cortex-M passes give each CMSIS-NN kernel a working buffer: an
``exir.memory.alloc`` passed as the kernel's ``scratch`` argument. The kernel writes it,
though its schema only reads it (no ``(a!)``). ``tp.compile`` keeps that edge program, and
``to_executorch`` of it runs ``to_edge`` again, which makes each ``alloc`` an ``empty`` with
no input: constant propagation (ExecuTorch's, and the foldings ``fold.py`` offers) then folds
it into the constants, read-only memory on a device, which the kernel would write.
:func:`scratch_as_allocs` makes each such ``empty`` an ``alloc`` again: ExecuTorch's constant
propagation skips an ``alloc`` and its memory planning places it in the arena, as ExecuTorch's
own Cortex-M lowering does.
"""

from __future__ import annotations

from typing import Any

import torch.fx

from tensorplan.integrations.executorch.vocabulary import is_alloc
from tensorplan.rewrite.int8 import scratch_position


def scratch_as_allocs(exported_program: Any) -> int:
    """Make, in place, every kernel's ``scratch`` argument that an op with no input makes (an
    ``empty``) an ``exir.memory.alloc`` of its shape and dtype; return how many."""
    from executorch.exir import memory

    graph = exported_program.graph
    made = 0
    for node in list(graph.nodes):
        position = scratch_position(node)
        buffer = node.args[position] if position is not None else None
        if not isinstance(buffer, torch.fx.Node) or buffer.op != "call_function" \
                or is_alloc(buffer) or buffer.all_input_nodes:
            continue
        value = buffer.meta["val"]
        with graph.inserting_before(buffer):
            alloc = graph.call_function(memory.alloc, ((tuple(value.shape), value.dtype),))
        alloc.meta.update(buffer.meta)
        buffer.replace_all_uses_with(alloc)
        graph.erase_node(buffer)
        made += 1
    if made:
        exported_program.graph_module.recompile()
    return made
