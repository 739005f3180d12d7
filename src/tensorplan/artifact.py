"""Save a compiled ``Program`` as one file and load it back without re-planning.

The file is a zip archive of three members:

- ``tensorplan.json``: the manifest, ``{"format": "tensorplan.program", "version": 1, ...}``;
- ``program.pt2``: the core-ATen program, as written by ``torch.export.save``;
- ``plan.json``: the plan and every value's spec, as ``report.export.plan_to_json`` writes them.

Loading unpickles nothing: it reads JSON and hands the embedded program to
``torch.export.load``. It re-derives specs and storages from that program (cheap and
deterministic), rebuilds the plan from the file, and checks that the two agree: every saved
value has the spec the program gives it, every storage of the program has a place big enough
for it, and the offsets are safe for the program's own schedule. Anything wrong with the file
raises ``FormatError`` naming the file and the problem.

The embedded program is used as stored, not decomposed again: decomposition renumbers node
names (``permute_2`` becomes ``permute_1``), and the saved names must match. Deserialising
may add ``getitem`` nodes for unused outputs of multi-output ops; they join existing storages,
and the schedule check above covers the steps they shift.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
import zlib
from dataclasses import dataclass, replace
from typing import Any, get_args

import torch
from torch.export import ExportedProgram

from .alias import AliasTable, StorageKind, analyze
from .errors import FormatError, PlanError
from .liveness import lifetimes
from .plan import MemoryPlan, PlannedRegion, PlannedStorage
from .program import Program, planned_specs
from .propagate import propagate
from .pt2 import load_exported
from .report.export import SCHEMA, SCHEMA_VERSION, plan_to_json, value_to_json
from .roles import read_roles
from .spec import SpecTable

FORMAT = "tensorplan.program"  # the manifest's "format"
FORMAT_VERSION = 1             # the manifest's "version"; files of another version are refused
MANIFEST = "tensorplan.json"
PROGRAM_MEMBER = "program.pt2"
PLAN_MEMBER = "plan.json"
CHECKED_FIELDS = ("storage", "shape", "dtype", "dim_order", "strides", "nbytes", "const")


def save_program(program: Program, path: str | os.PathLike[str]) -> None:
    """Write ``program`` to ``path`` (replaced atomically); ``load_program`` reads it back."""
    exported = io.BytesIO()
    try:
        torch.export.save(program.exported_program, exported)
    except Exception as error:  # torch.export's serializer: NotImplementedError, ValueError, ...
        message = str(error).splitlines()[0] if str(error) else ""
        hint = ("an input or output container type (e.g. torch.return_types.topk) has no "
                "serialized name: return a plain tuple of tensors instead"
                if "serializ" in message else "the program runs, it only cannot be saved")
        raise FormatError(f"save: torch.export cannot serialize this program "
                          f"({type(error).__name__}: {message}); {hint}") from error
    manifest = {"format": FORMAT, "version": FORMAT_VERSION, "torch": torch.__version__}
    partial = f"{os.fspath(path)}.{os.getpid()}.partial"
    try:
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(MANIFEST, json.dumps(manifest, indent=2))
            archive.writestr(PLAN_MEMBER, json.dumps(plan_to_json(program), indent=1))
            archive.writestr(PROGRAM_MEMBER, exported.getvalue())
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def is_artifact(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a zip archive holding a tensorplan manifest, whatever its name."""
    try:
        with zipfile.ZipFile(path) as archive:
            return MANIFEST in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def load_program(path: str | os.PathLike[str]) -> Program:
    """Read a file written by ``save_program``: the same program, specs and plan, verified.

    The plan is the saved one, field by field; nothing is re-planned. Raises ``FormatError``
    for a truncated, corrupted or foreign file, a file of another format version, or a plan
    that does not fit the embedded program.
    """
    where = os.fspath(path)
    contents = _read_archive(where)
    plan_fields = _Fields(contents.plan, f"{where}: {PLAN_MEMBER}")
    _check_kind(plan_fields, "schema", SCHEMA, SCHEMA_VERSION)
    plan = _plan(plan_fields)
    exported = load_exported(contents.program, f"{where}: {PROGRAM_MEMBER}")
    roles = read_roles(exported)
    specs = propagate(exported, roles)
    alias = analyze(exported, specs, roles)
    specs = planned_specs(specs, alias)
    _check_values(plan_fields.objects("values"), specs)
    _check_fit(plan, exported, alias, plan_fields.where)
    return Program(exported_program=exported, specs=specs, alias=alias, plan=plan, roles=roles)


@dataclass(frozen=True)
class _Contents:
    """The members of an archive, decoded as far as JSON."""

    plan: Any        # plan.json, parsed
    program: bytes   # program.pt2, raw


def _read_archive(where: str) -> _Contents:
    try:
        with zipfile.ZipFile(where) as archive:
            if MANIFEST not in archive.namelist():
                raise FormatError(f"{where}: not a tensorplan program file (no {MANIFEST}); a "
                                  "torch.export .pt2 file is compiled with tp.compile(path)")
            manifest = _Fields(_json(archive.read(MANIFEST), f"{where}: {MANIFEST}"),
                               f"{where}: {MANIFEST}")
            _check_kind(manifest, "format", FORMAT, FORMAT_VERSION)
            plan = _json(_member(archive, PLAN_MEMBER, where), f"{where}: {PLAN_MEMBER}")
            return _Contents(plan, _member(archive, PROGRAM_MEMBER, where))
    except OSError as error:
        raise FormatError(f"{where}: cannot read the file ({error.strerror or error})") from error
    except (EOFError, zipfile.BadZipFile, zlib.error) as error:
        raise FormatError(f"{where}: not a readable zip archive, the file is truncated or "
                          f"corrupted ({type(error).__name__}: {error})") from error


def _member(archive: zipfile.ZipFile, name: str, where: str) -> bytes:
    if name not in archive.namelist():
        raise FormatError(f"{where}: the archive has no {name}")
    return archive.read(name)


def _json(data: bytes, where: str) -> Any:
    try:
        return json.loads(data)
    except ValueError as error:
        raise FormatError(f"{where}: not valid JSON ({error})") from error


def _is(value: Any, kind: type) -> bool:
    """isinstance, except that a bool is not an int."""
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


class _Fields:
    """Typed reads of one JSON object; a missing or mistyped field raises ``FormatError``."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise FormatError(f"{where}: expected a JSON object, got {type(data).__name__}")
        self.data = data
        self.where = where

    def get(self, key: str, kind: type) -> Any:
        if key not in self.data:
            raise FormatError(f"{self.where}: missing field {key!r}")
        value = self.data[key]
        if not _is(value, kind):
            raise FormatError(f"{self.where}: field {key!r} should be {kind.__name__}, "
                              f"got {value!r}")
        return value

    def items(self, key: str, kind: type) -> tuple[Any, ...]:
        values = self.get(key, list)
        if not all(_is(v, kind) for v in values):
            raise FormatError(f"{self.where}: field {key!r} should hold only {kind.__name__}")
        return tuple(values)

    def objects(self, key: str) -> list[_Fields]:
        return [_Fields(item, f"{self.where}: {key}[{i}]")
                for i, item in enumerate(self.get(key, list))]


def _check_kind(fields: _Fields, key: str, name: str, version: int) -> None:
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


def _storage(f: _Fields) -> PlannedStorage:
    kind = f.get("kind", str)
    if kind not in get_args(StorageKind):
        raise FormatError(f"{f.where}: unknown storage kind {kind!r}")
    return PlannedStorage(id=f.get("id", int), offset=f.get("offset", int),
                          size=f.get("size", int), start=f.get("start", int),
                          end=f.get("end", int), kind=kind, graph=f.get("graph", str),
                          values=f.items("values", str))


def _region(f: _Fields) -> PlannedRegion:
    return PlannedRegion(node=f.get("node", str), graph=f.get("graph", str),
                         offset=f.get("offset", int), size=f.get("size", int),
                         step=f.get("step", int), subgraphs=f.items("subgraphs", str))


def _plan(f: _Fields) -> MemoryPlan:
    """The saved plan, field by field, after its own ``verify()``."""
    storages = [_storage(s) for s in f.objects("storages")]
    by_id = {s.id: s for s in storages}
    if len(by_id) != len(storages):
        raise FormatError(f"{f.where}: storages: the same storage id appears twice")
    alignment = f.get("alignment", int)
    if alignment < 1:
        raise FormatError(f"{f.where}: alignment {alignment} is not a positive number of bytes")
    plan = MemoryPlan(arena_bytes=f.get("arena_bytes", int),
                      lower_bound_bytes=f.get("lower_bound_bytes", int),
                      algorithm=f.get("algorithm", str), alignment=alignment,
                      optimal=f.get("optimal", bool), storages=by_id,
                      regions=tuple(_region(r) for r in f.objects("regions")))
    _verify(plan, f"{f.where}: the saved plan is invalid")
    return plan


def _verify(plan: MemoryPlan, problem: str) -> None:
    try:
        plan.verify()
    except PlanError as error:
        raise FormatError(f"{problem}: {error}") from error


def _check_values(saved: list[_Fields], specs: SpecTable) -> None:
    """Every saved value exists in the program with the same spec (storage included)."""
    derived = {name: value_to_json(name, spec) for name, spec in specs.tensors()}
    for entry in saved:
        name = entry.get("name", str)
        if name not in derived:
            raise FormatError(f"{entry.where}: value {name!r} is not in the embedded program")
        for key in CHECKED_FIELDS:
            if entry.data.get(key) != derived[name][key]:
                raise FormatError(f"{entry.where}: value {name!r} has {key} "
                                  f"{entry.data.get(key)!r} in the file but "
                                  f"{derived[name][key]!r} in the embedded program")


def _check_fit(plan: MemoryPlan, program: ExportedProgram, alias: AliasTable,
               where: str) -> None:
    """The plan places exactly the program's storages, each big enough, safe for its schedule.

    The program's schedule is recomputed from its graph, so a plan saved with edited
    lifetimes (or a graph whose steps moved) is checked against the steps that will run.
    """
    lives = lifetimes(program, alias)
    spans = {lt.storage: lt for graph in lives.values() for lt in graph.lifetimes}
    steps = {r.node: r for graph in lives.values() for r in graph.regions}
    if set(spans) != set(plan.storages):
        raise FormatError(f"{where}: the plan places storages {sorted(plan.storages)} but the "
                          f"embedded program has storages {sorted(spans)}")
    if {r.node: r.subgraphs for r in plan.regions} != {n: r.subgraphs for n, r in steps.items()}:
        raise FormatError(f"{where}: the plan's control-flow regions differ from the program's")
    for placed in plan.storages.values():
        _check_storage(placed, alias, where)
    rescheduled = replace(
        plan,
        storages={sid: replace(s, start=spans[sid].start, end=spans[sid].end)
                  for sid, s in plan.storages.items()},
        regions=tuple(replace(r, step=steps[r.node].step) for r in plan.regions))
    _verify(rescheduled, f"{where}: the plan is unsafe for the embedded program's schedule")


def _check_storage(placed: PlannedStorage, alias: AliasTable, where: str) -> None:
    storage = alias.storages[placed.id]
    if placed.size < storage.nbytes:
        raise FormatError(f"{where}: storage {placed.id} ({', '.join(storage.values)}) has "
                          f"{placed.size} bytes but needs {storage.nbytes}")
    if (placed.kind, placed.graph) != (storage.kind, storage.graph):
        raise FormatError(f"{where}: storage {placed.id} is a {placed.kind} of graph "
                          f"{placed.graph!r} in the file but a {storage.kind} of graph "
                          f"{storage.graph!r} in the embedded program")
