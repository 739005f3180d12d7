"""The plan as a JSON document, both ways: ``encode_plan`` writes it, ``decode_plan`` reads it.

This is the one serialised form of a plan and its specs: ``tensorplan plan --json`` writes it,
the program file (``artifact.py``) stores it, ``tensorplan diff`` compares two of them. Keys of
``storages`` and ``regions`` entries are the field names of ``PlannedStorage`` and
``PlannedRegion``; a value is described by ``value_to_json``. Reading never trusts the file: a
missing or mistyped field, an unknown version or an invalid plan raises ``FormatError`` naming
where in the document it is.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, get_args

import torch
from torch.export import ExportedProgram

from tensorplan.analysis.alias import StorageKind
from tensorplan.errors import FormatError, PlanError
from tensorplan.frontend.dim_names import named
from tensorplan.frontend.roles import Roles
from tensorplan.plan.plan import BankPlan, MemoryPlan, PlannedRegion, PlannedStorage
from tensorplan.plan.symbolic.dims import DimRange, SymbolicPlan
from tensorplan.plan.symbolic.sizes import SizeExpr
from tensorplan.schedule.schedule import Decided, Schedule
from tensorplan.specs.spec import SpecTable, TensorSpec, canonical

SCHEMA = "tensorplan.plan"  # the "schema" field of every plan document
SCHEMA_VERSION = 2          # bumped whenever a field changes meaning or disappears (2: the
#                             schedule: node order, reuse, folding; storages hold reused values)
CHECKED_FIELDS = ("storage", "shape", "dtype", "dim_order", "strides", "nbytes", "const")


def dtype_name(dtype: torch.dtype) -> str:
    """The dtype without its ``torch.`` prefix, as documents and reports spell it.

    >>> dtype_name(torch.float32)
    'float32'
    """
    return str(dtype).removeprefix("torch.")


def value_to_json(name: str, spec: TensorSpec, names: Mapping[str, str]) -> dict[str, Any]:
    """One tensor value as plain JSON data (lists, strings and ints only); ``sym_shape``
    writes each dynamic size in the ``Dim`` names of ``names`` (symbol -> name).

    >>> spec = TensorSpec((2, 3), (2, 3), torch.float32, (0, 1), (3, 1), 24, storage=4)
    >>> value_to_json("relu", spec, {})["shape"], value_to_json("relu", spec, {})["dtype"]
    ([2, 3], 'float32')
    """
    return {
        "name": name,
        "storage": spec.storage,
        "shape": list(spec.shape),
        "sym_shape": [named(canonical(s), names) for s in spec.sym_shape],
        "dtype": dtype_name(spec.dtype),
        "dim_order": list(spec.dim_order),
        "strides": list(spec.strides),
        "nbytes": spec.nbytes,
        "const": spec.const,
    }


# Fields of storages and regions that only a plan with memory banks writes.
_BANK_FIELDS = frozenset({"bank", "traffic"})


def _record(item: Any, banked: bool = True) -> dict[str, Any]:
    """A frozen dataclass as a dict, tuples as lists (without the bank fields unless
    ``banked``)."""
    return {key: list(value) if isinstance(value, tuple) else value
            for key, value in dataclasses.asdict(item).items()
            if banked or key not in _BANK_FIELDS}


def _banks(plan: MemoryPlan) -> dict[str, Any]:
    """The memory banks' fields of a plan (none for one arena)."""
    if not plan.banks:
        return {}
    return {"banks": [_record(bank) for bank in plan.banks], "traffic_cost": plan.traffic_cost,
            "traffic_cost_bound": plan.traffic_cost_bound,
            "served_bound_bytes": plan.served_bound_bytes}


def _expressions(table: Mapping[Any, SizeExpr]) -> dict[str, Any]:
    return {str(key): expr.to_json() for key, expr in table.items()}


def _symbolic(plan: MemoryPlan) -> dict[str, Any]:
    """The symbolic plan's fields (none for a static plan): ``dims`` (each ``DimRange``),
    the ``arena``, every storage's ``offsets``, ``sizes`` and ``needs``, the regions'
    ``region_offsets`` (each a ``SizeExpr.to_json``, keyed by storage id or node), ``held``
    (storage id -> why it is held at its bound)."""
    sym = plan.symbolic
    if sym is None:
        return {}
    return {"symbolic": {
        "dims": [dataclasses.asdict(d) for d in sym.dims], "alignment": sym.alignment,
        "arena": sym.arena.to_json(), "offsets": _expressions(sym.offsets),
        "sizes": _expressions(sym.sizes), "needs": _expressions(sym.needs),
        "region_offsets": _expressions(sym.region_offsets),
        "held": {str(k): why for k, why in sym.held.items()}}}


def _expression_table(f: Fields, key: str, by_id: bool) -> dict[Any, SizeExpr]:
    table = {}
    for name, data in f.get(key, dict).items():
        try:
            table[int(name) if by_id else name] = SizeExpr.from_json(data)
        except ValueError as error:
            raise FormatError(f"{f.where}: {key}[{name!r}]: {error}") from None
    return table


def _decode_symbolic(document: Fields) -> SymbolicPlan | None:
    if "symbolic" not in document.data:
        return None
    f = Fields(document.get("symbolic", dict), f"{document.where}: symbolic")
    dims = tuple(DimRange(d.get("name", str), d.get("symbol", str), d.get("lower", int),
                          d.get("upper", int), d.get("example", int)) for d in f.objects("dims"))
    try:
        arena = SizeExpr.from_json(f.get("arena", list))
    except ValueError as error:
        raise FormatError(f"{f.where}: arena: {error}") from None
    held = {int(k): why for k, why in f.get("held", dict).items()}
    return SymbolicPlan(dims, f.get("alignment", int), arena, _expression_table(f, "offsets", True),
                        _expression_table(f, "sizes", True), _expression_table(f, "needs", True),
                        _expression_table(f, "region_offsets", False), held)


def _graph_info(exported_program: ExportedProgram, roles: Roles, name: str) -> dict[str, Any]:
    signature = exported_program.graph_signature
    return {
        "name": name,
        "inputs": list(roles.user_inputs),
        "outputs": [str(out) for out in signature.user_outputs],
        "nodes": len(exported_program.graph.nodes),
        "torch": torch.__version__,
    }


def _schedule(schedule: Schedule | None) -> dict[str, Any]:
    if schedule is None:
        return {"order": None, "reuse": False, "fold": False, "unfolded": [], "reuses": [],
                "slices": {}}
    return {"order": list(schedule.order), "reuse": schedule.reuse,
            "fold": bool(schedule.folded.computed),
            "unfolded": sorted(schedule.folded.unfolded),
            "reuses": [[r.value, r.overwrites] for r in schedule.reuses],
            "slices": {value: {"offset": where.offset, "strides": list(where.strides)}
                       for value, where in schedule.alias.slices.items()}}


def encode_plan(exported_program: ExportedProgram, roles: Roles, specs: SpecTable,
                plan: MemoryPlan, schedule: Schedule | None = None,
                name: str = "model") -> dict[str, Any]:
    """The plan and every tensor value's spec as a JSON-ready dict.

    Holds ``schema``/``version``, ``model`` (name, user inputs and outputs, node count), the
    plan's numbers (``arena_bytes``, ``lower_bound_bytes``, ``alignment``, ``algorithm``,
    ``optimal``, ``baseline_bound_bytes``, ``order``, ``constant_bytes``,
    ``baseline_constant_bytes``; ``input_bytes`` when the inputs are outside the arena),
    ``symbolic`` (for a program with dynamic dims: the
    expressions of ``_symbolic``), ``banks`` (each memory bank's ``BankPlan`` fields; absent
    for one arena, as are the storages' ``bank`` and ``traffic``) with ``traffic_cost``,
    ``traffic_cost_bound`` and ``served_bound_bytes``,
    ``schedule`` (the node order, whether reuse and folding ran,
    each reuse as ``[value, overwritten value]``, and ``slices``: each value made in place in
    a concatenation, with its byte offset inside its storage and its element strides),
    ``storages`` and ``regions`` (their
    dataclass fields; a storage lists every value it holds, reused ones included), and
    ``values``: one entry per tensor value (see ``value_to_json``), items of multi-output
    values as ``name[i]``. ``decode_plan`` reads the plan back, ``decode_schedule`` the
    schedule.
    """
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "model": _graph_info(exported_program, roles, name),
        "arena_bytes": plan.arena_bytes,
        "lower_bound_bytes": plan.lower_bound_bytes,
        "alignment": plan.alignment,
        "algorithm": plan.algorithm,
        "optimal": plan.optimal,
        "baseline_bound_bytes": plan.baseline_bound_bytes,
        "order": plan.order,
        "constant_bytes": plan.constant_bytes,
        "baseline_constant_bytes": plan.baseline_constant_bytes,
        **({"input_bytes": plan.input_bytes} if plan.input_bytes else {}),
        **_banks(plan),
        **_symbolic(plan),
        "schedule": _schedule(schedule),
        "storages": [_record(plan.storages[sid], bool(plan.banks))
                     for sid in sorted(plan.storages)],
        "regions": [_record(region, bool(plan.banks)) for region in plan.regions],
        "values": [value_to_json(value, spec, specs.dim_names) for value, spec in specs.tensors()],
    }


def parse_json(data: bytes | str, where: str) -> Any:
    """``data`` parsed as JSON; invalid JSON raises ``FormatError`` naming ``where``."""
    try:
        return json.loads(data)
    except ValueError as error:
        raise FormatError(f"{where}: not valid JSON ({error})") from error


def _is(value: Any, kind: type) -> bool:
    """isinstance, except that a bool is not an int."""
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


class Fields:
    """Typed reads of one JSON object; a missing or mistyped field raises ``FormatError``.

    >>> Fields({"size": 8}, "plan.json").get("size", int)
    8
    >>> Fields({"size": True}, "plan.json").get("size", int)
    Traceback (most recent call last):
    tensorplan.errors.FormatError: plan.json: field 'size' should be int, got True
    """

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise FormatError(f"{where}: expected a JSON object, got {type(data).__name__}")
        self.data = data    # the parsed object
        self.where = where  # the file and path inside it, for messages

    def get(self, key: str, kind: type) -> Any:
        """The field ``key``, which must exist and be a ``kind``."""
        if key not in self.data:
            raise FormatError(f"{self.where}: missing field {key!r}")
        value = self.data[key]
        if not _is(value, kind):
            raise FormatError(f"{self.where}: field {key!r} should be {kind.__name__}, "
                              f"got {value!r}")
        return value

    def optional(self, key: str, kind: type, default: Any) -> Any:
        """The field ``key`` if present (a ``kind``), else ``default``: for fields added
        without a new version (a plan without memory banks has none of theirs)."""
        return self.get(key, kind) if key in self.data else default

    def items(self, key: str, kind: type) -> tuple[Any, ...]:
        """The list field ``key``, every item a ``kind``."""
        values = self.get(key, list)
        if not all(_is(v, kind) for v in values):
            raise FormatError(f"{self.where}: field {key!r} should hold only {kind.__name__}")
        return tuple(values)

    def objects(self, key: str) -> list[Fields]:
        """The list field ``key``, every item an object read as ``Fields``."""
        return [Fields(item, f"{self.where}: {key}[{i}]")
                for i, item in enumerate(self.get(key, list))]


def check_kind(fields: Fields, key: str, name: str, version: int) -> None:
    """The document's ``key`` is ``name`` and its ``version`` is one this code reads."""
    if fields.get(key, str) != name:
        raise FormatError(f"{fields.where}: {key} is {fields.data[key]!r}, expected {name!r}")
    found = fields.get("version", int)
    if found > version:
        raise FormatError(f"{fields.where}: version {found} was written by a newer tensorplan; "
                          f"this one reads version {version}: upgrade tensorplan")
    if found != version:
        raise FormatError(f"{fields.where}: version {found} is no longer supported (this "
                          f"tensorplan reads version {version}); re-save the program")


def _storage(f: Fields) -> PlannedStorage:
    kind = f.get("kind", str)
    if kind not in get_args(StorageKind):
        raise FormatError(f"{f.where}: unknown storage kind {kind!r}")
    return PlannedStorage(id=f.get("id", int), offset=f.get("offset", int),
                          size=f.get("size", int), start=f.get("start", int),
                          end=f.get("end", int), kind=kind, graph=f.get("graph", str),
                          values=f.items("values", str), bank=f.optional("bank", str, ""),
                          traffic=f.optional("traffic", int, 0))


def _region(f: Fields) -> PlannedRegion:
    return PlannedRegion(node=f.get("node", str), graph=f.get("graph", str),
                         offset=f.get("offset", int), size=f.get("size", int),
                         step=f.get("step", int), subgraphs=f.items("subgraphs", str),
                         bank=f.optional("bank", str, ""))


def _bank(f: Fields) -> BankPlan:
    capacity = f.data.get("capacity")
    if capacity is not None and not _is(capacity, int):
        raise FormatError(f"{f.where}: field 'capacity' should be int or null, got {capacity!r}")
    return BankPlan(name=f.get("name", str), capacity=capacity, cost=f.get("cost", float),
                    arena_bytes=f.get("arena_bytes", int),
                    lower_bound_bytes=f.get("lower_bound_bytes", int),
                    traffic_bytes=f.get("traffic_bytes", int),
                    constant_bytes=f.get("constant_bytes", int))


def decode_plan(document: Fields) -> MemoryPlan:
    """The plan a document written by ``encode_plan`` holds, field by field, verified.

    Raises ``FormatError`` for another schema or version, a missing or mistyped field, a
    storage id given twice, or a plan that fails its own ``verify()``.
    """
    check_kind(document, "schema", SCHEMA, SCHEMA_VERSION)
    storages = [_storage(s) for s in document.objects("storages")]
    by_id = {s.id: s for s in storages}
    if len(by_id) != len(storages):
        raise FormatError(f"{document.where}: storages: the same storage id appears twice")
    alignment = document.get("alignment", int)
    if alignment < 1:
        raise FormatError(f"{document.where}: alignment {alignment} is not a positive number "
                          "of bytes")
    plan = MemoryPlan(arena_bytes=document.get("arena_bytes", int),
                      lower_bound_bytes=document.get("lower_bound_bytes", int),
                      algorithm=document.get("algorithm", str), alignment=alignment,
                      optimal=document.get("optimal", bool), storages=by_id,
                      regions=tuple(_region(r) for r in document.objects("regions")),
                      baseline_bound_bytes=document.get("baseline_bound_bytes", int),
                      order=document.get("order", str),
                      constant_bytes=document.get("constant_bytes", int),
                      baseline_constant_bytes=document.get("baseline_constant_bytes", int),
                      banks=tuple(_bank(b) for b in document.objects("banks"))
                      if "banks" in document.data else (),
                      traffic_cost=document.optional("traffic_cost", float, 0.0),
                      traffic_cost_bound=document.optional("traffic_cost_bound", float, 0.0),
                      served_bound_bytes=document.optional("served_bound_bytes", int, 0),
                      symbolic=_decode_symbolic(document),
                      input_bytes=document.optional("input_bytes", int, 0))
    _check_symbolic_keys(plan, document.where)
    verify_decoded(plan, f"{document.where}: the saved plan is invalid")
    return plan


def _check_symbolic_keys(plan: MemoryPlan, where: str) -> None:
    """A symbolic plan must give every storage and region its expressions."""
    sym = plan.symbolic
    if sym is None:
        return
    for key, table in (("offsets", sym.offsets), ("sizes", sym.sizes), ("needs", sym.needs)):
        if set(table) != set(plan.storages):
            raise FormatError(f"{where}: symbolic: {key} does not list exactly the plan's "
                              "storages")
    if set(sym.region_offsets) != {r.node for r in plan.regions}:
        raise FormatError(f"{where}: symbolic: region_offsets does not list exactly the "
                          "plan's regions")


def decode_schedule(document: Fields) -> Decided:
    """The schedule a document written by ``encode_plan`` holds (not yet checked against a
    program)."""
    saved = Fields(document.get("schedule", dict), f"{document.where}: schedule")
    order = saved.data.get("order")
    if order is not None:
        order = saved.items("order", str)
    unfolded = saved.items("unfolded", str) if "unfolded" in saved.data else ()
    return Decided(order, document.get("order", str), saved.get("reuse", bool),
                         saved.get("fold", bool), frozenset(unfolded))


def verify_decoded(plan: MemoryPlan, problem: str) -> None:
    """``plan.verify()``, its ``PlanError`` turned into a ``FormatError`` led by ``problem``."""
    try:
        plan.verify()
    except PlanError as error:
        raise FormatError(f"{problem}: {error}") from error


def check_values(document: Fields, specs: SpecTable) -> None:
    """Every value the document lists exists in ``specs`` with the same spec (storage included).

    Raises ``FormatError`` naming the first value that is missing or differs, and the field.
    """
    derived = {name: value_to_json(name, spec, specs.dim_names) for name, spec in specs.tensors()}
    for entry in document.objects("values"):
        name = entry.get("name", str)
        if name not in derived:
            raise FormatError(f"{entry.where}: value {name!r} is not in the embedded program")
        for key in CHECKED_FIELDS:
            if entry.data.get(key) != derived[name][key]:
                raise FormatError(f"{entry.where}: value {name!r} has {key} "
                                  f"{entry.data.get(key)!r} in the file but "
                                  f"{derived[name][key]!r} in the embedded program")
