"""What tensorplan reads of ExecuTorch's out-variant graph, named once for every module here.

After ``to_executorch``'s memory-format passes, a graph holds ``memory.alloc`` nodes (the
buffers out-variant kernels write), ``memory.view`` nodes (views made at load time, in their
input's storage) and, in ``node.meta["spec"]``, ExecuTorch's ``TensorSpec`` of each value
(several for an ``alloc`` of a list of outputs); a spec placed inside another's storage names it
in ``storage_base`` (tensorplan's links, ``links.py``).
"""

from __future__ import annotations

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


def specs_in(value: Any) -> list[Any]:
    """The TensorSpecs a ``meta["spec"]`` value holds (a list of them for an ``alloc`` of
    several outputs; none for a value that is no tensor)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    return [s for s in items if hasattr(s, "allocated_memory")]


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
