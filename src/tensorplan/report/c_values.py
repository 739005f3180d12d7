"""The C header's value table: one ``tensorplan_value_t`` per planned value, for a device.

The struct type, the dtype codes and the kind codes are shared by every generated header (behind
one include guard), so a firmware that includes the headers of two models sees them once.
Dtype codes are ``c10::ScalarType``'s numbers, the ones ExecuTorch's runtime uses.
"""

from __future__ import annotations

import torch

from tensorplan.errors import TensorPlanError
from tensorplan.formats.encoding import dtype_name
from tensorplan.plan.plan import MemoryPlan
from tensorplan.specs.spec import SpecTable, TensorSpec

DTYPE_CODES = {  # torch dtype -> c10::ScalarType code
    torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
    torch.float16: 5, torch.float32: 6, torch.float64: 7, torch.complex32: 8,
    torch.complex64: 9, torch.complex128: 10, torch.bool: 11, torch.qint8: 12,
    torch.quint8: 13, torch.qint32: 14, torch.bfloat16: 15, torch.quint4x2: 16,
    torch.quint2x4: 17, torch.float8_e5m2: 23, torch.float8_e4m3fn: 24,
    torch.float8_e5m2fnuz: 25, torch.float8_e4m3fnuz: 26, torch.uint16: 27, torch.uint32: 28,
    torch.uint64: 29,
}
KIND_CODES = {"input": 0, "state": 1, "activation": 2}  # StorageKind -> tensorplan_kind

SHARED_TYPES = [
    "#ifndef TENSORPLAN_VALUE_T_DEFINED",
    "#define TENSORPLAN_VALUE_T_DEFINED",
    "/* Element types: c10::ScalarType codes (as ExecuTorch's runtime numbers them). */",
    "enum tensorplan_dtype {",
    ",\n".join(f"    TENSORPLAN_DTYPE_{dtype_name(d).upper()} = {code}"
               for d, code in DTYPE_CODES.items()),
    "};",
    "/* What a storage holds: the caller's input, state kept across runs, or a computed value. */",
    "enum tensorplan_kind {",
    ",\n".join(f"    TENSORPLAN_KIND_{kind.upper()} = {code}" for kind, code in KIND_CODES.items()),
    "};",
    "/* One planned value. Values of one storage share its bytes (views, in-place results);",
    "   two values of different storages in one graph, live at a common step, never overlap. */",
    "typedef struct tensorplan_value {",
    "    const char *name;         /* the value's name (\"<subgraph>/<node>\" inside one) */",
    "    uint32_t storage;         /* storage id */",
    "    uint32_t graph;           /* index into the model's _graphs array; 0: top level */",
    "    uint64_t offset;          /* byte offset of the storage in the arena */",
    "    uint64_t size;            /* value bytes at upper bounds, at most its storage */",
    "    uint32_t start;           /* first step its storage is live, in its graph */",
    "    uint32_t end;             /* first step its storage is no longer live */",
    "    uint8_t dtype;            /* enum tensorplan_dtype */",
    "    uint8_t kind;             /* enum tensorplan_kind */",
    "    uint8_t rank;             /* number of dims */",
    "    const uint64_t *shape;    /* upper bound of each dim, logical order: rank entries */",
    "    const uint8_t *dim_order; /* dims from outermost to innermost in memory */",
    "} tensorplan_value_t;",
    "#endif /* TENSORPLAN_VALUE_T_DEFINED */",
]


def dtype_code(name: str, spec: TensorSpec) -> int:
    """The ``c10::ScalarType`` code of the value's dtype; ``TensorPlanError`` if it has none.

    >>> dtype_code("x", TensorSpec((2,), (2,), torch.float32, (0,), (1,), 8))
    6
    """
    if spec.dtype not in DTYPE_CODES:
        raise TensorPlanError(f"header: value {name!r} has dtype {dtype_name(spec.dtype)}, "
                              "which has no c10::ScalarType code; write the plan as JSON instead")
    return DTYPE_CODES[spec.dtype]


def _c_string(text: str) -> str:
    """``text`` as a C string literal (quotes and backslashes escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _planned(plan: MemoryPlan, specs: SpecTable) -> list[tuple[str, TensorSpec]]:
    """The tensor values placed in the arena, by storage id, then in definition order."""
    placed = [(name, spec) for name, spec in specs.tensors()
              if spec.storage is not None and spec.storage in plan.storages]
    order = {sid: i for i, sid in enumerate(sorted(plan.storages))}
    return sorted(placed, key=lambda item: order[item[1].storage])


def c_array(ctype: str, name: str, count: str, items: list[str]) -> list[str]:
    """Lines of ``static const <ctype> <name>[<count>] = {...};``, one item per line."""
    body = ",\n".join(f"    {item}" for item in items)
    return [f"static const {ctype} {name}[{count}] = {{", body, "};"]


def value_table(prefix: str, plan: MemoryPlan, specs: SpecTable) -> list[str]:
    """Lines of ``<PREFIX>_NUM_VALUES``, ``_NUM_GRAPHS``, ``<prefix>_graphs`` and ``_values``.

    ``<prefix>_values`` has one ``tensorplan_value_t`` per value placed in the arena; shapes
    and dim orders point into the flat ``<prefix>_value_dims`` / ``_value_dim_orders``.
    """
    lower = prefix.lower()
    values = _planned(plan, specs)
    graphs = ["", *sorted({s.graph for s in plan.storages.values()} - {""})]
    lines = [f"#define {prefix}_NUM_VALUES {len(values)}u",
             f"#define {prefix}_NUM_GRAPHS {len(graphs)}u",
             *c_array("char *const", f"{lower}_graphs", f"{prefix}_NUM_GRAPHS",
                     [_c_string(g) for g in graphs])]
    if not values:
        return lines
    dims, orders, rows, at = [], [], [], 0
    for name, spec in values:
        storage = plan.storages[spec.storage]
        if spec.shape:  # one line per value; a scalar has no dims
            dims.append(", ".join(f"{d}u" for d in spec.shape))
            orders.append(", ".join(f"{d}u" for d in spec.dim_order))
        size = min(spec.nbytes, storage.size)  # a view (an expand) addresses no more
        rows.append(f"{{{_c_string(name)}, {storage.id}u, {graphs.index(storage.graph)}u, "
                    f"{storage.offset}u, {size}u, {storage.start}u, {storage.end}u, "
                    f"{dtype_code(name, spec)}u, {KIND_CODES[storage.kind]}u, "
                    f"{len(spec.shape)}u, {lower}_value_dims + {at}, "
                    f"{lower}_value_dim_orders + {at}}}")
        at += len(spec.shape)
    return [*lines,
            *c_array("uint64_t", f"{lower}_value_dims", str(max(at, 1)), dims or ["0u"]),
            *c_array("uint8_t", f"{lower}_value_dim_orders", str(max(at, 1)), orders or ["0u"]),
            *c_array("tensorplan_value_t", f"{lower}_values", f"{prefix}_NUM_VALUES", rows)]
