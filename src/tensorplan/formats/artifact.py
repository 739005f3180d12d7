"""A program file: the parts of a compiled ``Program`` in one file, read back without re-planning.

The file is a zip archive of three members:

- ``tensorplan.json``: the manifest, ``{"format": "tensorplan.program", "version": 1, ...}``;
- ``program.pt2``: the core-ATen program, as written by ``torch.export.save``;
- ``plan.json``: the plan and every value's spec, as ``encoding.encode_plan`` writes them.

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

import contextlib
import io
import json
import os
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.export import ExportedProgram

from tensorplan.analysis.alias import AliasTable, planned_specs
from tensorplan.analysis.liveness import lifetimes
from tensorplan.errors import FormatError
from tensorplan.formats.encoding import (
    Fields,
    check_kind,
    check_values,
    decode_plan,
    decode_schedule,
    parse_json,
    verify_decoded,
)
from tensorplan.formats.options_json import OPTIONS_KEY, decode_options
from tensorplan.frontend.pt2 import load_exported, save_exported
from tensorplan.frontend.roles import Roles, read_roles
from tensorplan.options import CompileOptions
from tensorplan.plan.plan import MemoryPlan, PlannedStorage, PlanOptions
from tensorplan.schedule.schedule import Decided, Schedule, replay
from tensorplan.specs.propagate import propagate
from tensorplan.specs.spec import SpecTable

FORMAT = "tensorplan.program"  # the manifest's "format"
FORMAT_VERSION = 1             # the manifest's "version"; files of another version are refused
MANIFEST = "tensorplan.json"
PROGRAM_MEMBER = "program.pt2"
PLAN_MEMBER = "plan.json"


@dataclass(frozen=True)
class ArtifactParts:
    """What a program file holds, checked against each other; ``tp.load`` makes a Program of it."""

    exported_program: ExportedProgram  # the embedded core-ATen program, as stored
    specs: SpecTable                   # every value's spec, with its storage id
    plan: MemoryPlan                   # the saved plan, field by field
    roles: Roles                       # what every placeholder and output is
    schedule: Schedule                 # the saved node order, reuse and folding, made again
    options: CompileOptions            # what the saved program was compiled with


def write_artifact(path: str | os.PathLike[str], exported_program: ExportedProgram,
                   specs: SpecTable, document: Mapping[str, Any]) -> None:
    """Write the program and its plan ``document`` (``encode_plan``'s, with the compile
    options under ``options_json.OPTIONS_KEY``) to ``path`` (replaced atomically).

    ``read_artifact`` reads them back. Raises ``FormatError`` when torch.export cannot
    serialise the program.
    """
    exported = io.BytesIO()
    try:
        with _saveable(exported_program):
            _check_operators(exported_program)
            save_exported(exported_program, exported, specs.dim_names)
    except FormatError:
        raise
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
            archive.writestr(PLAN_MEMBER, json.dumps(document, indent=1))
            archive.writestr(PROGRAM_MEMBER, exported.getvalue())
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


_SAVED_MODULES = ("_operator", "operator", "math", "builtins")  # what torch.export saves by name
_EMPTY = torch.ops.aten.empty.memory_format  # what a scratch allocation is saved as


@contextlib.contextmanager
def _saveable(exported_program: ExportedProgram) -> Iterator[None]:
    """Within: the program as torch.export can save and load it. An ExecuTorch edge-dialect
    operator (its Cortex-M kernels) calls the operator it wraps, which loads by its name
    where it is registered; an ``exir.memory.alloc`` node (a kernel's scratch buffer that
    ExecuTorch's passes add: a Python function) calls ``aten.empty.memory_format`` of the same
    shape and dtype, under the same name: an uninitialized buffer either way, planned the
    same. The program is given back as it was on the way out."""
    changed = []
    for node in exported_program.graph.nodes:
        if node.op != "call_function":
            continue
        wrapped = getattr(node.target, "_op", None)
        if _is_allocation(node.target):
            (shape, dtype), = node.args
            changed.append((node, node.target, node.args, node.kwargs))
            node.target, node.args, node.kwargs = _EMPTY, (list(shape),), {"dtype": dtype}
        elif isinstance(wrapped, torch._ops.OpOverload) \
                and not isinstance(node.target, torch._ops.OpOverload):
            changed.append((node, node.target, node.args, node.kwargs))
            node.target = wrapped
    try:
        yield
    finally:
        for node, target, args, kwargs in changed:
            node.target, node.args, node.kwargs = target, args, kwargs


def _is_allocation(target: object) -> bool:
    """ExecuTorch's ``exir.memory.alloc`` (read by its module and name: executorch is not a
    dependency of the core)."""
    return getattr(target, "__module__", "") == "executorch.exir.memory" \
        and getattr(target, "__name__", "") == "alloc"


def _check_operators(exported_program: ExportedProgram) -> None:
    """Raise ``FormatError`` naming the first node that calls a Python function, not an
    operator: torch.export's serializer saves operators and ``operator``/``math`` builtins
    only (``_saveable`` has made ExecuTorch's edge operators and allocations such)."""
    operators = (torch._ops.OpOverload, torch._ops.HigherOrderOperator)
    for node in exported_program.graph.nodes:
        target = node.target
        if node.op != "call_function" or isinstance(target, operators) \
                or isinstance(getattr(target, "_op", None), operators):
            continue
        module = getattr(target, "__module__", "") or ""
        if module in _SAVED_MODULES or module.startswith("torch"):
            continue
        name = f"{module}.{getattr(target, '__qualname__', target)}"
        raise FormatError(
            f"save: node {node.name} calls {name}, a Python function and not an operator: "
            f"torch.export saves operators only, so this program cannot be saved whole; it "
            f"runs, and its plan can still be written as JSON or a C header "
            f"(tensorplan.report.plan_to_json / plan_to_c_header, or the CLI's "
            f"--json / --header)")


def is_artifact(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a zip archive holding a tensorplan manifest, whatever its name."""
    try:
        with zipfile.ZipFile(path) as archive:
            return MANIFEST in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def read_artifact(path: str | os.PathLike[str]) -> ArtifactParts:
    """Read a file written by ``write_artifact``: the same program, specs and plan, verified.

    The plan is the saved one, field by field; nothing is re-planned. Raises ``FormatError``
    for a truncated, corrupted or foreign file, a file of another format version, or a plan
    that does not fit the embedded program.
    """
    where = os.fspath(path)
    contents = _read_archive(where)
    document = Fields(contents.plan, f"{where}: {PLAN_MEMBER}")
    plan = decode_plan(document)
    exported = load_exported(contents.program, f"{where}: {PROGRAM_MEMBER}")
    roles = read_roles(exported)
    specs = propagate(exported, roles)
    options = decode_options(contents.plan[OPTIONS_KEY], f"{where}: {PLAN_MEMBER}") \
        if OPTIONS_KEY in contents.plan else CompileOptions()
    chosen = _replay(decode_schedule(document), exported, specs, roles, document.where,
                     options.plan)
    specs = planned_specs(specs, chosen.alias)
    check_values(document, specs)
    _check_fit(plan, exported, chosen, document.where)
    return ArtifactParts(exported_program=exported, specs=specs, plan=plan, roles=roles,
                         schedule=chosen, options=options)


def _replay(saved: Decided, exported: ExportedProgram, specs: SpecTable, roles: Roles,
            where: str, plan: PlanOptions) -> Schedule:
    """The saved schedule made again on the embedded program (its inputs counted in the arena
    as its ``plan`` counts them). Nodes the deserialiser added (``getitem`` of unused outputs) run
    right after the node they read."""
    names = [node.name for node in exported.graph.nodes]
    order = list(saved.order) if saved.order is not None else names
    unknown = set(order) - set(names)
    if unknown or len(set(order)) != len(order):
        raise FormatError(f"{where}: schedule: the order names nodes the embedded program "
                          f"does not have ({', '.join(sorted(unknown)) or 'repeated names'})")
    for node in exported.graph.nodes:
        if node.name not in order:
            after = max(order.index(n.name) for n in node.all_input_nodes)
            order.insert(after + 1, node.name)
    return replay(exported, specs, roles, replace(saved, order=tuple(order)), plan)


def read_plan(path: str | os.PathLike[str]) -> Fields:
    """The plan document of a program file, parsed but not checked against its program.

    For tools that only look at the plan (``tensorplan diff``); ``decode_plan`` reads it.
    """
    where = os.fspath(path)
    return Fields(_read_archive(where).plan, f"{where}: {PLAN_MEMBER}")


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
            manifest = Fields(parse_json(archive.read(MANIFEST), f"{where}: {MANIFEST}"),
                              f"{where}: {MANIFEST}")
            check_kind(manifest, "format", FORMAT, FORMAT_VERSION)
            plan = parse_json(_member(archive, PLAN_MEMBER, where), f"{where}: {PLAN_MEMBER}")
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


def _check_fit(plan: MemoryPlan, program: ExportedProgram, chosen: Schedule,
               where: str) -> None:
    """The plan places exactly the program's storages, each big enough, safe for its schedule.

    The lifetimes are recomputed from the graph and the saved order, so a plan saved with
    edited lifetimes (or a graph whose steps moved) is checked against the steps that will run.
    """
    alias = chosen.alias
    lives = lifetimes(program, alias, chosen.order)
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
    verify_decoded(rescheduled, f"{where}: the plan is unsafe for the embedded program's schedule")


def _check_storage(placed: PlannedStorage, alias: AliasTable, where: str) -> None:
    storage = alias.storages[placed.id]
    if placed.size < storage.nbytes:
        raise FormatError(f"{where}: storage {placed.id} ({', '.join(storage.values)}) has "
                          f"{placed.size} bytes but needs {storage.nbytes}")
    if (placed.kind, placed.graph) != (storage.kind, storage.graph):
        raise FormatError(f"{where}: storage {placed.id} is a {placed.kind} of graph "
                          f"{placed.graph!r} in the file but a {storage.kind} of graph "
                          f"{storage.graph!r} in the embedded program")
