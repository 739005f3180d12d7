"""The plan as data for other tools: a JSON document (``encoding.py``) and a C header."""

from __future__ import annotations

import re
from typing import Any

from tensorplan.plan.plan import MemoryPlan, PlannedStorage
from tensorplan.plan.symbolic.sizes import SizeExpr
from tensorplan.program import Program
from tensorplan.report.c_values import SHARED_TYPES, c_array, value_table


def plan_to_json(program: Program, name: str = "model") -> dict[str, Any]:
    """The plan and every tensor value's spec as a JSON-ready dict (see ``encoding.encode_plan``),
    with the compile's options (``Program.document``).

    >>> import torch, tensorplan as tp
    >>> doc = plan_to_json(tp.compile(torch.nn.Linear(4, 2), (torch.randn(3, 4),)), "linear")
    >>> doc["schema"], doc["model"]["name"], doc["arena_bytes"]
    ('tensorplan.plan', 'linear', 80)
    """
    return program.document(name)


def c_identifier(text: str) -> str:
    """``text`` as an upper-case C identifier: runs of other characters become one ``_``.

    >>> c_identifier("native_layer_norm[1]"), c_identifier("true_graph_0/add"), c_identifier("3d")
    ('NATIVE_LAYER_NORM_1', 'TRUE_GRAPH_0_ADD', 'M_3D')
    """
    word = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").upper()
    return f"M_{word}" if not word or word[0].isdigit() else word


def _comment(text: str) -> str:
    return "/* " + text.replace("*/", "* /") + " */"


def _storage_lines(prefix: str, s: PlannedStorage) -> tuple[str, list[str]]:
    """The macro stem of one storage and its comment and two ``#define`` lines (three with
    banks: its bank's id)."""
    stem = f"{prefix}_S{s.id}_{c_identifier(s.values[0]) if s.values else 'EMPTY'}"
    where = f" of {s.graph}" if s.graph else ""
    bank = f", bank {s.bank}" if s.bank else ""
    return stem, [
        _comment(f"storage {s.id}, {s.kind}, steps [{s.start}, {s.end}){where}{bank}: "
                 + ", ".join(s.values)),
        f"#define {stem}_OFFSET {s.offset}u",
        f"#define {stem}_SIZE {s.size}u",
        *([f"#define {stem}_BANK {_bank_stem(prefix, s.bank)}_ID"] if s.bank else []),
    ]


def _bank_stem(prefix: str, bank: str) -> str:
    return f"{prefix}_BANK_{c_identifier(bank)}"


def _bank_lines(prefix: str, plan: MemoryPlan, stems: dict[int, str]) -> list[str]:
    """Per memory bank: its id, arena bytes, capacity, and its own table of storage ids and
    offsets (offsets from the start of that bank's arena)."""
    lower = prefix.lower()
    lines = [f"#define {prefix}_NUM_BANKS {len(plan.banks)}u", ""]
    for index, bank in enumerate(plan.banks):
        stem = _bank_stem(prefix, bank.name)
        members = sorted(s.id for s in plan.storages.values() if s.bank == bank.name)
        lines += [_comment(f"bank {bank.name}: cost {bank.cost:g} per byte moved, "
                           f"{bank.traffic_bytes} B moved per run"),
                  f"#define {stem}_ID {index}u",
                  f"#define {stem}_ARENA_BYTES {bank.arena_bytes}u",
                  f"#define {stem}_CONSTANT_BYTES {bank.constant_bytes}u",
                  *([f"#define {stem}_CAPACITY {bank.capacity}u"]
                    if bank.capacity is not None else []),
                  f"#define {stem}_NUM_STORAGES {len(members)}u"]
        if members:
            name = f"{lower}_bank_{c_identifier(bank.name).lower()}"
            count = f"{stem}_NUM_STORAGES"
            lines += c_array("uint32_t", f"{name}_storage_ids", count, [str(i) for i in members])
            lines += c_array("uint64_t", f"{name}_storage_offsets", count,
                            [f"{stems[i]}_OFFSET" for i in members])
        lines.append("")
    return lines


def _symbolic_lines(prefix: str, plan: MemoryPlan, stems: list[str]) -> list[str]:
    """Per dim its range, then ``static inline`` functions of the dims: the arena's bytes,
    and each storage's offset and size, at the sizes a run has (none for a static plan)."""
    sym = plan.symbolic
    if sym is None:
        return []
    lower = prefix.lower()
    params = ", ".join(f"int64_t {d.name}" for d in sym.dims)
    names = ", ".join(d.name for d in sym.dims)
    maximum, align = f"{lower}_max_i64", f"{lower}_align_i64"
    lines = [_comment("the plan as functions of the dynamic dims: valid at every size in "
                      "range, with no two live storages overlapping"),
             f"#define {prefix}_NUM_DIMS {len(sym.dims)}u"]
    for d in sym.dims:
        lines += [f"#define {prefix}_DIM_{c_identifier(d.name)}_MIN {d.lower}",
                  f"#define {prefix}_DIM_{c_identifier(d.name)}_MAX {d.upper}"]
    unused = [f"    (void){d.name};" for d in sym.dims]

    def function(name: str, expr: SizeExpr) -> list[str]:
        return [f"static inline int64_t {name}({params}) {{", *unused,
                f"    return {expr.c_text('int64_t', maximum, align)};", "}"]

    lines += [f"static inline int64_t {maximum}(int64_t a, int64_t b) {{ return a > b ? a : b; }}",
              f"static inline int64_t {align}(int64_t x, int64_t k) {{",
              "    return x >= 0 ? (x + k - 1) / k * k : -((-x) / k * k);", "}",
              *function(f"{lower}_arena_bytes_at", sym.arena)]
    for sid, stem in zip(sorted(plan.storages), stems, strict=True):
        lines += function(f"{stem.lower()}_offset_at", sym.offsets[sid])
        lines += function(f"{stem.lower()}_size_at", sym.sizes[sid])
    for what in ("offset", "size"):
        cases = [f"    case {sid}u: return {stem.lower()}_{what}_at({names});"
                 for sid, stem in zip(sorted(plan.storages), stems, strict=True)]
        lines += [f"static inline int64_t {lower}_storage_{what}_at(uint32_t id, {params}) {{",
                  "    switch (id) {", *cases, "    default: return -1;", "    }", "}"]
    return [*lines, ""]


def _header_numbers(prefix: str, plan: MemoryPlan) -> list[str]:
    return [
        f"#define {prefix}_ARENA_BYTES {plan.arena_bytes}u",
        f"#define {prefix}_LOWER_BOUND_BYTES {plan.lower_bound_bytes}u",
        f"#define {prefix}_ALIGNMENT {plan.alignment}u",
        f"#define {prefix}_NUM_STORAGES {len(plan.storages)}u",
        *([f"#define {prefix}_INPUT_BYTES {plan.input_bytes}u"] if plan.input_bytes else []),
    ]


def plan_to_c_header(program: Program, name: str = "model") -> str:
    """A self-contained C header describing the plan for a device runtime.

    Defines ``<NAME>_ARENA_BYTES``, ``_LOWER_BOUND_BYTES``, ``_ALIGNMENT``, ``_NUM_STORAGES``,
    and for each storage ``<NAME>_S<id>_<VALUE>_OFFSET`` / ``_SIZE`` (``VALUE`` from its first
    value's name, with a comment naming all its values), plus the ``static const`` arrays
    ``<name>_storage_ids``, ``_offsets`` and ``_sizes`` in storage-id order. Offsets are bytes
    from the start of the arena, subgraph storages included. Then the value table (see
    ``c_values.value_table``): ``<NAME>_NUM_VALUES`` and ``<name>_values``, one
    ``tensorplan_value_t`` per planned value (name, storage, offset, size, lifetime, dtype code,
    kind, rank, upper-bound shape, dim order), with ``<name>_graphs`` naming the graphs.

    With the inputs outside the arena (``compile(inputs_in_arena=False)``), ``_INPUT_BYTES``
    is the size of their own buffer, laid out right after the arena: an input storage's
    offset minus ``_ARENA_BYTES`` is its offset in that buffer.

    With memory banks, ``_ARENA_BYTES`` is their sum and offsets are from the start of each
    storage's bank: ``<NAME>_NUM_BANKS``, and per bank ``<NAME>_BANK_<BANK>_ID``,
    ``_ARENA_BYTES``, ``_CONSTANT_BYTES``, ``_CAPACITY`` (bounded banks), ``_NUM_STORAGES`` and
    its own ``<name>_bank_<bank>_storage_ids`` / ``_storage_offsets``; each storage's
    ``_BANK`` names its bank's id, and ``<name>_storage_banks`` lists them in storage-id order.

    With dynamic dims the macros and tables hold the plan at the upper bounds (a buffer of
    ``_ARENA_BYTES`` serves every size), and ``static inline`` functions of the dims (by Dim
    name, ``int64_t``) give the plan at a run's sizes: ``<name>_arena_bytes_at(...)``, per
    storage ``<name>_s<id>_<value>_offset_at`` / ``_size_at``, and
    ``<name>_storage_offset_at(id, ...)`` / ``_storage_size_at(id, ...)`` (-1 for an unknown
    id); ``<NAME>_DIM_<DIM>_MIN`` / ``_MAX`` give each range.
    """
    prefix = c_identifier(name)
    lower = prefix.lower()
    plan = program.plan
    storages = [plan.storages[sid] for sid in sorted(plan.storages)]
    lines = [_comment(f"tensorplan memory plan of {name!r}; generated, do not edit."),
             f"#ifndef TENSORPLAN_{prefix}_H", f"#define TENSORPLAN_{prefix}_H", "",
             "#include <stdint.h>", "", *SHARED_TYPES, "", *_header_numbers(prefix, plan), ""]
    stems = []
    for storage in storages:
        stem, block = _storage_lines(prefix, storage)
        stems.append(stem)
        lines += [*block, ""]
    if plan.banks:
        lines += _bank_lines(prefix, plan, {s.id: stem for s, stem in zip(storages, stems,
                                                                         strict=True)})
    lines += _symbolic_lines(prefix, plan, stems)
    if storages:
        count = f"{prefix}_NUM_STORAGES"
        lines += c_array("uint32_t", f"{lower}_storage_ids", count, [str(s.id) for s in storages])
        lines += c_array("uint64_t", f"{lower}_storage_offsets", count,
                        [f"{stem}_OFFSET" for stem in stems])
        lines += c_array("uint64_t", f"{lower}_storage_sizes", count,
                        [f"{stem}_SIZE" for stem in stems])
        if plan.banks:
            lines += c_array("uint32_t", f"{lower}_storage_banks", count,
                            [f"{stem}_BANK" for stem in stems])
        lines.append("")
    lines += [*value_table(prefix, plan, program.specs), ""]
    lines.append(f"#endif {_comment(f'TENSORPLAN_{prefix}_H')}")
    return "\n".join(lines) + "\n"
