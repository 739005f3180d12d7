"""Running ``cond``, ``while_loop``, ``map`` and ``scan``: each subgraph runs inside the region
its node reserved, and results are copied into the node's planned output views."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from ..errors import UnsupportedOpError
from .args import Env, compile_args
from .graph import GraphRunner
from .shapes import Bindings

RunHop = Callable[..., Any]


def _span(t: torch.Tensor) -> tuple[int, int]:
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    extent = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
    return t.data_ptr(), t.data_ptr() + (extent + 1) * t.element_size()


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def assign(targets: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> None:
    """Copy ``values`` into ``targets``; values that overlap a target are staged first."""
    staged = [v.clone() if any(_overlaps(v, t) for t in targets) else v for v in values]
    for target, value in zip(targets, staged, strict=True):
        target.copy_(value)


def _needs_views(node: torch.fx.Node, into: Any) -> tuple:
    if into is None:
        raise UnsupportedOpError(f"runtime: {node.name!r} ({node.target}) has outputs whose size "
                                 "depends on the data; only cond supports that")
    return into


def _cond(node: torch.fx.Node, runner: GraphRunner) -> RunHop:
    branches = (runner.child(node.args[1].target), runner.child(node.args[2].target))
    build = compile_args(node.args, node.kwargs, runner.slots)

    def run(env: Env, bindings: Bindings, into: Any) -> Any:
        args, _ = build(env)
        branch = branches[0] if bool(args[0]) else branches[1]
        outputs = branch.run(list(args[3]), bindings)
        if into is None:
            return tuple(outputs)
        assign(into, outputs)
        return into
    return run


def _while_loop(node: torch.fx.Node, runner: GraphRunner) -> RunHop:
    condition, body = runner.child(node.args[0].target), runner.child(node.args[1].target)
    build = compile_args(node.args, node.kwargs, runner.slots)

    def run(env: Env, bindings: Bindings, into: Any) -> Any:
        args, _ = build(env)
        carried, extra = _needs_views(node, into), list(args[3])
        assign(carried, args[2])
        while bool(condition.run([*carried, *extra], bindings)[0]):
            assign(carried, body.run([*carried, *extra], bindings))
        return carried
    return run


def _map(node: torch.fx.Node, runner: GraphRunner) -> RunHop:
    body = runner.child(node.args[0].target)
    build = compile_args(node.args, node.kwargs, runner.slots)

    def run(env: Env, bindings: Bindings, into: Any) -> Any:
        args, _ = build(env)
        stacked, xs, extra = _needs_views(node, into), list(args[1]), list(args[2])
        for i in range(xs[0].shape[0]):
            outputs = body.run([x[i] for x in xs] + extra, bindings)
            for target, value in zip(stacked, outputs, strict=True):
                target[i].copy_(value)
        return stacked
    return run


def _scan(node: torch.fx.Node, runner: GraphRunner) -> RunHop:
    body = runner.child(node.args[0].target)
    build = compile_args(node.args, node.kwargs, runner.slots)

    def run(env: Env, bindings: Bindings, into: Any) -> Any:
        args, _ = build(env)
        init, xs, extra = list(args[1]), list(args[2]), list(args[3])
        outputs = _needs_views(node, into)
        carry, ys = outputs[:len(init)], outputs[len(init):]
        assign(carry, init)
        for i in range(xs[0].shape[0]):
            results = body.run([*carry, *[x[i] for x in xs], *extra], bindings)
            for target, value in zip(ys, results[len(init):], strict=True):
                target[i].copy_(value)
            assign(carry, results[:len(init)])
        return outputs
    return run


# Control-flow operator -> builder of its runner.
CONTROL_FLOW = {
    torch.ops.higher_order.cond: _cond,
    torch.ops.higher_order.while_loop: _while_loop,
    torch.ops.higher_order.map_impl: _map,
    torch.ops.higher_order.scan: _scan,
}
