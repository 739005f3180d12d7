"""The control-flow operators, each described once: ``cond``, ``while_loop``, ``map``, ``scan``.

A description says which node arguments are subgraphs, which argument lists every subgraph is
called with, how the node's outputs come from its subgraphs' outputs, and how the op runs. The
trace reads it to re-trace the subgraphs, alias analysis to give subgraph inputs their parent
storages, liveness to reserve the node's region, and the runtime to run the node. Adding a
control-flow op means adding one ``ControlFlowOp`` to ``CONTROL_FLOW_OPS``.

Worked example: ``cond(pred, true_fn, false_fn, (x, y))`` has subgraphs at positions 1 and 2,
both called with the operand list at position 3; its outputs are the taken branch's outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from tensorplan.errors import UnsupportedOpError

# Runs subgraph ``k`` of a node (its k-th entry in ``ControlFlowOp.subgraphs``) on inputs.
CallSubgraph = Callable[[int, list[Any]], list[Any]]


@dataclass(frozen=True)
class OperandList:
    """One argument of a control-flow node that holds a list of operands of its subgraphs."""

    position: int          # index of the argument in ``node.args``
    sliced: bool = False   # each subgraph call sees one slice along dim 0 (``map``/``scan`` xs)
    carried: bool = False  # loop-carried: it lives in the node's first outputs across iterations


@dataclass(frozen=True)
class ControlFlowOp:
    """How one control-flow operator calls its subgraphs and runs."""

    name: str                          # short name, as in error messages
    subgraphs: tuple[int, ...]         # argument positions that hold subgraphs (get_attr nodes)
    operands: tuple[OperandList, ...]  # what every subgraph is called with, concatenated
    outputs: str                       # how the node's outputs follow from its subgraphs'
    run: Callable[[Sequence[Any], Any, CallSubgraph], Any]  # (args, planned outputs, call)
    sized_by_data: bool = False        # its outputs may have data-dependent sizes (no views)
    stacks: bool = False               # its outputs: the carried values, then the body's stacked

    def traced_inputs(self, args: Sequence[Any]) -> list[Any]:
        """The values a subgraph is traced with, from the node's traced arguments (one slice
        of every sliced operand; loop-carried values at their initial value)."""
        inputs: list[Any] = []
        for operand in self.operands:
            values = list(args[operand.position])
            inputs += [v.select(0, 0) for v in values] if operand.sliced else values
        return inputs

    def input_storages(self, args: Sequence[Any], outputs: Sequence[Any]) -> list[Any]:
        """The storages a subgraph's inputs live in, from the storages of the node's arguments
        and outputs: loop-carried inputs live in the node's first outputs, a slice lives in its
        operand's storage."""
        inputs: list[Any] = []
        for operand in self.operands:
            values = list(args[operand.position])
            inputs += list(outputs[:len(values)]) if operand.carried else values
        return inputs

    def stacked_outputs(self, args: Sequence[Any], body: Sequence[Any]) -> tuple[Any, ...]:
        """The node's outputs from one traced call of its body (an op that ``stacks``: map,
        scan): the carried values as the body returns them, then each other output with a new
        dim 0 as long as the sliced operands, contiguous, as the operators' fake kernels make
        them (without tracing the body a second time)."""
        carried = sum(len(args[o.position]) for o in self.operands if o.carried)
        sliced = next(o for o in self.operands if o.sliced)
        length = args[sliced.position][0].shape[0]
        return (*body[:carried], *(y.new_empty((length, *y.shape)) for y in body[carried:]))

    def subgraph_nodes(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        """The ``get_attr`` nodes naming the node's subgraphs, in ``subgraphs`` order."""
        return [node.args[position] for position in self.subgraphs]


def control_flow_op(node: torch.fx.Node) -> ControlFlowOp | None:
    """The description of a control-flow node, or None for any other node."""
    if node.op != "call_function":
        return None
    return CONTROL_FLOW_OPS.get(node.target)


def graph_modules(module: torch.fx.GraphModule, prefix: str = ""
                  ) -> Iterator[tuple[torch.fx.GraphModule, str]]:
    """The module and every control-flow subgraph module inside it, depth first, each with
    its value-name prefix (``""`` at the top, ``"<submodule>/"`` inside)."""
    yield module, prefix
    for node in module.graph.nodes:
        described = control_flow_op(node)
        for sub in described.subgraph_nodes(node) if described is not None else ():
            yield from graph_modules(getattr(module, sub.target), f"{prefix}{sub.target}/")


def _span(t: torch.Tensor) -> tuple[int, int]:
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    extent = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
    return t.data_ptr(), t.data_ptr() + (extent + 1) * t.element_size()


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def assign(targets: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> None:
    """Copy ``values`` into ``targets`` as one parallel assignment: a value whose memory
    overlaps any target is staged first, so ``a, b = b, a`` holds."""
    staged = [v.clone() if any(_overlaps(v, t) for t in targets) else v for v in values]
    for target, value in zip(targets, staged, strict=True):
        target.copy_(value)


def _planned(name: str, into: Any) -> Any:
    if into is None:
        raise UnsupportedOpError(f"runtime: a {name} node has outputs whose size depends on "
                                 "the data; only cond supports that")
    return into


def _run_cond(args: Sequence[Any], into: Any, call: CallSubgraph) -> Any:
    outputs = call(0 if bool(args[0]) else 1, list(args[3]))
    if into is None:
        return tuple(outputs)
    assign(into, outputs)
    return into


def _run_while_loop(args: Sequence[Any], into: Any, call: CallSubgraph) -> Any:
    carried, extra = _planned("while_loop", into), list(args[3])
    assign(carried, args[2])
    while bool(call(0, [*carried, *extra])[0]):
        assign(carried, call(1, [*carried, *extra]))
    return carried


def _run_map(args: Sequence[Any], into: Any, call: CallSubgraph) -> Any:
    stacked, xs, extra = _planned("map", into), list(args[1]), list(args[2])
    for i in range(xs[0].shape[0]):
        for target, value in zip(stacked, call(0, [x[i] for x in xs] + extra), strict=True):
            target[i].copy_(value)
    return stacked


def _run_scan(args: Sequence[Any], into: Any, call: CallSubgraph) -> Any:
    init, xs, extra = list(args[1]), list(args[2]), list(args[3])
    outputs = _planned("scan", into)
    carry, ys = outputs[:len(init)], outputs[len(init):]
    assign(carry, init)
    for i in range(xs[0].shape[0]):
        results = call(0, [*carry, *[x[i] for x in xs], *extra])
        for target, value in zip(ys, results[len(init):], strict=True):
            target[i].copy_(value)
        assign(carry, results[:len(init)])
    return outputs


_HOP = torch.ops.higher_order

CONTROL_FLOW_OPS: dict[Any, ControlFlowOp] = {
    _HOP.cond: ControlFlowOp(
        "cond", subgraphs=(1, 2), operands=(OperandList(3),),
        outputs="the outputs of the branch taken", run=_run_cond, sized_by_data=True),
    _HOP.while_loop: ControlFlowOp(
        "while_loop", subgraphs=(0, 1), operands=(OperandList(2, carried=True), OperandList(3)),
        outputs="the carried values once the condition (subgraph 0) is false; the body "
                "(subgraph 1) returns the next carried values", run=_run_while_loop),
    _HOP.map_impl: ControlFlowOp(
        "map", subgraphs=(0,), operands=(OperandList(1, sliced=True), OperandList(2)),
        outputs="the body's outputs for every slice, stacked along dim 0", run=_run_map,
        stacks=True),
    _HOP.scan: ControlFlowOp(
        "scan", subgraphs=(0,),
        operands=(OperandList(1, carried=True), OperandList(2, sliced=True), OperandList(3)),
        outputs="the final carry, then the body's other outputs stacked along dim 0",
        run=_run_scan, stacks=True),
}
