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

from tensorplan.integrations.executorch.vocabulary import is_alloc, nodes_replaced
from tensorplan.ops.schemas import is_scratch_of


def scratch_as_allocs(exported_program: Any) -> int:
    """Make, in place, every kernel's ``scratch`` argument that an op with no input makes (an
    ``empty``) an ``exir.memory.alloc`` of its shape and dtype; return how many."""
    from executorch.exir import memory

    def alloc(node: torch.fx.Node) -> torch.fx.Node | None:
        if node.op != "call_function" or is_alloc(node) or node.all_input_nodes \
                or not any(is_scratch_of(node, user) for user in node.users):
            return None
        value = node.meta["val"]
        with exported_program.graph.inserting_before(node):
            made = exported_program.graph.call_function(
                memory.alloc, ((tuple(value.shape), value.dtype),))
        made.meta.update(node.meta)
        return made
    return nodes_replaced(exported_program, alloc)
