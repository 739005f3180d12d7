"""Steps: what each row of the lowering table does to the environment, one builder per ``Kind``.

A step is ``step(env, bindings)``; it reads its arguments from the environment (one slot per
node) and writes its result there. ``build_steps`` returns the steps of one node, each marked
as done once per frame or at every run. Kernels write into the node's planned views, which a
separate step puts in the environment (once per frame when the sizes allow).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from tensorplan.ops.control_flow import ControlFlowOp
from tensorplan.runtime.args import compile_args
from tensorplan.runtime.frames import Env, Step, Views, check_view, check_view_shape
from tensorplan.runtime.lower import Kind, Lowered
from tensorplan.runtime.shapes import Bindings, SymbolicShape
from tensorplan.runtime.unbacked import binder
from tensorplan.specs.spec import TensorSpec

# Runs one subgraph: (inputs, bindings) -> outputs.
SubgraphRun = Callable[[list[Any], Bindings], list[Any]]


@dataclass
class RunStats:
    """What a runner counts while it runs."""

    runs: int = 0                                         # completed runs
    fallbacks: Counter = field(default_factory=Counter)   # op -> functional runs copied in


@dataclass(frozen=True)
class StepContext:
    """What building the steps of one graph reads (``slots`` and ``child`` are per graph)."""

    views: Views                           # planned views in the runner's arena
    constants: Mapping[str, torch.Tensor]  # constant placeholder -> its tensor
    shape_env: Any                         # the program's ShapeEnv (canonical symbols)
    stats: RunStats                        # the runner's counters
    slots: Mapping[torch.fx.Node, int] = field(default_factory=dict)  # node -> its env slot
    child: Callable[[str], SubgraphRun] | None = None  # subgraph attribute -> its run function


Built = list[tuple[Step, bool]]  # (step, done once per frame)


def _constant(node, row, ctx) -> Built:
    slot, constant = ctx.slots[node], ctx.constants[row.name]
    return [(lambda env, b: env.__setitem__(slot, constant), True)]


def _input(node, row, ctx) -> Built:
    slot, name, views = ctx.slots[node], row.name, ctx.views
    return [(lambda env, b: env.__setitem__(slot, views.of(name, None, b)), True)]


def _nothing(node, row, ctx) -> Built:
    return []


def _getitem(node, row, ctx) -> Built:
    slot, source, index = ctx.slots[node], ctx.slots[node.args[0]], node.args[1]

    def pick(env: Env, b: Bindings) -> None:
        env[slot] = env[source][index]
    return [(pick, row.per_frame)]


def _call(node, row, ctx) -> Built:
    slot, build, fn = ctx.slots[node], compile_args(node.args, node.kwargs, ctx.slots), \
        node.target

    def call(env: Env, b: Bindings) -> None:
        args, kwargs = build(env)
        env[slot] = fn(*args, **kwargs)
    return [(call, row.per_frame)]


def _data_dependent(node, row, ctx) -> Built:
    slot, build, op = ctx.slots[node], compile_args(node.args, node.kwargs, ctx.slots), \
        node.target
    bind, fallbacks = binder(node, row.name, ctx.views, ctx.shape_env), ctx.stats.fallbacks
    label, counted = row.target, ctx.views.facts.is_tensor(row.name)

    def call(env: Env, b: Bindings) -> None:
        args, kwargs = build(env)
        env[slot] = bind(op(*args, **kwargs), b)
        if counted:  # its tensor result was computed outside the arena, then copied in
            fallbacks[label] += 1
    return [(call, False)]


def _storage_shift(node: torch.fx.Node, row: Lowered,
                   ctx: StepContext) -> Callable[[Any, Any, Bindings], tuple] | None:
    """For a view given an explicit ``storage_offset`` (``as_strided``): a function of the
    call's (args, kwargs) that adds where the base's storage starts in the arena, since eager
    counts that offset from the base's own storage and here every storage lives in the one
    arena storage."""
    names = [a.name for a in node.target._schema.arguments]
    if "storage_offset" not in names or not isinstance(node.args[0], torch.fx.Node):
        return None
    position = names.index("storage_offset")
    positional = position < len(node.args)
    given = node.args[position] if positional else node.kwargs.get("storage_offset")
    prefix = row.name[:len(row.name) - len(node.name)]
    base_name = prefix + node.args[0].name
    base = ctx.views.facts.specs.get(base_name)
    if given is None or not isinstance(base, TensorSpec) or base.storage is None:
        return None
    def shift(args: Any, kwargs: Any, bindings: Bindings) -> tuple:
        start = ctx.views.storage_start(base, base_name, bindings)
        if positional:
            args = list(args)
            args[position] += start
        else:
            kwargs = {**kwargs, "storage_offset": kwargs["storage_offset"] + start}
        return args, kwargs
    return shift


def _view(node, row, ctx) -> Built:
    slot, build, op = ctx.slots[node], compile_args(node.args, node.kwargs, ctx.slots), \
        node.target
    spec, name, checked = ctx.views.facts.items(row.name)[0], row.name, row.per_frame
    shift = _storage_shift(node, row, ctx)
    traced = (SymbolicShape.of(spec.view_strides)
              if isinstance(spec, TensorSpec) and spec.view_strides is not None else None)
    shape = ctx.views.facts.shapes.get((name, None))

    def view(env: Env, b: Bindings) -> None:
        args, kwargs = build(env)
        if shift:
            args, kwargs = shift(args, kwargs, b)
        env[slot] = result = op(*args, **kwargs)
        if checked and isinstance(spec, TensorSpec) and isinstance(result, torch.Tensor):
            check_view_shape(name, result, op, shape.evaluate(b), b,
                             ctx.views.facts.specs.dim_names)
            check_view(name, result, spec, op, traced.evaluate(b) if traced else None)
    return [(view, row.per_frame)]


def _planned_views(node: torch.fx.Node, row: Lowered, ctx: StepContext) -> tuple[Step, bool]:
    """The step that puts a node's planned output views in the environment."""
    slot, name, views, op = ctx.slots[node], row.name, ctx.views, node.target

    def place(env: Env, b: Bindings) -> None:
        env[slot] = views.outputs(name, op, b)
    return place, row.frame_value


Write = Callable[[Any, list, dict], None]  # (planned out views, args, kwargs) -> None


def _out_of(row: Lowered) -> Callable[[Any, list], Any]:
    """The ``out`` a kernel is given: the planned views, or, for a result written over an
    argument, that argument itself in their first place."""
    over = row.overwrites
    if over is None:
        return lambda views, args: views
    return lambda views, args: (args[over], *views[1:]) if isinstance(views, tuple) \
        else args[over]


def _into_views(writer: Callable[[torch.fx.Node, Lowered, StepContext], Write]):
    """A builder whose kernel writes the node's planned views (placed by a step before it)."""
    def build(node, row, ctx) -> Built:
        slot, args_of = ctx.slots[node], compile_args(node.args, node.kwargs, ctx.slots)
        write, out_of = writer(node, row, ctx), _out_of(row)

        def call(env: Env, b: Bindings) -> None:
            args, kwargs = args_of(env)
            write(out_of(env[slot], args), args, kwargs)
        return [_planned_views(node, row, ctx), (call, False)]
    return build


def _border(node, row, ctx) -> Write:
    """Fill only the border of a pad whose input was made in its interior (concat.py)."""
    def write(out: Any, args: list, kwargs: dict) -> None:
        pads = list(args[1])
        value = args[2] if len(args) > 2 else kwargs.get("value", 0.0)
        for i in range(len(pads) // 2):
            dim, before, after = out.dim() - 1 - i, pads[2 * i], pads[2 * i + 1]
            out.narrow(dim, 0, before).fill_(value)
            out.narrow(dim, out.shape[dim] - after, after).fill_(value)
    return write


def _in_place(node, row, ctx) -> Write:
    twin = row.kernel
    return lambda out, args, kwargs: twin(*args, **kwargs)


def _native(node, row, ctx) -> Write:
    kernel = row.kernel
    return lambda out, args, kwargs: kernel(out, *args, **kwargs)


def _copy_in_place(node, row, ctx) -> Write:
    twin = row.kernel

    def write(out: Any, args: list, kwargs: dict) -> None:
        out.copy_(args[0])
        twin(out, *args[1:], **kwargs)
    return write


def _copy_into(target: Any, result: Any) -> None:
    if isinstance(target, tuple):
        for t, r in zip(target, result, strict=True):
            if t is not None:
                t.copy_(r)
    else:
        target.copy_(result)


def _fallback(node, row, ctx) -> Write:
    op, label, fallbacks = node.target, row.target, ctx.stats.fallbacks

    def write(out: Any, args: list, kwargs: dict) -> None:
        _copy_into(out, op(*args, **kwargs))
        fallbacks[label] += 1
    return write


def _out(node, row, ctx) -> Built:
    slot, variant, out_of = ctx.slots[node], row.kernel, _out_of(row)
    kwargs = {k: v for k, v in node.kwargs.items() if k not in variant.dropped}
    build, op, names = compile_args(node.args, kwargs, ctx.slots), variant.op, variant.out_names
    if len(names) == 1:
        out_name = names[0]

        def call(env: Env, b: Bindings) -> None:
            args, kw = build(env)
            kw[out_name] = out_of(env[slot], args)
            op(*args, **kw)
    else:
        def call(env: Env, b: Bindings) -> None:
            args, kw = build(env)
            kw.update(zip(names, out_of(env[slot], args), strict=True))
            op(*args, **kw)
    return [_planned_views(node, row, ctx), (call, False)]


def _control_flow(node, row, ctx) -> Built:
    described: ControlFlowOp = row.kernel
    slot, build = ctx.slots[node], compile_args(node.args, node.kwargs, ctx.slots)
    children = [ctx.child(sub.target) for sub in described.subgraph_nodes(node)]

    def run(env: Env, b: Bindings, into: Any) -> Any:
        args, _ = build(env)
        return described.run(args, into, lambda k, inputs: children[k](inputs, b))

    if node.meta.get("unbacked_bindings"):
        bind = binder(node, row.name, ctx.views, ctx.shape_env)

        def sized_by_data(env: Env, b: Bindings) -> None:
            env[slot] = bind(run(env, b, None), b)
        return [(sized_by_data, False)]

    def into_views(env: Env, b: Bindings) -> None:
        run(env, b, env[slot])
    return [_planned_views(node, row, ctx), (into_views, False)]


BUILDERS: dict[Kind, Callable[[torch.fx.Node, Lowered, StepContext], Built]] = {
    Kind.CONSTANT: _constant,
    Kind.FOLDED: _constant,
    Kind.FOLDED_AWAY: _nothing,
    Kind.INPUT: _input,
    Kind.STATE: _input,
    Kind.SPECIALISED: _nothing,
    Kind.SUBGRAPH_INPUT: _nothing,
    Kind.SUBGRAPH: _nothing,
    Kind.OUTPUT: _nothing,
    Kind.SUPERSEDED: _nothing,
    Kind.GETITEM: _getitem,
    Kind.SIZES: _call,
    Kind.PLAIN: _call,
    Kind.DATA_DEPENDENT: _data_dependent,
    Kind.VIEW: _view,
    Kind.IN_PLACE: _into_views(_in_place),
    Kind.OUT: _out,
    Kind.NATIVE: _into_views(_native),
    Kind.COPY_IN_PLACE: _into_views(_copy_in_place),
    Kind.FALLBACK: _into_views(_fallback),
    Kind.CONTROL_FLOW: _control_flow,
    Kind.CONCATENATED: lambda node, row, ctx: [_planned_views(node, row, ctx)],
    Kind.PADDED: _into_views(_border),
}


def build_steps(node: torch.fx.Node, row: Lowered, ctx: StepContext) -> Built:
    """The steps of one node, each with whether it is done once per frame."""
    return BUILDERS[row.kind](node, row, ctx)
