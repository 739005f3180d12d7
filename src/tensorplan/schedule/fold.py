"""Stage 2b: folded constants — values computed from constants alone, once, at compile time.

A top-level node is *folded* when it is an ATen op that is not random
(``torch.Tag.nondeterministic_seeded``), every node it reads is a constant (a parameter, a
never-written buffer, a lifted constant) or folded itself — or it reads its tensor arguments
only for their sizes and options (``full_like``, ``new_ones``: ``schemas.reads_only_metadata``)
and those are static — and its outputs have static sizes
(or it has none: a check such as ``_assert_tensor_metadata`` on folded values is made here,
once), and no kernel takes it as its ``scratch`` buffer (which the kernel writes):
a causal mask from ``arange``/``full`` or ``ones_like(scores).tril()``, rotary tables, a
relative-position bias, a weight transpose. Folded values are computed here with the
program's real constants; the ones that something else still reads (the *frontier*) are
kept as constants, out of the arena and out of every run; the rest are never needed again.

A view of a constant costs nothing at run time, so it is folded only when nothing but folded
values reads it.

A multi-output op (``native_layer_norm`` of a learned query in DETR) is a tuple, never a
constant: its ``getitem``s are folded with it, and they are what is kept; a ``getitem`` left
to run leaves its tuple to run.

Kept values that are equal (same dtype, shape, strides and values) are kept once.

Worked example: ``mask = torch.full((4, 4), -inf).triu(1); return x + mask`` folds ``full``
and ``triu``; ``triu`` is the frontier, a 64-byte constant, and only ``add`` runs.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
import torch.fx
from torch.export import ExportedProgram

from tensorplan.errors import UnsupportedOpError
from tensorplan.frontend.roles import Roles
from tensorplan.ops.schemas import is_scratch_of, is_view, reads_only_metadata
from tensorplan.specs.spec import SpecTable, TensorSpec


@dataclass(frozen=True)
class Folded:
    """The values computed at compile time."""

    computed: frozenset[str] = frozenset()    # every folded node of the top-level graph
    kept: Mapping[str, torch.Tensor] = field(default_factory=dict)  # frontier value -> tensor
    unfolded: frozenset[str] = frozenset()    # foldable nodes left to run (and all they feed):
    #                                           as constants they cost more than in the arena


NOTHING_FOLDED = Folded()  # the result with folding off


def constant_tensors(program: ExportedProgram, roles: Roles) -> dict[str, torch.Tensor]:
    """Constant placeholder -> its tensor (parameters, never-written buffers, constants)."""
    tables = {**program.state_dict, **program.constants}
    return {name: tables[roles.target_of[name]] for name in roles.constants}


def constant_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one tensor count once)."""
    seen: dict[int, int] = {}
    for tensor in tensors.values():
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _static(entry: object) -> bool:
    items = entry if isinstance(entry, tuple) else (entry,)
    return any(isinstance(s, TensorSpec) for s in items) and all(
        s is None or (isinstance(s, TensorSpec) and not s.is_dynamic) for s in items)


def _metadata_only(node: torch.fx.Node, specs: SpecTable) -> bool:
    """A factory reading only the sizes and options of its tensor arguments, all static."""
    return reads_only_metadata(node.target) and all(
        _static(specs.get(n.name)) for n in node.all_input_nodes)


def _foldable(node: torch.fx.Node, specs: SpecTable, known: set[str]) -> bool:
    """An ATen op, not random, whose inputs are all known (or read only for their static
    sizes) and whose outputs are static tensors, or a check with no output
    (``_assert_tensor_metadata``), checked here once; never a kernel's scratch buffer, which
    the kernel writes (a saved Cortex-M program's scratch is an ``empty`` of no input)."""
    op = node.target
    if op is operator.getitem:  # an item of a folded tuple: the tuple is no constant
        return node.args[0].name in known
    if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload) \
            or torch.Tag.nondeterministic_seeded in op.tags or node.meta.get("unbacked_bindings"):
        return False
    if any(is_scratch_of(node, user) for user in node.users):
        return False
    check = not op._schema.returns and bool(node.all_input_nodes)
    return (check or _static(specs.get(node.name))) and (
        all(n.name in known for n in node.all_input_nodes) or _metadata_only(node, specs))


def _stand_in(node: torch.fx.Node) -> torch.Tensor:
    """An uninitialised tensor with the traced sizes, strides and dtype of ``node``: what a
    factory that reads only metadata is given in place of a run-time value."""
    value = node.meta["val"]
    return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype)


def _evaluate(node: torch.fx.Node, values: Mapping[str, object]) -> object:
    args, kwargs = torch.fx.node.map_arg(
        (node.args, node.kwargs), lambda n: values[n.name] if n.name in values else _stand_in(n))
    try:
        with torch.no_grad():
            return node.target(*args, **kwargs)
    except Exception as error:
        raise UnsupportedOpError(
            f"fold: computing node {node.name!r} ({node.target}) from constants failed with "
            f"{type(error).__name__}: {error}; compile with fold=False") from error


def fold_constants(program: ExportedProgram, specs: SpecTable, roles: Roles,
                   unfolded: frozenset[str] = frozenset()) -> Folded:
    """Compute every foldable value of the top-level graph but those named in ``unfolded``
    (and what they feed); keep the ones still read.

    Pure: the program is not modified; the tensors kept are new (or views of constants).
    """
    unfolded = unfolded | {node.args[0].name for node in program.graph.nodes
                           if node.target is operator.getitem and node.name in unfolded}
    values: dict[str, object] = dict(constant_tensors(program, roles))
    known = set(values)
    foldable: list[torch.fx.Node] = []
    for node in program.graph.nodes:
        if node.name not in unfolded and _foldable(node, specs, known):
            values[node.name] = _evaluate(node, values)
            known.add(node.name)
            foldable.append(node)
    names: set[str] = set()
    for node in reversed(foldable):  # a view runs as a view unless only folded values read it
        viewed = node.target is not operator.getitem and is_view(node.target)
        if not viewed or all(user.name in names for user in node.users):
            names.add(node.name)
    kept = {node.name: values[node.name] for node in foldable
            if node.name in names and any(user.name not in names for user in node.users)}
    return Folded(frozenset(names), _shared_copies(kept), frozenset(unfolded))


def _shared_copies(kept: Mapping[str, object]) -> dict[str, object]:
    """``kept`` with equal tensors (same dtype, shape, strides and values: T5 computes one
    position bias per layer) made one tensor, so it is kept, and counted, once."""
    unique: list[torch.Tensor] = []
    shared: dict[str, object] = {}
    for name, value in kept.items():
        if isinstance(value, torch.Tensor):
            value = next((u for u in unique if u.dtype == value.dtype and u.shape == value.shape
                          and u.stride() == value.stride() and torch.equal(u, value)), value)
            if all(value is not u for u in unique):
                unique.append(value)
        shared[name] = value
    return shared
