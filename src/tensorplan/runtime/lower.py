"""Lowering: how every node of a planned program runs, decided once, as an inspectable table.

``lower_graph`` walks one graph and gives each node a ``Lowered`` row: its ``Kind`` (the rung of
the ladder below that it takes) and whether it runs once per set of input sizes (in the cached
frame) or at every run. It reads only the program, the specs and the roles, so the table can be
printed (``tensorplan run --explain``) without running anything. ``steps.py`` turns rows into
steps.

The ladder, first match wins, for an ATen op:
data-dependent sizes → no tensor result (plain call) → view → writes an input's storage
(in-place twin) → native out-variant → small native kernel → copy + in-place twin → functional
fallback (computed outside the arena, then copied in; counted in ``RunStats``).

Worked example, ``y = (x + 1).view(-1)`` with a static ``x``::

    x       placeholder         input      frame
    add     aten.add.Tensor     out        run
    view    aten.view.default   view       frame
    output  output              output     run
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx

from tensorplan.analysis.alias import Slice
from tensorplan.analysis.liveness import scheduled_nodes
from tensorplan.errors import UnsupportedOpError
from tensorplan.frontend.roles import Role, Roles
from tensorplan.ops.control_flow import control_flow_op, graph_modules
from tensorplan.ops.schemas import inplace_variant, is_view, returns_sizes
from tensorplan.runtime.kernels import NATIVE_INTO, out_variant
from tensorplan.runtime.shapes import SymbolicShape, canonical
from tensorplan.schedule.concat import PLACING_OPS
from tensorplan.schedule.fold import NOTHING_FOLDED, Folded
from tensorplan.specs.spec import SpecTable, TensorSpec


class Kind(enum.Enum):
    """How one node runs."""

    CONSTANT = "constant"            # a parameter, buffer or lifted constant, bound once
    FOLDED = "folded"                # computed at compile time (fold.py), bound once
    FOLDED_AWAY = "folded away"      # computed at compile time, read only by folded values
    INPUT = "input"                  # a planned view the caller's tensor is copied into
    STATE = "state"                  # a planned view holding a mutated buffer across runs
    SPECIALISED = "specialised"      # a non-tensor input the program was specialised to
    SUBGRAPH_INPUT = "subgraph input"  # bound to the caller's values at every subgraph call
    SUBGRAPH = "subgraph"            # a get_attr naming a subgraph: nothing to run
    GETITEM = "getitem"              # picks one item of a multi-output value
    SIZES = "sizes"                  # computes sizes or Python values from sizes alone
    PLAIN = "plain"                  # a call whose result is not planned (no tensor output)
    SUPERSEDED = "superseded"        # torch's range assert below a data-dependent size's
    #                                  planned bound (limits.py): the bound check replaces it
    DATA_DEPENDENT = "data-dependent"  # output sizes known only after it runs: bound, copied in
    VIEW = "view"                    # a real view of its base's planned memory
    IN_PLACE = "in-place"            # writes its result over an argument's storage (twin op)
    OUT = "out"                      # the op's native out-variant writes the planned view
    NATIVE = "native"                # a small native kernel (copy_, fill_, index_select)
    COPY_IN_PLACE = "copy+in-place"  # out.copy_(self), then the in-place twin on out
    FALLBACK = "fallback"            # functional op, then copied into the planned view
    CONCATENATED = "in slices"       # its inputs were made in slices of it (concat.py)
    PADDED = "border"                # its input was made in its interior; writes the border
    CONTROL_FLOW = "control-flow"    # runs its subgraphs (control_flow.py)
    OUTPUT = "output"                # the graph's results


@dataclass(frozen=True)
class Lowered:
    """One row of the lowering table: how one node runs."""

    name: str              # value name (``"<submodule>/<node>"`` inside subgraphs)
    target: str            # what the node calls, as text (``aten.add.Tensor``, ``placeholder``)
    kind: Kind             # the rung of the ladder it takes
    per_frame: bool        # all its work is done once per set of input sizes, none per run
    frame_value: bool      # its value (a result, or its planned output views) is in the frame
    kernel: Any = None     # what its step calls: out-variant, in-place twin, native kernel,
    #                        or control-flow description (None where the kind says it all)
    overwrites: int | None = None  # the argument (position) its result is written over, given
    #                        to the kernel as ``out`` itself (reuse.py), or None


# Kinds whose kernel writes the node's planned output views (put in the frame when the sizes
# follow from the input sizes).
WRITES_PLANNED_VIEWS = frozenset({Kind.IN_PLACE, Kind.OUT, Kind.NATIVE, Kind.COPY_IN_PLACE,
                                  Kind.FALLBACK, Kind.CONTROL_FLOW, Kind.CONCATENATED,
                                  Kind.PADDED})


@dataclass(frozen=True)
class ProgramFacts:
    """What lowering reads about a planned program: specs, roles and the symbols the input
    sizes bind."""

    specs: SpecTable                                  # specs with storage ids
    roles: Roles                                      # placeholder roles
    shapes: Mapping[tuple[str, int | None], SymbolicShape]  # (value, item) -> symbolic shape
    symbols: Mapping[str, frozenset[sympy.Symbol]]    # value -> free symbols of its sizes
    backed: tuple[sympy.Symbol, ...]                  # symbols bound by input sizes, sorted
    folded: Folded                                    # values computed at compile time
    slices: Mapping[str, Slice]                       # value -> its slice of a concatenation

    @classmethod
    def of(cls, specs: SpecTable, roles: Roles, folded: Folded = NOTHING_FOLDED,
           slices: Mapping[str, Slice] | None = None) -> ProgramFacts:
        """The facts of a planned program (``slices``: the alias table's)."""
        shapes: dict[tuple[str, int | None], SymbolicShape] = {}
        symbols: dict[str, frozenset[sympy.Symbol]] = {}
        for name, entry in specs.items():
            if isinstance(entry, TensorSpec):
                shapes[(name, None)] = SymbolicShape.of(entry.sym_shape)
            elif isinstance(entry, tuple):
                shapes.update({(name, i): SymbolicShape.of(s.sym_shape)
                               for i, s in enumerate(entry) if s is not None})
        for (name, _), shape in shapes.items():
            symbols[name] = symbols.get(name, frozenset()) | shape.symbols
        backed = {s for name in roles.user_inputs for s in symbols.get(name, ())}
        return cls(specs, roles, shapes, symbols, tuple(sorted(backed, key=str)), folded,
                   dict(slices or {}))

    def items(self, name: str) -> list[TensorSpec | None]:
        """The specs of a value's outputs (one item for single-output values)."""
        entry = self.specs.get(name)
        return list(entry) if isinstance(entry, tuple) else [entry]

    def is_tensor(self, name: str) -> bool:
        """True when the value is a tensor or holds tensors."""
        return isinstance(self.specs.get(name), (TensorSpec, tuple))

    def resolvable(self, name: str) -> bool:
        """True when every size of the value follows from the input sizes alone."""
        return self.symbols.get(name, frozenset()) <= set(self.backed)


def _target(node: torch.fx.Node) -> str:
    if node.op in ("placeholder", "output", "get_attr"):
        return node.op
    target = node.target
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(
        target, "__name__", str(target))


def _writes_argument(node: torch.fx.Node, prefix: str, facts: ProgramFacts) -> int | None:
    """Index of the argument whose bytes the node's output takes over, if any: the same
    storage at the same place in it (two inputs of a concatenation in place share a storage,
    each in its own slice)."""
    name = prefix + node.name
    target = facts.items(name)[0]
    if target is None or target.storage is None:
        return None
    for i, arg in enumerate(node.args):
        if isinstance(arg, torch.fx.Node):
            spec = facts.specs.get(prefix + arg.name)
            if isinstance(spec, TensorSpec) and spec.storage == target.storage \
                    and facts.slices.get(prefix + arg.name) == facts.slices.get(name):
                return i
    return None


def _is_empty(entry: object) -> bool:
    return isinstance(entry, TensorSpec) and entry.is_empty


def _made_in_place(node: torch.fx.Node, prefix: str, facts: ProgramFacts) -> bool:
    """A ``cat`` (or pad) every tensor input of which that holds elements already lives in a
    slice of the node's output storage: the result is there once they are made (a
    concatenation in place). Other ops whose inputs share that storage still run: YOLO's SPPF
    pools each slice of its ``cat`` into the next."""
    if node.target not in PLACING_OPS:
        return False
    name = prefix + node.name
    inputs = [n for n in node.all_input_nodes if facts.is_tensor(prefix + n.name)
              and not _is_empty(facts.specs.get(prefix + n.name))]
    target = facts.items(name)[0]
    return bool(inputs) and target is not None and name not in facts.slices and all(
        prefix + n.name in facts.slices and facts.specs.get(prefix + n.name).storage
        == target.storage for n in inputs)


def _copy_then_in_place(node: torch.fx.Node, prefix: str, facts: ProgramFacts) -> bool:
    """True when ``op(self, ...)`` can run as ``out.copy_(self); op_(out, ...)``: the op has an
    in-place twin and its one output has the shape and dtype of ``self``."""
    items = facts.items(prefix + node.name)
    source = node.args[0] if node.args else None
    base = facts.specs.get(prefix + source.name) if isinstance(source, torch.fx.Node) else None
    return (inplace_variant(node.target) is not None and len(items) == 1
            and isinstance(base, TensorSpec) and isinstance(items[0], TensorSpec)
            and base.sym_shape == items[0].sym_shape and base.dtype == items[0].dtype)


def _size_fixed_by_export(op: torch._ops.OpOverload, name: str, facts: ProgramFacts) -> bool:
    """A data-dependent op whose output size export replaced by a number it assumed from a
    later use (``masked_select(...).expand(3)``): it runs as data-dependent, so that its
    result is checked against that number rather than trusted."""
    return torch.Tag.dynamic_output_shape in op.tags and any(
        isinstance(size, torch.SymInt) and isinstance(canonical(size), int)
        for spec in facts.items(name) if spec is not None for size in spec.sym_shape)


def _lower_op(node: torch.fx.Node, prefix: str, facts: ProgramFacts,
              inputs_per_frame: bool) -> tuple:
    """(kind, per_frame, kernel[, overwritten argument]) of an ATen op node."""
    op, name = node.target, prefix + node.name
    if node.meta.get("unbacked_bindings") or _size_fixed_by_export(op, name, facts):
        return Kind.DATA_DEPENDENT, False, None
    if all(s is None for s in facts.items(name)) or not op._schema.returns:
        if returns_sizes(op):
            return Kind.SIZES, inputs_per_frame, None
        return Kind.PLAIN, False, None
    if is_view(op):
        return Kind.VIEW, inputs_per_frame and facts.resolvable(name), None
    if _made_in_place(node, prefix, facts):
        if op is torch.ops.aten.constant_pad_nd.default:
            return Kind.PADDED, False, None
        return Kind.CONCATENATED, False, None
    written = _writes_argument(node, prefix, facts)
    if written is not None:
        return (*_lower_written(op, written), written)
    variant = out_variant(op)
    if variant is not None and not variant.generated:
        return Kind.OUT, False, variant
    if op in NATIVE_INTO:
        return Kind.NATIVE, False, NATIVE_INTO[op]
    if _copy_then_in_place(node, prefix, facts):
        return Kind.COPY_IN_PLACE, False, inplace_variant(op)
    return Kind.FALLBACK, False, None


def _wraps_operator(target: Any) -> bool:
    """An operator of another dialect over a torch operator (ExecuTorch's ``EdgeOpOverload``:
    ``cortex_m::quantized_conv2d``): it runs its functional kernel, and its tensor results
    are copied into their planned storage like any fallback's, so the plan is what they
    live in."""
    return isinstance(getattr(target, "_op", None), torch._ops.OpOverload)


def _superseded_assert(node: torch.fx.Node, prefix: str, facts: ProgramFacts) -> bool:
    """True for an assert ``sym_size(v, d) <= N`` where ``v``'s planned bound at ``d`` is above
    ``N``: torch derived it from a fake kernel's too-small bound, which ``limits.py`` widened
    (a ``torch._check`` bound is never widened, so its assert is kept)."""
    condition = node.args[0] if node.target is torch.ops.aten._assert_scalar.default else None
    if not (isinstance(condition, torch.fx.Node) and condition.target is operator.le
            and isinstance(condition.args[1], int)):
        return False
    size = condition.args[0]
    if not (isinstance(size, torch.fx.Node) and size.target is torch.ops.aten.sym_size.int):
        return False
    value, dim = size.args
    spec = facts.specs.get(prefix + value.name)
    return isinstance(spec, TensorSpec) and spec.shape[dim] > condition.args[1]


def _lower_written(op: torch._ops.OpOverload, written: int) -> tuple[Kind, bool, Any]:
    """An op whose output shares argument ``written``'s storage (a state update or a reuse):
    the in-place twin on ``self``, a native kernel, or an elementwise out-variant, given that
    argument itself as ``out`` (the same tensor, not only the same memory: ATen refuses an
    ``out`` whose strides differ, even in size-1 dims); else compute, then copy over it."""
    twin = inplace_variant(op)
    if twin is not None and written == 0:
        return Kind.IN_PLACE, False, twin
    if op in NATIVE_INTO and written == 0:
        return Kind.NATIVE, False, NATIVE_INTO[op]
    variant = out_variant(op)
    if torch.Tag.pointwise in op.tags and variant is not None and not variant.generated:
        return Kind.OUT, False, variant
    return Kind.FALLBACK, False, None


def _lower_placeholder(name: str, prefix: str, facts: ProgramFacts) -> tuple[Kind, bool]:
    if prefix:
        return Kind.SUBGRAPH_INPUT, False
    if name in facts.roles.constants:
        return Kind.CONSTANT, True
    if facts.roles.role_of.get(name) is Role.STATE:
        return Kind.STATE, True
    if isinstance(facts.specs.get(name), TensorSpec):
        return Kind.INPUT, True
    return Kind.SPECIALISED, True


def lower_node(node: torch.fx.Node, prefix: str, facts: ProgramFacts,
               per_frame: set[str]) -> Lowered:
    """The row of one node; ``per_frame`` holds the names of the values already in the frame
    (the node's inputs are looked up there).

    Raises ``UnsupportedOpError`` for a node kind the runtime cannot run.
    """
    name = prefix + node.name
    inputs_per_frame = all(prefix + n.name in per_frame for n in node.all_input_nodes)
    kernel, overwrites = None, None
    if name in facts.folded.computed:
        kind = Kind.FOLDED if name in facts.folded.kept else Kind.FOLDED_AWAY
        return Lowered(name, _target(node), kind, True, True)
    if node.op == "placeholder":
        kind, frame = _lower_placeholder(name, prefix, facts)
    elif node.op == "get_attr":
        kind, frame = Kind.SUBGRAPH, True
    elif node.op == "output":
        kind, frame = Kind.OUTPUT, False
    elif node.op != "call_function":
        raise UnsupportedOpError(f"runtime: node {name!r} of kind {node.op!r} cannot run; "
                                 "export the model with torch.export")
    elif node.target is operator.getitem:
        kind, frame = Kind.GETITEM, inputs_per_frame
    elif _superseded_assert(node, prefix, facts):
        kind, frame = Kind.SUPERSEDED, True
    elif isinstance(node.target, torch._ops.OpOverload):
        kind, frame, kernel, *over = _lower_op(node, prefix, facts, inputs_per_frame)
        overwrites = over[0] if over and kind is not Kind.FALLBACK else None
    elif control_flow_op(node) is not None:
        kind, frame, kernel = Kind.CONTROL_FLOW, False, control_flow_op(node)
    elif _wraps_operator(node.target) and not node.meta.get("unbacked_bindings") \
            and any(s is not None for s in facts.items(name)):
        kind, frame = Kind.FALLBACK, False  # an edge dialect's kernel, into its planned views
    else:
        sizes_only = not any(facts.is_tensor(prefix + n.name) for n in node.all_input_nodes)
        kind = Kind.SIZES if sizes_only else Kind.PLAIN
        frame = sizes_only and inputs_per_frame
    planned_views = kind in WRITES_PLANNED_VIEWS and not node.meta.get("unbacked_bindings")
    frame_value = frame or (planned_views and facts.resolvable(name))
    return Lowered(name, _target(node), kind, frame, frame_value, kernel, overwrites)


def lower_graph(module: torch.fx.GraphModule, prefix: str, facts: ProgramFacts,
                order: Sequence[str] | None = None) -> tuple[Lowered, ...]:
    """The lowering table of one graph, one row per node in ``order`` (node names; graph order
    without one)."""
    per_frame: set[str] = set()
    rows = []
    for node in scheduled_nodes(module.graph, order):
        row = lower_node(node, prefix, facts, per_frame)
        if row.frame_value:
            per_frame.add(row.name)
        rows.append(row)
    return tuple(rows)


def lower_program(module: torch.fx.GraphModule, facts: ProgramFacts,
                  order: Sequence[str] | None = None) -> tuple[Lowered, ...]:
    """The lowering table of a program: its top-level graph in ``order``, then every
    subgraph."""
    return tuple(row for graph, prefix in graph_modules(module)
                 for row in lower_graph(graph, prefix, facts, None if prefix else order))


def explain(rows: tuple[Lowered, ...]) -> str:
    """The table as aligned text: name, what it calls, how it runs, and when."""
    width_name = max((len(r.name) for r in rows), default=4)
    width_target = max((len(r.target) for r in rows), default=6)
    lines = [f"{'node':<{width_name}}  {'calls':<{width_target}}  {'runs as':<14}  when"]
    for r in rows:
        when = "per frame" if r.per_frame else "every run"
        lines.append(f"{r.name:<{width_name}}  {r.target:<{width_target}}  "
                     f"{r.kind.value:<14}  {when}")
    return "\n".join(lines)
