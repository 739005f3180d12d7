"""Running one graph (the top level or a subgraph) out of the arena.

The graph is lowered once (``lower.py``), each row becomes its steps (``steps.py``), and the
steps split into those done once per set of input sizes (they build the cached frame,
``frames.py``) and those done at every run. A run copies the frame and executes the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.fx

from tensorplan.analysis.liveness import scheduled_nodes
from tensorplan.errors import TensorPlanError
from tensorplan.internal import Locating
from tensorplan.runtime.args import compile_args
from tensorplan.runtime.frames import Env, Frames
from tensorplan.runtime.lower import Lowered, lower_graph
from tensorplan.runtime.refusals import refusal
from tensorplan.runtime.shapes import Bindings
from tensorplan.runtime.steps import StepContext, SubgraphRun, build_steps


class GraphRunner:
    """The steps of one graph, in ``order`` (node names; graph order without one); ``run``
    executes them on a copy of the frame for its sizes."""

    def __init__(self, module: torch.fx.GraphModule, prefix: str, context: StepContext,
                 order: Sequence[str] | None = None) -> None:
        nodes = scheduled_nodes(module.graph, order)
        facts = context.views.facts
        self.slots = {node: i for i, node in enumerate(nodes)}
        self.rows: tuple[Lowered, ...] = lower_graph(module, prefix, facts, order)
        ctx = replace(context, slots=self.slots, child=self._child(module, prefix, context))
        frame_steps, self.run_steps = [], []
        self.node_of: dict[int, torch.fx.Node] = {}  # id of a step -> its node (errors only)
        for node, row in zip(nodes, self.rows, strict=True):
            for step, per_frame in build_steps(node, row, ctx):
                (frame_steps if per_frame else self.run_steps).append(step)
                self.node_of[id(step)] = node
        self.frames = Frames(len(nodes), frame_steps, facts)
        self.placeholders = [self.slots[n] for n in nodes if n.op == "placeholder"]
        results = nodes[-1].args[0]
        results = (results,) if isinstance(results, torch.fx.Node) else tuple(results)
        self.outputs = compile_args(results, {}, self.slots)
        self.prefix, self.is_subgraph = prefix, bool(prefix)
        self._locating = Locating(self.node_of, prefix)

    @staticmethod
    def _child(module: torch.fx.GraphModule, prefix: str,
               context: StepContext) -> Callable[[str], SubgraphRun]:
        def child(attribute: str) -> SubgraphRun:
            return GraphRunner(getattr(module, attribute), f"{prefix}{attribute}/", context).run
        return child

    def frame(self, bindings: Bindings) -> Env:
        """The cached frame for these sizes (do not modify it); a failing step is located."""
        with self._locating:
            return self.frames.get(bindings)

    def run(self, inputs: list[Any], bindings: Bindings) -> list[Any]:
        """Execute the graph with ``inputs`` bound to its placeholders; return its outputs.

        Top-level inputs are not bound here: the runner copies them into their planned views.
        An exception leaves with the node of the step that raised it (``internal.locate``), or
        as an ``InputError`` where that node's op refuses the values of its index arguments
        (``refusals.py``).
        """
        env: Env = list(self.frame(bindings))
        if self.is_subgraph:
            for slot, value in zip(self.placeholders, inputs, strict=True):
                env[slot] = value
        with self._locating:
            try:
                for step in self.run_steps:
                    step(env, bindings)
            except Exception as error:
                self._raise_refusal(self.node_of[id(step)], env, error)
                raise
        return list(self.outputs(env)[0])

    def _raise_refusal(self, node: torch.fx.Node, env: Env, error: Exception) -> None:
        """Raise the ``InputError`` for ``error`` when it is the user's (``refusals.py``)."""
        if isinstance(error, TensorPlanError):
            return
        args, kwargs = compile_args(node.args, node.kwargs, self.slots)(env)
        refused = refusal(node, self.prefix, args, kwargs)
        if refused is not None:
            raise refused from error
