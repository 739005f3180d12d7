"""One fake-tensor re-trace of a program, in the program's own fake mode and ShapeEnv.

The trace is the single source of the values every spec is built from (DESIGN rule 1). It walks
the top-level graph and every subgraph of a control-flow node (``control_flow.py``), and
rebinds fresh unbacked symbols to the ones the ShapeEnv already holds ranges for, so that
``torch._check`` bounds recorded at export time apply to the re-traced sizes.

It traces as ``frontend/fake.tracing`` says, with the kernel backends torch.export traces with
(mkldnn, nnpack and cudnn off):
the fake convolution kernel picks a backend, and choosing mkldnn guards on the batch size
(``Ge(s, 16)``, decided by the example's hint), which would narrow the ShapeEnv's range of
a dynamic batch to ``[2, 15]``. A program traced in a fresh fake mode (a loaded one: no
cached results of export's trace) reaches those kernels again; torch.export.load itself keeps
the range, so nothing needs restoring from ``range_constraints``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.fx.experimental.symbolic_shapes import ShapeEnv, rebind_unbacked

from tensorplan.errors import CaptureError, UnsupportedOpError
from tensorplan.frontend.fake import FakeOutputs, program_shape_env, tracing
from tensorplan.ops.control_flow import ControlFlowOp, control_flow_op
from tensorplan.specs.spec import TensorSpec


@dataclass(frozen=True)
class TracedValue:
    """One node's value in the re-trace."""

    node: torch.fx.Node   # the node in the caller's (unmodified) graph
    value: Any            # fake tensor, tuple of them, SymInt, int, None ...
    carried: bool         # True when the node is opaque and keeps the spec it already carries


def carried_spec(node: torch.fx.Node) -> Any:
    """The spec an opaque node (a lowered or delegate call) already carries, or None."""
    spec = node.meta.get("spec")
    is_opaque = node.op == "call_module" or (
        node.op == "call_function" and not isinstance(node.target, torch._ops.OpOverload)
        and control_flow_op(node) is None)
    if not is_opaque:
        return None
    if isinstance(spec, TensorSpec) or (
            isinstance(spec, tuple) and all(s is None or isinstance(s, TensorSpec) for s in spec)):
        return spec
    return None


class _Retrace(torch.fx.Interpreter):
    """Runs a graph on fake values, recording each node's value under ``prefix + name``."""

    def __init__(self, module: torch.fx.GraphModule, shape_env: ShapeEnv | None, prefix: str,
                 values: dict[str, TracedValue], outputs: FakeOutputs) -> None:
        super().__init__(module)
        self.shape_env = shape_env
        self.prefix = prefix
        self.values = values
        self.outputs = outputs

    def call_function(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.outputs(target, args, kwargs,
                            lambda: super(_Retrace, self).call_function(target, args, kwargs))

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op == "output":
            return super().run_node(n)
        described = control_flow_op(n)
        if described is not None and described.stacks:
            return self._stacked(n, described)
        if carried_spec(n) is not None:
            result, carried = n.meta.get("val"), True
        else:
            result, carried = self._execute(n), False
        self.values[self.prefix + n.name] = TracedValue(n, result, carried)
        if described is not None:
            self._trace_subgraphs(n, described)
        return result

    def _stacked(self, n: torch.fx.Node, described: ControlFlowOp) -> Any:
        """A map or scan node's value from its body's one trace (listed before the body's)."""
        key = self.prefix + n.name
        self.values[key] = TracedValue(n, None, False)
        body = self._trace_subgraphs(n, described)[0]
        result = described.stacked_outputs(self.map_nodes_to_values(n.args, n), body)
        self.values[key] = TracedValue(n, result, False)
        return result

    def _execute(self, n: torch.fx.Node) -> Any:
        try:
            result = super().run_node(n)
        except Exception as error:
            raise UnsupportedOpError(
                f"propagate: re-tracing node {n.name!r} ({n.format_node()}) failed with "
                f"{type(error).__name__}: {error}; if this op has no fake/meta kernel, register "
                "one with torch.library.register_fake") from error
        if self.shape_env is not None:
            rebind_unbacked(self.shape_env, n, result)
        return result

    def _trace_subgraphs(self, n: torch.fx.Node, described: ControlFlowOp) -> list[Any]:
        """Each subgraph's outputs, traced on the node's traced inputs."""
        inputs = described.traced_inputs(self.map_nodes_to_values(n.args, n))
        outputs = []
        for graph_node in described.subgraph_nodes(n):
            submodule = self.fetch_attr(graph_node.target)
            prefix = f"{self.prefix}{graph_node.target}/"
            outputs.append(_Retrace(submodule, self.shape_env, prefix, self.values,
                                    self.outputs).run(*inputs, enable_io_processing=False))
        return outputs


def retrace(program: ExportedProgram) -> dict[str, TracedValue]:
    """Re-trace ``program`` once with fake tensors; map every value name to its traced value.

    Keys are top-level node names and ``"<submodule>/<node>"`` inside subgraphs. The program is
    not modified (no ``node.meta`` is written).
    """
    fake_mode, shape_env = program_shape_env(program)
    if fake_mode is None:
        raise CaptureError("propagate: the program carries no fake values (meta['val']); "
                           "capture it with tp.capture or torch.export.export")
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    inputs = [_placeholder_value(n) for n in placeholders]
    values: dict[str, TracedValue] = {}
    fresh = shape_env.ignore_fresh_unbacked_symbols() if shape_env else contextlib.nullcontext()
    with tracing(fake_mode), fresh:
        _Retrace(program.graph_module, shape_env, "", values,
                 FakeOutputs.shared(fake_mode)).run(*inputs, enable_io_processing=False)
    return values


def _placeholder_value(node: torch.fx.Node) -> Any:
    if "val" not in node.meta:
        raise CaptureError(f"propagate: input {node.name!r} has no traced value (meta['val']); "
                           "capture the model with tp.capture")
    return node.meta["val"]
