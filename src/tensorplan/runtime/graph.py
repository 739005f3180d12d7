"""Running one graph (the top level or a subgraph) out of the arena.

Everything that does not depend on data is resolved once per set of input sizes and cached as a
*frame*: constants, the planned view of every value, and the results of view ops (real views of
their base). A run copies the frame and executes only the kernels, each writing into its planned
view through the op's out-variant. Ops without one compute functionally and are copied into
their view (counted in ``stats``); ops with data-dependent output sizes bind their symbols, check
the planned bound, then copy.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import resolve_unbacked_bindings
from torch.utils import _pytree as pytree

from ..alias import AliasTable
from ..errors import InputError, LayoutError
from ..layout import same_layout
from ..plan import MemoryPlan
from ..schemas import inplace_variant
from ..spec import SpecTable, TensorSpec
from .arena import Arena
from .args import Env, compile_args
from .kernels import NATIVE_INTO, out_variant
from .shapes import Bindings, SymbolicShape

Step = Callable[[Env, Bindings], None]
# Builds the runner of a control-flow node: (node, runner of its graph) -> run(env, bindings, into)
ControlFlowBuilder = Callable[..., Callable[..., Any]]


@dataclass
class RunContext:
    """What every graph runner of one program shares."""

    specs: SpecTable                      # value specs with storage ids
    alias: AliasTable                     # storage sharing
    plan: MemoryPlan                      # storage offsets
    arena: Arena                          # the one arena
    constants: dict[str, torch.Tensor]    # placeholder name -> parameter/buffer/constant
    shape_env: Any                        # the program's ShapeEnv (canonical symbols)
    backed: tuple[sympy.Symbol, ...]      # symbols bound by input sizes, in a fixed order
    fallbacks: Counter = field(default_factory=Counter)  # op name -> functional fallbacks run
    _shapes: dict = field(default_factory=dict)          # (name, index) -> SymbolicShape

    def key(self, bindings: Bindings) -> tuple[int, ...]:
        """The frame-cache key of a set of bindings: the input-bound sizes."""
        return tuple(bindings[s] for s in self.backed)

    def spec_items(self, name: str) -> list[TensorSpec | None]:
        """The specs of a value's outputs (one item for single-output values)."""
        entry = self.specs.get(name)
        return list(entry) if isinstance(entry, tuple) else [entry]

    def shape(self, name: str, index: int | None) -> SymbolicShape:
        """Symbolic shape of a value (``index`` selects the item of a multi-output value)."""
        shape = self._shapes.get((name, index))
        if shape is None:
            spec = self.spec_items(name)[index or 0]
            shape = self._shapes[(name, index)] = SymbolicShape.of(spec.sym_shape)
        return shape

    def resolvable(self, name: str) -> bool:
        """True when every size of the value is known from the input sizes alone."""
        entry = self.specs.get(name)
        if isinstance(entry, tuple):
            shapes = [self.shape(name, i) for i, spec in enumerate(entry) if spec is not None]
        else:
            shapes = [self.shape(name, None)] if isinstance(entry, TensorSpec) else []
        backed = set(self.backed)
        return all(shape.symbols <= backed for shape in shapes)

    def view_for(self, name: str, index: int | None, bindings: Bindings) -> torch.Tensor:
        """The planned out view of a value at its actual size."""
        spec = self.spec_items(name)[index or 0]
        offset = self.plan.storages[spec.storage].offset
        return self.arena.view(offset, spec.dtype, self.shape(name, index).evaluate(bindings),
                               spec.dim_order)

    def check_layout(self, name: str, tensor: torch.Tensor, spec: TensorSpec, op: Any) -> None:
        """Raise ``LayoutError`` when a tensor's memory layout is not the spec's."""
        actual = tuple(tensor.dim_order())
        if not same_layout(tensor.shape, actual, spec.dim_order):
            raise LayoutError(
                f"runtime: node {name!r} ({op}) of shape {tuple(tensor.shape)} {tensor.dtype}: "
                f"memory has dim_order {actual}, the spec says {spec.dim_order}; a kernel would "
                "misread it — report this with the model")


class GraphRunner:
    """Compiled steps of one graph; ``run`` executes them on a cached frame."""

    def __init__(self, module: torch.fx.GraphModule, prefix: str, ctx: RunContext,
                 control_flow: Mapping[Any, ControlFlowBuilder]) -> None:
        self.module, self.prefix, self.ctx = module, prefix, ctx
        self.nodes = list(module.graph.nodes)
        self.slots = {node: i for i, node in enumerate(self.nodes)}
        self.placeholders = [self.slots[n] for n in self.nodes if n.op == "placeholder"]
        self.stable: set[int] = set()        # slots resolved in the frame
        self.frame_steps: list[Step] = []    # build the frame for a set of sizes
        self.run_steps: list[Step] = []      # per run
        self._control_flow_builders = control_flow
        self._frames: dict[tuple, Env] = {}
        for node in self.nodes:
            self._compile(node)
        results = self.nodes[-1].args[0]
        results = (results,) if isinstance(results, torch.fx.Node) else tuple(results)
        self.outputs = compile_args(results, {}, self.slots)

    # --- compilation: one method per node kind ---------------------------------------------
    def _compile(self, node: torch.fx.Node) -> None:
        name = self.prefix + node.name
        if node.op == "placeholder":
            self._placeholder(node, name)
        elif node.op == "call_function" and node.target is operator.getitem:
            self._getitem(node)
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            self._op(node, name)
        elif node.op == "call_function" and node.target in self._control_flow_builders:
            self._control_flow(node, name)
        elif node.op == "call_function":
            self._plain_call(node, name)
        elif node.op in ("get_attr", "output"):
            return
        else:
            raise InputError(f"runtime: node {name!r} of kind {node.op!r} cannot run")

    def _placeholder(self, node: torch.fx.Node, name: str) -> None:
        slot = self.slots[node]
        if self.prefix:
            return  # bound to the parent's tensors at each call
        self.stable.add(slot)
        if name in self.ctx.constants:
            constant = self.ctx.constants[name]
            self.frame_steps.append(lambda env, b: env.__setitem__(slot, constant))
        elif isinstance(self.ctx.specs.get(name), TensorSpec):
            self.frame_steps.append(
                lambda env, b: env.__setitem__(slot, self.ctx.view_for(name, None, b)))

    def _is_stable(self, node: torch.fx.Node) -> bool:
        return all(self.slots[n] in self.stable for n in node.all_input_nodes)

    def _resolvable(self, name: str) -> bool:
        return self.ctx.resolvable(name)

    def _getitem(self, node: torch.fx.Node) -> None:
        slot, source, index = self.slots[node], self.slots[node.args[0]], node.args[1]

        def pick(env: Env, b: Bindings) -> None:
            env[slot] = env[source][index]
        self._place(node, pick, stable=source in self.stable)

    def _place(self, node: torch.fx.Node, step: Step, stable: bool) -> None:
        if stable:
            self.stable.add(self.slots[node])
            self.frame_steps.append(step)
        else:
            self.run_steps.append(step)

    def _plain_call(self, node: torch.fx.Node, name: str) -> None:
        slot, build, fn = self.slots[node], compile_args(node.args, node.kwargs, self.slots), \
            node.target

        def call(env: Env, b: Bindings) -> None:
            args, kwargs = build(env)
            env[slot] = fn(*args, **kwargs)
        self._place(node, call, stable=self._is_stable(node) and self._sizes_only(node))

    def _sizes_only(self, node: torch.fx.Node) -> bool:
        """True when a call's result follows from the input sizes alone (so it is computed once
        per frame): an op that returns sizes, or a Python operator on non-tensor values."""
        if isinstance(node.target, torch._ops.OpOverload):
            return _returns_sizes(node.target)
        return not any(isinstance(self.ctx.specs.get(self.prefix + n.name), (TensorSpec, tuple))
                       for n in node.all_input_nodes)

    def _op(self, node: torch.fx.Node, name: str) -> None:
        op, items = node.target, self.ctx.spec_items(name)
        if node.meta.get("unbacked_bindings"):
            return self._data_dependent(node, name)
        if all(spec is None for spec in items) or not op._schema.returns:
            return self._plain_call(node, name)
        if _is_view(op):
            return self._view(node, name)
        self._prepare_outputs(node, name)
        inplace = self._inplace_argument(node, name)
        if inplace is not None:
            return self._inplace(node, name, inplace)
        variant = out_variant(op)
        if variant is not None and not variant.generated:
            return self._out_call(node, name, variant)
        if op in NATIVE_INTO:
            return self._native_into(node, NATIVE_INTO[op])
        if self._copy_then_inplace_applies(node, name):
            return self._copy_then_inplace(node)
        return self._fallback(node, name)

    def _view(self, node: torch.fx.Node, name: str) -> None:
        slot, build, op = self.slots[node], compile_args(node.args, node.kwargs, self.slots), \
            node.target
        spec = self.ctx.spec_items(name)[0]
        stable = self._is_stable(node) and self._resolvable(name)
        shift = self._storage_shift(node)

        def view(env: Env, b: Bindings) -> None:
            args, kwargs = build(env)
            if shift:
                args, kwargs = shift(args, kwargs)
            env[slot] = result = op(*args, **kwargs)
            if stable and isinstance(spec, TensorSpec) and isinstance(result, torch.Tensor):
                self.ctx.check_layout(name, result, spec, op)
        self._place(node, view, stable)

    def _storage_shift(self, node: torch.fx.Node) -> Callable[[Any, Any], tuple] | None:
        """For a view given an explicit ``storage_offset`` (``as_strided``): a function of the
        call's (args, kwargs) that adds where the base's storage starts in the arena, since
        eager counts that offset from the base's own storage and here every storage lives in
        the one arena storage."""
        op = node.target
        names = [a.name for a in op._schema.arguments] if isinstance(op, torch._ops.OpOverload) \
            else []
        if "storage_offset" not in names or not isinstance(node.args[0], torch.fx.Node):
            return None
        position = names.index("storage_offset")
        positional = position < len(node.args)
        given = node.args[position] if positional else node.kwargs.get("storage_offset")
        base = self.ctx.specs.get(self.prefix + node.args[0].name)
        if given is None or not isinstance(base, TensorSpec) or base.storage is None:
            return None
        start = self.ctx.plan.storages[base.storage].offset // base.dtype.itemsize

        def shift(args: Any, kwargs: Any) -> tuple:
            if positional:
                args = list(args)
                args[position] += start
            else:
                kwargs = {**kwargs, "storage_offset": kwargs["storage_offset"] + start}
            return args, kwargs
        return shift

    def _prepare_outputs(self, node: torch.fx.Node, name: str) -> None:
        """Put the node's planned out views in the frame (or make them per run)."""
        slot, ctx = self.slots[node], self.ctx
        multi = isinstance(ctx.specs.get(name), tuple)

        def views(env: Env, b: Bindings) -> None:
            made = [None if spec is None else ctx.view_for(name, i if multi else None, b)
                    for i, spec in enumerate(ctx.spec_items(name))]
            for view, spec in zip(made, ctx.spec_items(name), strict=True):
                if view is not None:
                    ctx.check_layout(name, view, spec, node.target)
            env[slot] = tuple(made) if multi else made[0]
        self._place(node, views, stable=self._resolvable(name))

    def _inplace_argument(self, node: torch.fx.Node, name: str) -> int | None:
        """Index of the argument whose storage this node's output shares (new state), if any."""
        target = self.ctx.spec_items(name)[0]
        for i, arg in enumerate(node.args):
            if isinstance(arg, torch.fx.Node):
                spec = self.ctx.specs.get(self.prefix + arg.name)
                if isinstance(spec, TensorSpec) and target is not None and \
                        spec.storage is not None and spec.storage == target.storage:
                    return i
        return None

    def _inplace(self, node: torch.fx.Node, name: str, argument: int) -> None:
        twin = inplace_variant(node.target)
        if twin is None or argument != 0:
            return self._fallback(node, name)
        build = compile_args(node.args, node.kwargs, self.slots)

        def call(env: Env, b: Bindings) -> None:
            args, kwargs = build(env)
            twin(*args, **kwargs)
        self.run_steps.append(call)

    def _copy_then_inplace_applies(self, node: torch.fx.Node, name: str) -> bool:
        """True when ``op(self, ...)`` can be computed as ``out.copy_(self); op_(out, ...)``: the
        op has an in-place twin and its one output has the shape and dtype of ``self``."""
        items = self.ctx.spec_items(name)
        source = node.args[0] if node.args else None
        base = self.ctx.specs.get(self.prefix + source.name) \
            if isinstance(source, torch.fx.Node) else None
        return (inplace_variant(node.target) is not None and len(items) == 1
                and isinstance(base, TensorSpec) and isinstance(items[0], TensorSpec)
                and base.sym_shape == items[0].sym_shape and base.dtype == items[0].dtype)

    def _native_into(self, node: torch.fx.Node, kernel: Callable[..., None]) -> None:
        slot, build = self.slots[node], compile_args(node.args, node.kwargs, self.slots)

        def call(env: Env, b: Bindings) -> None:
            args, kwargs = build(env)
            kernel(env[slot], *args, **kwargs)
        self.run_steps.append(call)

    def _copy_then_inplace(self, node: torch.fx.Node) -> None:
        slot, twin = self.slots[node], inplace_variant(node.target)
        build = compile_args(node.args, node.kwargs, self.slots)

        def call(env: Env, b: Bindings) -> None:
            args, kwargs = build(env)
            out = env[slot]
            out.copy_(args[0])
            twin(out, *args[1:], **kwargs)
        self.run_steps.append(call)

    def _out_call(self, node: torch.fx.Node, name: str, variant) -> None:
        slot = self.slots[node]
        kwargs = {k: v for k, v in node.kwargs.items() if k not in variant.dropped}
        build, op, names = compile_args(node.args, kwargs, self.slots), variant.op, \
            variant.out_names
        if len(names) == 1:
            out_name = names[0]

            def call(env: Env, b: Bindings) -> None:
                args, kw = build(env)
                kw[out_name] = env[slot]
                op(*args, **kw)
        else:
            def call(env: Env, b: Bindings) -> None:
                args, kw = build(env)
                kw.update(zip(names, env[slot], strict=True))
                op(*args, **kw)
        self.run_steps.append(call)

    def _fallback(self, node: torch.fx.Node, name: str) -> None:
        slot, build, op = self.slots[node], compile_args(node.args, node.kwargs, self.slots), \
            node.target
        label, fallbacks = str(op), self.ctx.fallbacks

        def call(env: Env, b: Bindings) -> None:
            args, kwargs = build(env)
            _copy_into(env[slot], op(*args, **kwargs))
            fallbacks[label] += 1
        self.run_steps.append(call)

    def _data_dependent(self, node: torch.fx.Node, name: str) -> None:
        slot, build, op = self.slots[node], compile_args(node.args, node.kwargs, self.slots), \
            node.target
        bind = self._binder(node, name)
        label, fallbacks = str(op), self.ctx.fallbacks
        counted = isinstance(self.ctx.specs.get(name), (TensorSpec, tuple))

        def call(env: Env, b: Bindings) -> None:
            args, kwargs = build(env)
            env[slot] = bind(op(*args, **kwargs), b)
            if counted:  # its tensor result was computed outside the arena, then copied in
                fallbacks[label] += 1
        self.run_steps.append(call)

    def _control_flow(self, node: torch.fx.Node, name: str) -> None:
        run_hop = self._control_flow_builders[node.target](node, self)
        if node.meta.get("unbacked_bindings"):
            slot, bind = self.slots[node], self._binder(node, name)

            def call(env: Env, b: Bindings) -> None:
                env[slot] = bind(run_hop(env, b, into=None), b)
            self.run_steps.append(call)
            return
        self._prepare_outputs(node, name)
        self.run_steps.append(lambda env, b: run_hop(env, b, into=env[self.slots[node]]))

    def _binder(self, node: torch.fx.Node, name: str) -> Callable[[Any, Bindings], Any]:
        """Binds the node's unbacked symbols from its result, checks bounds, copies to views."""
        shape_env = self.ctx.shape_env
        bindings = resolve_unbacked_bindings(shape_env, node.meta["unbacked_bindings"]) or {}
        ctx = self.ctx
        multi = isinstance(ctx.specs.get(name), tuple)

        def bind(result: Any, b: Bindings) -> Any:
            for symbol, path in bindings.items():
                b[_canonical_symbol(shape_env, symbol)] = int(pytree.key_get(result, path))
            if not isinstance(ctx.specs.get(name), (TensorSpec, tuple)):
                return result
            items = list(result) if multi else [result]
            placed = []
            for i, (value, spec) in enumerate(zip(items, ctx.spec_items(name), strict=True)):
                if spec is None:
                    placed.append(value)
                    continue
                _check_bound(name, node.target, value, spec)
                view = ctx.view_for(name, i if multi else None, b)
                view.copy_(value)
                placed.append(view)
            return tuple(placed) if multi else placed[0]
        return bind

    def child(self, attribute: str) -> GraphRunner:
        """The runner of a subgraph held in attribute ``attribute`` of this graph's module."""
        return GraphRunner(getattr(self.module, attribute), f"{self.prefix}{attribute}/",
                           self.ctx, self._control_flow_builders)

    # --- running -------------------------------------------------------------------------
    def frame(self, bindings: Bindings) -> Env:
        """The cached environment for these input sizes."""
        key = self.ctx.key(bindings)
        frame = self._frames.get(key)
        if frame is None:
            frame = [None] * len(self.nodes)
            for step in self.frame_steps:
                step(frame, bindings)
            self._frames[key] = frame
        return frame

    def run(self, inputs: list[Any], bindings: Bindings) -> list[Any]:
        """Execute the graph with ``inputs`` bound to its placeholders; return its outputs.

        Top-level inputs are not bound here: the executor copies them into their planned views.
        """
        env = list(self.frame(bindings))
        if self.prefix:
            for slot, value in zip(self.placeholders, inputs, strict=True):
                env[slot] = value
        for step in self.run_steps:
            step(env, bindings)
        return list(self.outputs(env)[0])


# Return types of ops that report sizes (``sym_size``, ``sym_numel``, ``sym_stride``).
_SIZE_TYPES = frozenset({"SymInt", "int", "SymInt[]", "int[]"})


def _returns_sizes(op: Any) -> bool:
    """True for ops whose result is sizes, which follow from the input sizes alone."""
    returns = op._schema.returns
    return bool(returns) and all(str(r.type) in _SIZE_TYPES for r in returns)


def _is_view(op: torch._ops.OpOverload) -> bool:
    returns = op._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write
                                 for r in returns)


def _copy_into(target: Any, result: Any) -> None:
    if isinstance(target, tuple):
        for t, r in zip(target, result, strict=True):
            if t is not None:
                t.copy_(r)
    else:
        target.copy_(result)


def _canonical_symbol(shape_env, symbol: sympy.Symbol) -> sympy.Symbol:
    replaced = shape_env.replace(symbol) if shape_env is not None else symbol
    return replaced if replaced.is_Symbol else symbol


def _check_bound(name: str, op: Any, value: torch.Tensor, spec: TensorSpec) -> None:
    if any(actual > bound for actual, bound in zip(value.shape, spec.shape, strict=True)):
        raise InputError(
            f"runtime: node {name!r} ({op}) produced shape {tuple(value.shape)}, above its "
            f"planned upper bound {spec.shape}; recompile with a larger bound "
            "(torch._check on the size, or a larger Dim max)")
