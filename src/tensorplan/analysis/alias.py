"""Stage 3: which values share storage, read from operator schemas and the program signature.

Rules (DESIGN rule 5):
- an output annotated ``Tensor(a)`` is a view of the argument annotated with the same set ``a``
  and shares its storage; a list output of an op whose argument is ``Tensor(a -> *)`` (``split``,
  ``unbind``) shares that argument's storage element by element;
- an output annotated ``Tensor(a!)`` is the mutated argument itself;
- ``operator.getitem`` takes the storage of the element it selects (the one exception that has no
  schema);
- parameters, lifted constants and never-mutated buffers have no storage (they are not in the
  arena); a mutated buffer is one ``state`` storage that keeps its value across runs, and the
  value written back to it shares that storage when it is laid out like the buffer and nothing
  reads the old value after it is first written (see ``_can_share``); otherwise it is copied
  back after the run;
- subgraph inputs of a control-flow node are the parent storages they are called with (its
  description in ``control_flow.py`` says which); everything else gets a fresh storage.

Worked example: ``y = x.view(-1); z = y + 1; return y, z`` gives
``x -> 0 (input), view -> 0, add -> 1, output -> (0, 1)``.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.fx
from torch.export import ExportedProgram

from tensorplan.errors import UnsupportedOpError
from tensorplan.frontend.roles import Roles, read_roles
from tensorplan.ops.control_flow import ControlFlowOp, control_flow_op
from tensorplan.ops.schemas import inplace_variant
from tensorplan.specs.spec import Entry, SpecTable, TensorSpec
from tensorplan.specs.trace import carried_spec

StorageKind = Literal["input", "state", "activation"]
StorageRef = int | tuple[int | None, ...] | None


@dataclass(frozen=True)
class Storage:
    """One block of memory that one or more values live in."""

    id: int                  # unique over the program, subgraphs included
    nbytes: int              # bytes of its largest value (upper-bound shapes)
    kind: StorageKind        # input: user input; state: mutated buffer; activation: computed
    graph: str               # "" for the top-level graph, "<submodule>/" inside a subgraph
    values: tuple[str, ...]  # names of the values that use it, in definition order


@dataclass(frozen=True)
class Slice:
    """Where a value lives inside a larger storage: its slice of a concatenation."""

    offset: int               # bytes from the start of the storage
    strides: tuple[int, ...]  # element strides of the slice (those of the concatenation)


@dataclass(frozen=True)
class AliasTable:
    """Storage of every value, and the storages themselves."""

    storage_of: Mapping[str, StorageRef]        # value name -> storage id (tuple if multi-output)
    storages: Mapping[int, Storage]             # storage id -> storage
    state_of: Mapping[str, int]                 # mutated buffer/input name -> its storage id
    write_back: tuple[tuple[str, int], ...] = ()  # (value, storage): copy after a run, when
    #                                               the new state could not share its storage
    slices: Mapping[str, Slice] = field(default_factory=dict)  # value -> its place inside a
    #                                               concatenation's storage (concat.py)
    views: frozenset[str] = frozenset()  # values an op's schema says alias an argument (a
    #                                      view, an in-place result): no byte beyond their base's

    def storage_ids(self, name: str) -> tuple[int, ...]:
        """Every storage id a value uses (empty for constants and non-tensors)."""
        ref = self.storage_of.get(name)
        if isinstance(ref, int):
            return (ref,)
        if isinstance(ref, tuple):
            return tuple(s for s in ref if s is not None)
        return ()


@dataclass
class _Builder:
    """Mutable state of one alias analysis run (local to ``analyze``)."""

    specs: SpecTable
    storage_of: dict[str, StorageRef] = field(default_factory=dict)
    members: dict[int, list[str]] = field(default_factory=dict)
    nbytes: dict[int, int] = field(default_factory=dict)
    kinds: dict[int, StorageKind] = field(default_factory=dict)
    graphs: dict[int, str] = field(default_factory=dict)
    views: set[str] = field(default_factory=set)

    def fresh(self, value: str, graph: str, kind: StorageKind = "activation") -> int:
        storage = len(self.members)
        self.members[storage] = []
        self.nbytes[storage] = 0
        self.kinds[storage] = kind
        self.graphs[storage] = graph
        return self.join(value, storage)

    def join(self, value: str, storage: int, addresses_more: bool = True) -> int:
        """Add ``value`` to ``storage``; the storage grows to its bytes unless it is a view,
        which addresses no byte its base does not (an ``expand`` is not a bigger buffer)."""
        spec = self.specs.spec_of(value)
        self.members[storage].append(value)
        if addresses_more:
            self.nbytes[storage] = max(self.nbytes[storage], spec.nbytes if spec else 0)
        return storage

    def merge(self, into: int, source: int) -> None:
        """Move every value of ``source`` into ``into``, and point every reference to
        ``source`` at ``into``: its values' and the subgraph inputs' that live in it (a loop
        body reading a new state value), which are not its members."""
        for value in self.members.pop(source):
            self.join(value, into, addresses_more=False)
        for name, ref in self.storage_of.items():
            if isinstance(ref, tuple):
                self.storage_of[name] = tuple(into if s == source else s for s in ref)
            elif ref == source:
                self.storage_of[name] = into
        self.nbytes[into] = max(self.nbytes[into], self.nbytes.pop(source))
        del self.kinds[source], self.graphs[source]


def _schema_source(op: torch._ops.OpOverload, ret: Any) -> str | None:
    """Name of the argument a schema return aliases (view or in-place write), or None."""
    info = ret.alias_info
    if info is None:
        return None
    for arg in op._schema.arguments:
        arg_info = arg.alias_info
        if arg_info is None:
            continue
        if info.before_set and info.before_set & arg_info.before_set:
            return arg.name
        if not info.before_set and "*" in arg_info.after_set:
            return arg.name
    return None


def _argument(node: torch.fx.Node, op: torch._ops.OpOverload, name: str) -> Any:
    for position, arg in enumerate(op._schema.arguments):
        if arg.name == name:
            if name in node.kwargs:
                return node.kwargs[name]
            return node.args[position] if position < len(node.args) else None
    return None


class _Analysis:
    """Walks one graph (interpreter pattern: one method per node kind)."""

    def __init__(self, builder: _Builder, module: torch.fx.GraphModule, prefix: str,
                 folded: frozenset[str] = frozenset()) -> None:
        self.b = builder
        self.module = module
        self.prefix = prefix
        self.folded = folded  # values computed at compile time: constants, no storage

    def run(self, inputs: list[StorageRef] | None, constants: frozenset[str],
            kinds: Mapping[str, StorageKind]) -> None:
        placeholders = iter(inputs or [])
        for node in self.module.graph.nodes:
            name = self.prefix + node.name
            if node.op == "placeholder":
                ref = next(placeholders) if inputs is not None else \
                    self._top_input(node, constants, kinds)
            elif node.op == "output":
                continue
            else:
                ref = self._node(node, name)
            self.b.storage_of[name] = ref

    def _top_input(self, node: torch.fx.Node, constants: frozenset[str],
                   kinds: Mapping[str, StorageKind]) -> StorageRef:
        if node.name in constants or self.b.specs.spec_of(node.name) is None:
            return None
        return self.b.fresh(node.name, "", kinds.get(node.name, "input"))

    def _node(self, node: torch.fx.Node, name: str) -> StorageRef:
        if node.op == "get_attr" or name in self.folded:
            return None
        if carried_spec(node) is not None:
            return self._fresh_outputs(name)
        if node.op != "call_function":
            raise UnsupportedOpError(f"alias: node {name!r} has kind {node.op!r}, which has no "
                                     "alias rule; export the model with torch.export")
        if node.target is operator.getitem:
            return self._getitem(node, name)
        if isinstance(node.target, torch._ops.OpOverload):
            return self._op(node, name)
        described = control_flow_op(node)
        if described is not None:
            return self._control_flow(node, name, described)
        return self._fresh_outputs(name)

    def _ref(self, arg: Any) -> StorageRef:
        if isinstance(arg, torch.fx.Node):
            return self.b.storage_of.get(self.prefix + arg.name)
        return None

    def _getitem(self, node: torch.fx.Node, name: str) -> StorageRef:
        source, index = node.args
        ref = self._ref(source)
        storage = ref[index] if isinstance(ref, tuple) else None
        if storage is not None:
            self.b.join(name, storage)
        return storage

    def _op(self, node: torch.fx.Node, name: str) -> StorageRef:
        op = node.target
        entry = self.b.specs.get(name)
        if entry is None:
            return None
        returns = op._schema.returns
        items = entry if isinstance(entry, tuple) else (entry,)
        if len(returns) == 1 and isinstance(entry, tuple):  # one list return: Tensor(a)[]
            returns = returns * len(entry)
        refs = []
        for i, (ret, spec) in enumerate(zip(returns, items, strict=True)):
            value = f"{name}[{i}]" if isinstance(entry, tuple) else name
            refs.append(self._output(node, op, ret, spec, value))
        return tuple(refs) if isinstance(entry, tuple) else refs[0]

    def _output(self, node, op, ret, spec, value: str) -> int | None:
        if spec is None:
            return None
        source = _schema_source(op, ret)
        if source is None:
            return self.b.fresh(value, self.prefix)
        base = self._ref(_argument(node, op, source))
        if base is None:  # a view of a constant is a constant
            return None
        if not isinstance(base, int):
            raise UnsupportedOpError(f"alias: {value!r} ({op}) aliases argument {source!r}, "
                                     "which is not a single tensor")
        self.b.views.add(value)
        return self.b.join(value, base, addresses_more=False)

    def _fresh_outputs(self, name: str) -> StorageRef:
        entry = self.b.specs.get(name)
        if isinstance(entry, tuple):
            return tuple(None if s is None else self.b.fresh(f"{name}[{i}]", self.prefix)
                         for i, s in enumerate(entry))
        return None if entry is None else self.b.fresh(name, self.prefix)

    def _control_flow(self, node: torch.fx.Node, name: str, described: ControlFlowOp
                      ) -> StorageRef:
        outputs = self._fresh_outputs(name)
        args = [self._ref_tree(a) for a in node.args]
        inputs = described.input_storages(args, list(outputs) if isinstance(outputs, tuple)
                                          else [outputs])
        for graph_node in described.subgraph_nodes(node):
            submodule = getattr(self.module, graph_node.target)
            prefix = f"{self.prefix}{graph_node.target}/"
            _Analysis(self.b, submodule, prefix).run(list(inputs), frozenset(), {})
        return outputs

    def _ref_tree(self, arg: Any) -> Any:
        if isinstance(arg, (list, tuple)):
            return [self._ref(a) for a in arg]
        return self._ref(arg)


def _share_state(b: _Builder, program: ExportedProgram, state: dict[str, str]) -> list:
    """Put each new state value in its input's storage when that is safe; else write it back."""
    graph = program.graph
    order = {node.name: i for i, node in enumerate(graph.nodes)}
    nodes = {node.name: node for node in graph.nodes}
    write_back = []
    for value, placeholder in state.items():
        target, source = b.storage_of[placeholder], b.storage_of[value]
        if target == source:
            continue
        if _can_share(b, nodes, order, value, placeholder):
            b.merge(target, source)
        else:
            write_back.append((value, target))
    return write_back


def _can_share(b: _Builder, nodes: Mapping[str, torch.fx.Node], order: Mapping[str, int],
               value: str, placeholder: str) -> bool:
    """True when the new state ``value`` can be computed straight into the old state's storage.

    It must own its storage (an activation of the top-level graph, not a view of a larger one)
    and be laid out exactly like the state; and nothing may read the old state once the new
    value's storage is first written, or at the end of the run (outputs, other write-backs),
    except the producer itself through its first argument when it has an in-place twin
    (``index_copy`` runs as ``index_copy_`` on the state).
    """
    target, source = b.storage_of[placeholder], b.storage_of[value]
    if b.kinds.get(source) != "activation" or b.graphs[source] or b.members[source][0] != value:
        return False
    new, old = b.specs.spec_of(value), b.specs.spec_of(placeholder)
    if new is None or old is None or _layout(new) != _layout(old):
        return False
    producer = nodes[value.partition("[")[0]]
    first_write = min(order[m.partition("[")[0]] for m in b.members[source])
    olds = {m.partition("[")[0] for m in b.members[target]}
    readers = {user for name in olds for user in nodes[name].users}
    if any(user.op == "output" for user in readers):
        return False
    if any(order[user.name] >= first_write for user in readers if user is not producer):
        return False
    return producer not in readers or _in_place_on_first_argument(producer, olds)


def _layout(spec: TensorSpec) -> tuple:
    return spec.dtype, spec.shape, spec.strides, tuple(map(str, spec.sym_shape))


def _in_place_on_first_argument(node: torch.fx.Node, olds: set[str]) -> bool:
    """The node reads the old state only as its first argument and has an in-place twin."""
    if not isinstance(node.target, torch._ops.OpOverload) or inplace_variant(node.target) is None:
        return False
    first, *rest = node.args
    reads: set[str] = set()
    torch.fx.node.map_arg((rest, node.kwargs), lambda n: reads.add(n.name))
    return isinstance(first, torch.fx.Node) and first.name in olds and not reads & olds


def storage_of_value(alias: AliasTable, value: str) -> int | None:
    """The storage of a value (``name`` or ``name[i]``, an item of a multi-output op), None
    for constants and non-tensors."""
    ref = alias.storage_of.get(value.partition("[")[0])
    if isinstance(ref, tuple):
        ref = ref[int(value.partition("[")[2].rstrip("]"))]
    return ref


class MergedStorages:
    """An alias table whose storages are being merged (by in-place reuse and concatenation in
    place): a union of storage ids, each merged storage under its root."""

    def __init__(self, alias: AliasTable) -> None:
        self.alias = alias
        self.root: dict[int, int] = {}
        self.values: dict[int, list[str]] = {s.id: list(s.values) for s in alias.storages.values()}
        self.nbytes: dict[int, int] = {s.id: s.nbytes for s in alias.storages.values()}

    def find(self, storage: int) -> int:
        """The id a storage is now merged under."""
        while storage in self.root:
            storage = self.root[storage]
        return storage

    def of(self, value: str) -> int | None:
        """The (merged) storage of a value (``name`` or ``name[i]``), None for constants."""
        ref = storage_of_value(self.alias, value)
        return None if ref is None else self.find(ref)

    def merge(self, into: int, source: int) -> None:
        """Move every value of storage ``source`` into storage ``into``."""
        self.root[source] = into
        self.values[into] += self.values.pop(source)
        self.nbytes[into] = max(self.nbytes[into], self.nbytes.pop(source))

    def table(self, slices: Mapping[str, Slice] | None = None) -> AliasTable:
        """The alias table with every merged storage under its root id (and ``slices`` added
        to the table's own)."""
        def ref(r):
            if isinstance(r, tuple):
                return tuple(None if s is None else self.find(s) for s in r)
            return None if r is None else self.find(r)
        storages = {}
        for sid, values in self.values.items():
            old = self.alias.storages[sid]
            storages[sid] = Storage(sid, self.nbytes[sid], old.kind, old.graph, tuple(values))
        return AliasTable({name: ref(r) for name, r in self.alias.storage_of.items()}, storages,
                          dict(self.alias.state_of), self.alias.write_back,
                          {**self.alias.slices, **(slices or {})}, self.alias.views)


def analyze(program: ExportedProgram, specs: SpecTable, roles: Roles | None = None,
            folded: frozenset[str] = frozenset()) -> AliasTable:
    """Assign every tensor value of ``program`` a storage; see the module docstring for rules.

    Pure: reads the program, the spec table, the placeholder roles (read from the program
    when not given) and the names of the values folded at compile time (``fold.py``: they are
    constants), returns a new table.
    """
    roles = roles or read_roles(program)
    state = dict(roles.updates)
    kinds: dict[str, StorageKind] = {name: "state" for name in roles.state}
    builder = _Builder(specs)
    _Analysis(builder, program.graph_module, "", folded).run(None, roles.constants, kinds)
    write_back = _share_state(builder, program, state)
    storages = {sid: Storage(sid, builder.nbytes[sid], builder.kinds[sid], builder.graphs[sid],
                             tuple(values)) for sid, values in builder.members.items()}
    state_of = {name: builder.storage_of[name] for name in state.values()}
    return AliasTable(dict(builder.storage_of), storages, state_of, tuple(write_back),
                      views=frozenset(builder.views))


def _placed(spec: TensorSpec, storage: Any) -> TensorSpec:
    """The spec in its storage; a tensor with no storage is a constant or a view of one."""
    if isinstance(storage, int):
        return spec.with_storage(storage)
    return dataclasses.replace(spec, storage=None, const=True)


def _with_storage(entry: Entry, ref: Any) -> Entry:
    if isinstance(entry, TensorSpec):
        return _placed(entry, ref)
    if isinstance(entry, tuple):
        refs = ref if isinstance(ref, tuple) else (None,) * len(entry)
        return tuple(None if e is None else _placed(e, r) for e, r in zip(entry, refs,
                                                                          strict=True))
    return entry


def planned_specs(specs: SpecTable, alias: AliasTable) -> SpecTable:
    """The spec table with each spec's ``storage`` set from the alias table."""
    return SpecTable({name: _with_storage(entry, alias.storage_of.get(name))
                      for name, entry in specs.items()}, specs.dim_names)
