"""Which node an internal error was raised at, named as the user reads it (``internal.py``
asks, once torch is loaded): the node a failing frame holds, its graph's prefix in the program,
its op and its arguments' traced shapes."""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram

_LONGEST = 240  # characters of an argument list

Root = ExportedProgram | torch.fx.GraphModule  # a program, or the root module of its graphs


def root_in_frames(frames: list[tuple[types.FrameType, int]]) -> Root | None:
    """The outermost ``ExportedProgram`` or ``GraphModule`` a frame holds in a local."""
    for frame, _ in reversed(frames):
        for value in frame.f_locals.values():
            if isinstance(value, (ExportedProgram, torch.fx.GraphModule)):
                return value
    return None


def node_in_frames(frames: list[tuple[types.FrameType, int]],
                    program: Root | None) -> tuple[str, torch.fx.Node] | None:
    """(graph prefix, node) of the innermost frame holding a local ``torch.fx.Node``."""
    for frame, _ in frames:
        values = frame.f_locals
        nodes = [v for v in values.values() if isinstance(v, torch.fx.Node)]
        if nodes:
            node = values["node"] if isinstance(values.get("node"), torch.fx.Node) else nodes[0]
            return _prefix_of(node, program), node
    return None


def _prefix_of(node: torch.fx.Node, program: Root | None) -> str:
    """``"<submodule>/"`` when ``node`` is in a subgraph of ``program``, else ``""``."""
    if program is None:
        return ""
    root = program.graph_module if isinstance(program, ExportedProgram) else program
    for name, module in root.named_modules():
        if name and isinstance(module, torch.fx.GraphModule) and module.graph is node.graph:
            return name.replace(".", "/") + "/"
    return ""


def describe(prefix: str, node: torch.fx.Node) -> str:
    """``name: op(argument shapes)``, e.g. ``cat: aten.cat.default([float32[0],
    float32[1,4,7,16]], 1)``; shapes are the traced ones (``meta["val"]``), symbols included."""
    if node.op in ("placeholder", "output", "get_attr"):
        return f"{prefix}{node.name}: {node.op} {node.target}"
    arguments = ", ".join([*(_argument(a) for a in node.args),
                           *(f"{k}={_argument(v)}" for k, v in node.kwargs.items())])
    return f"{prefix}{node.name}: {_op_name(node.target)}({arguments[:_LONGEST]})"


def _op_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__name__", str(target))


def _argument(value: Any) -> str:
    """One argument as the user reads it: a node by its traced value, lists item by item."""
    if isinstance(value, torch.fx.Node):
        traced = value.meta.get("val")
        return value.name if traced is None else _traced(traced)
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(_argument(item) for item in value)}]"
    return repr(value)


def _traced(value: Any) -> str:
    """``float32[1,4,7,16]`` for a tensor, items in parentheses for a tuple, else ``str``."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return f"{dtype}[{','.join(str(size) for size in value.shape)}]"
    if isinstance(value, (list, tuple)):
        return f"({', '.join(_traced(item) for item in value)})"
    return str(value)

