"""The plan as one interactive HTML page: the arena over time, the peak, a storage table.

The page is a single file (its script, style and data inline; no network, works from
``file://``). Every storage is a rectangle ``[start, end) x [offset, offset + size)`` on a canvas,
coloured by kind; hovering shows its values (name, op, dtype, upper-bound shape, dim order),
offset, size and lifetime; clicking one highlights it and lists every value that shares it.
Above it are the summary numbers, beside it what is live at the peak step, largest first, and
below it a table of storages, sortable by any column and filterable by value name. Drawing is
one canvas pass and the table shows 500 rows at a time, so 10,000-storage plans stay quick.

A plan with dynamic dims (``plan.symbolic``) gets one slider per dim, from its lower to its
upper bound (``dim-<name>``, starting at the upper bound), and is drawn at the sizes they set:
every storage's offset and size, every region's offset, the arena, the lower bound and the peak.
The page embeds the symbolic plan's expressions (``SizeExpr.to_json``: the largest of terms,
each a poly plus polys rounded up to a multiple) and its script evaluates them, rather than
embedding the plan at every size: exact, small, and the same for any number of dims. It uses
plain JavaScript numbers, exact while every value (a poly's terms and sums included) stays
below 2**53 bytes. The lower bound at a size is the most aligned bytes live at one top-level
step, each storage taking what its largest value needs there (``MemoryPlan.lower_bound_at``).
A static plan's page has no slider and no expressions.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

import torch

from tensorplan.formats.dsa import DsaInstance
from tensorplan.formats.encoding import dtype_name
from tensorplan.plan.plan import MemoryPlan, PlannedStorage
from tensorplan.plan.planners import Placement
from tensorplan.plan.symbolic.dims import SymbolicPlan
from tensorplan.program import Program
from tensorplan.report.geometry import (
    KIND_COLOURS,
    KIND_MEANINGS,
    PEAK_COLOUR,
    REGION_COLOUR,
    first_step,
    graph_steps,
    peak,
    x_maps,
)
from tensorplan.report.rewrites import Note, rewrite_notes
from tensorplan.report.tables import plan_numbers
from tensorplan.report.text import bytes_text, shape_text

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<style>
@STYLE@
</style>
</head>
<body>
<h1>@TITLE@</h1>
<div id="summary"></div>
<div id="legend"></div>
<div id="chart"><canvas id="base"></canvas><canvas id="over"></canvas><div id="tip" hidden></div>
</div>
<p class="hint">Hover a rectangle for its values; click it to select its storage. Wheel: zoom
the steps (shift + wheel: the bytes); drag: pan; double-click: the whole plan.</p>
<div class="panels"><section id="peak"></section><section id="selected"></section></div>
<h2>Storages</h2>
<input id="filter" type="search" placeholder="filter by value name">
<p id="table-note" class="more"></p>
<div id="table-wrap"><table id="storages"><thead id="storage-head"></thead>
<tbody id="storage-rows"></tbody></table></div>
<script type="application/json" id="plan-data">@DATA@</script>
<script>
@SCRIPT@
</script>
</body>
</html>
"""


def _op_text(node: torch.fx.Node) -> str:
    if node.op == "placeholder":
        return "input"
    if isinstance(node.target, torch._ops.OpOverload):
        return str(node.target)
    name = getattr(node.target, "name", None)
    return name() if callable(name) else getattr(node.target, "__name__", str(node.target))


def value_ops(program: Program) -> dict[str, str]:
    """Value name -> the op that computes it (``aten.addmm.default``, ``cond``, ``input``...).

    Names inside subgraphs are ``<submodule>/<node>``, as in the spec table.
    """
    ops: dict[str, str] = {}

    def walk(module: torch.fx.GraphModule, prefix: str) -> None:
        for node in module.graph.nodes:
            ops[prefix + node.name] = _op_text(node)
            child = getattr(module, str(node.target), None) if node.op == "get_attr" else None
            if isinstance(child, torch.fx.GraphModule):
                walk(child, f"{prefix}{node.target}/")

    walk(program.exported_program.graph_module, "")
    return ops


def value_details(program: Program) -> dict[str, dict[str, Any]]:
    """What the page says about each tensor value: op, dtype, shape, dim order, bytes."""
    ops = value_ops(program)
    names = program.specs.dim_names
    return {name: {"op": ops.get(name.partition("[")[0], "?"), "dtype": dtype_name(spec.dtype),
                   "shape": shape_text(spec, names), "dim_order": list(spec.dim_order),
                   "nbytes": spec.nbytes}
            for name, spec in program.specs.tensors()}


def _summary(plan: MemoryPlan, peak_step: int) -> list[tuple[str, str]]:
    """The summary's (label, text) rows; with dynamic dims, the arena at the upper bounds too
    (the page recomputes the arena, lower bound, ratio, optimal and peak rows at each size)."""
    rows = [*plan_numbers(plan), ("peak step", str(peak_step))]
    if plan.symbolic is None:
        return rows
    rows = [(f"{label} (at the upper bounds)" if label == "baseline bound" else label, text)
            for label, text in rows]
    rows.insert(1, ("arena at the upper bounds", bytes_text(plan.arena_bytes_at())))
    return rows


def _symbolic_data(symbolic: SymbolicPlan) -> dict[str, Any]:
    """What the page needs to draw the plan at any size: the dims, the alignment, the arena."""
    return {"dims": [{"name": d.name, "lower": d.lower, "upper": d.upper}
                     for d in symbolic.dims],
            "alignment": symbolic.alignment, "arena": symbolic.arena.to_json()}


def _storage_exprs(symbolic: SymbolicPlan | None, storage: int) -> dict[str, Any]:
    """A storage's offset, size and need as expressions (``{}`` for a static plan)."""
    if symbolic is None:
        return {}
    return {"expr": {"offset": symbolic.offsets[storage].to_json(),
                     "size": symbolic.sizes[storage].to_json(),
                     "need": symbolic.needs[storage].to_json()}}


def _region_exprs(symbolic: SymbolicPlan | None, node: str) -> dict[str, Any]:
    """A region's offset as an expression (``{}`` for a static plan)."""
    if symbolic is None:
        return {}
    return {"expr": {"offset": symbolic.region_offsets[node].to_json()}}


def page_data(plan: MemoryPlan, values: Mapping[str, Mapping[str, Any]],
              notes: Sequence[Note] = ()) -> dict[str, Any]:
    """The JSON the page's script draws: numbers, the time axis, storages, regions, peak.

    ``notes`` (``rewrites.py``) add a summary row per rewrite (patched, chunked) saying what
    was kept and where.

    ``values`` describes values by name (see ``value_details``); a storage's values missing
    from it are shown by name alone. With memory banks, the banks are drawn one above the
    other, fastest at the bottom: a storage's ``offset`` is where it is drawn (its bank's base
    plus its offset, ``in_bank``), and ``banks`` gives each bank's base, arena and capacity.
    With dynamic dims, ``symbolic`` holds the dims, the alignment and the arena's expression,
    and every storage and region an ``expr`` of its offset (and a storage's size and need).
    """
    maps = x_maps(plan)
    top = peak(plan)
    kinds = sorted({s.kind for s in plan.storages.values()})
    sym = plan.symbolic
    return {
        "summary": [*_summary(plan, top.step),
                    *((n.label, f"{n.summary}: {n.detail}") for n in notes)],
        "arena": plan.arena_bytes,
        "lower_bound": plan.lower_bound_bytes,
        "x": [first_step(plan), graph_steps(plan, "")],
        "peak": {"step": top.step, "bytes": top.live_bytes, "storages": list(top.storages),
                 "regions": list(top.regions)},
        "kinds": {k: {"colour": KIND_COLOURS[k], "meaning": KIND_MEANINGS[k]} for k in kinds},
        "region_colour": REGION_COLOUR,
        "peak_colour": PEAK_COLOUR,
        "storages": [{"id": s.id, "offset": plan.address(s.id), "size": s.size,
                      "start": s.start, "end": s.end, "kind": s.kind, "graph": s.graph,
                      "x0": maps[s.graph](s.start), "x1": maps[s.graph](s.end),
                      "values": list(s.values),
                      **({"bank": s.bank, "in_bank": s.offset} if s.bank else {}),
                      **_storage_exprs(sym, s.id)}
                     for s in sorted(plan.storages.values(), key=lambda s: s.id)],
        "banks": [{"name": b.name, "base": plan.bank_base(b.name), "arena": b.arena_bytes,
                   "capacity": b.capacity} for b in plan.banks],
        "regions": [{"node": r.node, "graph": r.graph, "offset": plan.bank_base(r.bank) + r.offset,
                     "size": r.size,
                     "step": r.step, "subgraphs": list(r.subgraphs),
                     "x0": maps[r.graph](r.step), "x1": maps[r.graph](r.step + 1),
                     **_region_exprs(sym, r.node)}
                    for r in plan.regions],
        "values": values,
        **({"symbolic": _symbolic_data(sym)} if sym is not None else {}),
    }


def render_page(title: str, data: Mapping[str, Any]) -> str:
    """The self-contained page: ``data`` (from ``page_data``) inline with its script and style."""
    assets = resources.files(__package__)
    script = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return (PAGE.replace("@TITLE@", html.escape(title))
            .replace("@STYLE@", assets.joinpath("page.css").read_text(encoding="utf-8"))
            .replace("@SCRIPT@", assets.joinpath("page.js").read_text(encoding="utf-8"))
            .replace("@DATA@", script))


def write_page(path: str | os.PathLike[str], title: str, plan: MemoryPlan,
               values: Mapping[str, Mapping[str, Any]], notes: Sequence[Note] = ()) -> None:
    """Write the page of ``plan`` to ``path``; ``values`` describes the values by name,
    ``notes`` the rewrites the program went through."""
    page = render_page(title, page_data(plan, values, notes))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(page)


def write_html(program: Program, path: str | os.PathLike[str], name: str = "model") -> None:
    """Write the interactive memory report of ``program`` to ``path`` (one self-contained file).

    Open it in any browser, from disk. See the module docstring for what the page shows.
    """
    write_page(path, f"{name}: memory plan", program.plan, value_details(program),
               rewrite_notes(program))


def placement_plan(instance: DsaInstance, placement: Placement) -> MemoryPlan:
    """A DSA instance's placement as a plan: one activation storage per buffer, named by its id.

    Storage ids are row numbers (0 is the first data row); the plan is not re-verified.
    """
    storages = {i: PlannedStorage(i, offset, b.size, b.start, b.end, "activation", "", (name,))
                for i, (b, offset, name) in enumerate(zip(instance.problem.buffers,
                                                          placement.offsets, instance.ids,
                                                          strict=True))}
    return MemoryPlan(arena_bytes=placement.peak, lower_bound_bytes=placement.lower_bound,
                      algorithm=placement.algorithm, alignment=1, optimal=placement.optimal,
                      storages=storages, regions=())
