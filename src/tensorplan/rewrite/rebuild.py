"""A program's graph copied node by node into a new program, some nodes made another way.

``chunks.py`` rewrites a program without tracing it again: :class:`Rebuild` copies the graph's
nodes (their values, ``meta["val"]``, kept), emits new nodes whose values it computes on the
program's own fake tensors (the same fake mode and ShapeEnv, so the values are those a trace
would give), and wraps the new graph with the program's signature, state and range
constraints. Every name the signature refers to is kept, so the result is an ordinary
core-ATen program for every later stage, made in time linear in its nodes (a trace of a
chunked transformer takes seconds per thousand nodes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx
from torch._guards import detect_fake_mode
from torch.export import ExportedProgram
from torch.utils import _pytree as pytree

from tensorplan.errors import InternalError


class Rebuild:
    """A new graph being filled from ``program``'s: ``copy`` a node as it is, ``emit`` a new
    one; ``env`` maps each original node's name to the node that now holds its value."""

    def __init__(self, program: ExportedProgram) -> None:
        self.source = program
        self.graph = torch.fx.Graph()
        self.env: dict[str, torch.fx.Node] = {}
        vals = [n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"]
        self.fake_mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])

    def copy(self, node: torch.fx.Node) -> torch.fx.Node:
        """``node`` as it is, under its own name, reading the values its inputs now have."""
        new = self.graph.node_copy(node, lambda n: self.env[n.name])
        new.name = node.name  # fx renames a name it deems illegal (an input called "input")
        self.env[node.name] = new
        return new

    def emit(self, target: Callable[..., Any], args: tuple[Any, ...],
             kwargs: Mapping[str, Any] | None = None, *, like: torch.fx.Node,
             name: str) -> torch.fx.Node:
        """A new node ``target(*args, **kwargs)`` named ``name``, with ``like``'s metadata
        (its module stack, its stack trace) and the value computed on the fake inputs."""
        kwargs = dict(kwargs or {})
        vals = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
        val = self._value(target, vals[0], vals[1])
        node = self.graph.create_node("call_function", target, args, kwargs, name=name)
        node.meta = {k: v for k, v in like.meta.items() if k not in ("val", "unbacked_bindings")}
        node.meta["val"] = val
        return node

    def _value(self, target: Callable[..., Any], args: tuple[Any, ...],
               kwargs: Mapping[str, Any]) -> Any:
        """``target`` on fake values: run on meta tensors of the same sizes and strides and
        wrapped as the program's fake tensors when every size is static (a third of the cost
        of a fake dispatch), else in the fake mode itself."""
        fakes = [v for v in pytree.tree_leaves((args, kwargs)) if isinstance(v, torch.Tensor)]
        if not all(isinstance(d, int) for v in fakes for d in (*v.shape, *v.stride())):
            with self.fake_mode:
                return target(*args, **kwargs)
        meta = pytree.tree_map_only(torch.Tensor, lambda v: torch.empty_strided(
            v.shape, v.stride(), dtype=v.dtype, device="meta"), (args, kwargs))
        devices = {v.device for v in fakes}
        device = devices.pop() if len(devices) == 1 else torch.device("cpu")
        out = target(*meta[0], **meta[1])
        convert = self.fake_mode.fake_tensor_converter
        return pytree.tree_map_only(
            torch.Tensor, lambda t: convert.from_meta_and_device(self.fake_mode, t, device), out)

    def program(self) -> ExportedProgram:
        """The new graph as an ``ExportedProgram`` with the source's signature and state.

        Raises ``InternalError`` when a name the signature refers to was not kept."""
        source = self.source
        names = {n.name for n in self.graph.nodes}
        lost = [spec.arg.name for spec in (*source.graph_signature.input_specs,
                                           *source.graph_signature.output_specs)
                if getattr(spec.arg, "name", None) and spec.arg.name not in names]
        if lost:
            raise InternalError(f"rebuild: the new graph lost the names {lost[:5]} its "
                                f"signature refers to", "rewrite")
        module = torch.fx.GraphModule(source.graph_module, self.graph)
        return ExportedProgram(
            root=module, graph=module.graph, graph_signature=source.graph_signature,
            state_dict=source.state_dict, range_constraints=source.range_constraints,
            module_call_graph=source.module_call_graph, example_inputs=source.example_inputs,
            constants=source.constants, verifiers=source.verifiers)
