"""The module the program rewrites export again: a program's graph replayed node by node.

``patches.py`` and ``chunks.py`` rewrite a program by running its graph in a module of their
own, some nodes in another way (a prefix patch by patch, a region chunk by chunk), and
exporting that module again: the result is an ordinary core-ATen program for every later
stage. :class:`Replay` holds what both share: the program's parameters, buffers and constants
as the module's own (of the same kinds), the walk over the graph, and the outputs: user
outputs returned in the model's structure, a mutated buffer's new value copied into its
buffer, so the exported program mutates it too.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from tensorplan.errors import InputError
from tensorplan.frontend.capture import is_core_aten


def call(node: torch.fx.Node, env: Mapping[str, Any]) -> Any:
    """``node``'s op on the values its arguments have in ``env``."""
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: env[n.name])
    return node.target(*args, **kwargs)


class Replay(torch.nn.Module):
    """The program's graph run node by node; a subclass runs the nodes it names in ``skip``
    in its own way, from ``produce`` (called for each node in graph order, returning True
    when it made the value itself)."""

    def __init__(self, program: ExportedProgram) -> None:
        super().__init__()
        self.graph = program.graph
        self.signature = program.graph_signature
        self.out_spec = program.call_spec.out_spec
        self.nodes = {n.name: n for n in self.graph.nodes}
        state = {**program.state_dict, **program.constants}
        self.names: dict[str, str] = {}  # placeholder -> its state's name (the original's)
        for spec in self.signature.input_specs:
            if spec.target is not None:
                self.names[spec.arg.name] = spec.target
                self._hold(spec.target, state[spec.target], spec)
        self.mutated = {spec.arg.name: spec.target for spec in self.signature.output_specs
                        if spec.kind == OutputKind.BUFFER_MUTATION}

    def _hold(self, target: str, value: torch.Tensor, spec: Any) -> None:
        """Keep a parameter, buffer or constant under its own dotted name and kind, so the
        exported program's state is named as the original's (``state_dict`` keys)."""
        *path, name = target.split(".")
        owner: torch.nn.Module = self
        for part in path:
            if not hasattr(owner, part):
                owner.add_module(part, torch.nn.Module())
            owner = getattr(owner, part)
        if spec.kind == InputKind.PARAMETER:
            owner.register_parameter(name, torch.nn.Parameter(value, requires_grad=False))
        else:
            owner.register_buffer(name, value, persistent=spec.kind == InputKind.BUFFER
                                  and spec.persistent is not False)

    def state(self, target: str) -> torch.Tensor:
        """The parameter, buffer or constant of that (dotted) name."""
        return functools.reduce(getattr, target.split("."), self)

    def produce(self, node: torch.fx.Node, env: dict[str, Any]) -> bool:
        """Make ``node``'s value in ``env`` another way (True), or leave it to the replay."""
        return False

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        users = iter(pytree.tree_leaves((args, kwargs)))
        env: dict[str, Any] = {}
        for node in self.graph.nodes:
            if node.op == "placeholder":
                env[node.name] = self.state(self.names[node.name]) \
                    if node.name in self.names else next(users)
            elif node.op == "output":
                return self._outputs(node, env)
            elif not self.produce(node, env):
                env[node.name] = call(node, env)
        raise InputError("rewrite: the program has no output node")

    def _outputs(self, node: torch.fx.Node, env: Mapping[str, Any]) -> Any:
        """The user outputs in the model's structure; each mutated buffer gets its new value."""
        outputs = []
        for spec, arg in zip(self.signature.output_specs, node.args[0], strict=True):
            value = env[arg.name] if isinstance(arg, torch.fx.Node) else arg
            if getattr(spec.arg, "name", None) in self.mutated:
                self.state(self.mutated[spec.arg.name]).copy_(value)
            else:
                outputs.append(value)
        return pytree.tree_unflatten(outputs, self.out_spec)


def export_again(module: Replay, program: ExportedProgram) -> ExportedProgram:
    """``module`` exported on the program's example inputs, in core ATen (decomposed only
    when the export holds an op outside it: the replay calls core-ATen ops)."""
    args, kwargs = program.example_inputs
    exported = torch.export.export(module, args, kwargs, strict=False)
    if not is_core_aten(exported):
        return exported.run_decompositions()
    exported.graph.eliminate_dead_code()  # the unread items of a tuple the replay made
    exported.graph_module.recompile()
    return exported
