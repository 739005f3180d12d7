"""The plan as one interactive HTML page: the arena over time, the peak, a storage table.

The page is a single file (its script, style and data inline; no network, works from
``file://``). Every storage is a rectangle ``[start, end) x [offset, offset + size)`` on a canvas,
coloured by kind; hovering shows its values (name, op, dtype, shape, dim order, bytes),
offset, size and lifetime; clicking one highlights it and lists every value that shares it.
Above it are the summary figures (each with its glossary line as tooltip, and a glossary
below the chart), a mark for each rewrite the program went through (patched: the split and the
grid; chunked: the regions and the chunks), beside it what is live at the peak step, largest
first, and below it a table of storages, sortable by any column and filterable by value name.
Drawing is one canvas pass and the table shows 500 rows at a time, so 10,000-storage plans stay
quick.

With memory banks every bank is drawn on its own axis, fastest at the top, with its own lower
bound and capacity, and a table gives each bank's capacity, arena, bound, traffic and cost
(``banks.bank_rows``, as the terminal table).

A plan with dynamic dims (``plan.symbolic``) gets one slider per dim, from its lower to its
upper bound (``dim-<name>``, starting at the sizes asked for, else at the upper bound), and is
drawn at the sizes they set: every storage's offset and size, every region's offset, the arena,
the lower bound, the peak, and each value's shape and bytes in the tooltip. The page embeds the
symbolic plan's expressions (``SizeExpr.to_json``: the largest of terms, each a poly plus polys
rounded up to a multiple) and its script evaluates them, rather than embedding the plan at
every size: exact, small, and the same for any number of dims. It uses plain JavaScript
numbers, exact while every value (a poly's terms and sums included) stays below 2**53 bytes.
The lower bound at a size is the most aligned bytes live at one top-level step, each storage
taking what its largest value needs there (``MemoryPlan.lower_bound_at``). A static plan's page
has no slider and no expressions.

A DSA instance's page (``tensorplan dsa --html``) is titled by the file's base name and shows
the instance's figures alone: no kinds, graphs, constants or baseline.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping
from importlib import resources
from typing import Any

import torch

from tensorplan.formats.dsa import DsaInstance
from tensorplan.formats.encoding import dtype_name
from tensorplan.plan.plan import MemoryPlan, PlannedStorage
from tensorplan.plan.planners import Placement
from tensorplan.plan.symbolic.dims import SymbolicPlan
from tensorplan.program import Program
from tensorplan.report.banks import BANK_COLUMNS, bank_rows, bank_title, cost_text
from tensorplan.report.geometry import (
    KIND_COLOURS,
    PEAK_COLOUR,
    REGION_COLOUR,
    REWRITE_COLOUR,
    first_step,
    graph_steps,
    kind_meanings,
    peak,
    x_maps,
)
from tensorplan.report.glossary import define
from tensorplan.report.sizes import sized
from tensorplan.report.subject import Subject, model_subject
from tensorplan.report.text import shape_text

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
<div id="marks"></div>
<div id="summary"></div>
<div id="legend"></div>
<div id="chart"><canvas id="base"></canvas><canvas id="over"></canvas><div id="tip" hidden></div>
</div>
<p id="steps" class="hint"></p>
<p class="hint">Hover a rectangle for its values; click it to select its storage. Wheel: zoom
the steps (shift + wheel: the bytes); drag: pan; double-click: the whole plan.</p>
<section id="banks"></section>
<div class="panels"><section id="peak"></section><section id="selected"></section></div>
<section id="glossary"></section>
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
    """What the page says about each tensor value: op, dtype, shape, dim order, bytes; with
    dynamic dims also its dims and bytes as polys (``sizes.sized``), said at the sliders' sizes."""
    ops = value_ops(program)
    names = program.specs.dim_names
    symbolic = program.plan.symbolic
    return {name: {"op": ops.get(name.partition("[")[0], "?"), "dtype": dtype_name(spec.dtype),
                   "shape": shape_text(spec, names), "dim_order": list(spec.dim_order),
                   "nbytes": spec.nbytes, **(sized(spec, symbolic) if symbolic else {})}
            for name, spec in program.specs.tensors()}


def _symbolic_data(symbolic: SymbolicPlan, at: Mapping[str, int]) -> dict[str, Any]:
    """What the page needs to draw the plan at any size: the dims, the sizes it opens at, the
    alignment, the arena."""
    return {"dims": [{"name": d.name, "lower": d.lower, "upper": d.upper}
                     for d in symbolic.dims],
            "at": symbolic.sizes_at(at),
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


def _banks(plan: MemoryPlan) -> dict[str, Any]:
    """Each bank's own axis (arena, lower bound, capacity) and the bank table's texts."""
    if not plan.banks:
        return {"banks": []}
    return {"banks": [{"name": b.name, "arena": b.arena_bytes, "lower_bound": b.lower_bound_bytes,
                       "capacity": b.capacity, "traffic": b.traffic_bytes, "cost": cost_text(b)}
                      for b in plan.banks],
            "bank_table": {"title": bank_title(plan), "columns": list(BANK_COLUMNS),
                           "rows": [list(row) for row in bank_rows(plan)]}}


def _glossary(plan: MemoryPlan, subject: Subject) -> dict[str, str]:
    """The glossary line of every term the page shows: its figures, its rewrites, the steps,
    and with banks the bank table's columns."""
    terms = [label for label, _ in subject.figures] + [n.label for n in subject.notes]
    terms += ["step"] + (list(BANK_COLUMNS) if plan.banks else [])
    if subject.at or plan.symbolic is not None:
        terms.append("sizes")
    return {term: define(term) for term in dict.fromkeys(terms)}


def _storages(plan: MemoryPlan) -> list[dict[str, Any]]:
    """Every storage where it is drawn: its offset in its bank's arena (or the one arena)."""
    maps, sym = x_maps(plan), plan.symbolic
    return [{"id": s.id, "offset": s.offset, "size": s.size, "start": s.start, "end": s.end,
             "kind": s.kind, "graph": s.graph, "bank": s.bank,
             "x0": maps[s.graph](s.start), "x1": maps[s.graph](s.end), "values": list(s.values),
             **_storage_exprs(sym, s.id)}
            for s in sorted(plan.storages.values(), key=lambda s: s.id)]


def _regions(plan: MemoryPlan) -> list[dict[str, Any]]:
    """Every control-flow region, at its offset in its bank's arena (or the one arena)."""
    maps = x_maps(plan)
    return [{"node": r.node, "graph": r.graph, "offset": r.offset, "size": r.size,
             "bank": r.bank, "step": r.step, "subgraphs": list(r.subgraphs),
             "x0": maps[r.graph](r.step), "x1": maps[r.graph](r.step + 1),
             **_region_exprs(plan.symbolic, r.node)}
            for r in plan.regions]


def page_data(plan: MemoryPlan, subject: Subject) -> dict[str, Any]:
    """The JSON the page's script draws: figures, glossary, marks, the time axis, storages,
    regions, banks, the peak.

    ``subject`` gives the summary's figures, the rewrites (one mark and one summary row each:
    what was kept and where) and the values by name (see ``value_details``); a storage's values
    missing from it are shown by name alone. Offsets are within a storage's bank (``bank``,
    "" without banks): each bank is drawn on its own axis. With dynamic dims, ``symbolic``
    holds the dims, the sizes the page opens at, the alignment and the arena's expression, and
    every storage and region an ``expr`` of its offset (and a storage's size and need).
    """
    top = peak(plan)
    kinds = sorted({s.kind for s in plan.storages.values()})
    meanings = kind_meanings(subject.instance)
    return {
        "summary": [*subject.figures,
                    *((n.label, f"{n.summary}: {n.detail}") for n in subject.notes)],
        "marks": [{"label": n.label, "summary": n.summary, "spans": [list(s) for s in n.spans]}
                  for n in subject.notes],
        "glossary": _glossary(plan, subject),
        "instance": subject.instance,
        "placeholders": subject.placeholders,
        "arena": plan.arena_bytes,
        "input_bytes": plan.input_bytes,
        "lower_bound": plan.lower_bound_bytes,
        "x": [first_step(plan), graph_steps(plan, "")],
        "peak": {"step": top.step, "bytes": top.live_bytes, "storages": list(top.storages),
                 "regions": list(top.regions)},
        "kinds": {k: {"colour": KIND_COLOURS[k], "meaning": meanings[k]} for k in kinds},
        "region_colour": REGION_COLOUR,
        "peak_colour": PEAK_COLOUR,
        "rewrite_colour": REWRITE_COLOUR,
        "storages": _storages(plan),
        "regions": _regions(plan),
        **_banks(plan),
        "values": subject.values,
        **({"symbolic": _symbolic_data(plan.symbolic, subject.at)}
           if plan.symbolic is not None else {}),
    }


def render_page(title: str, data: Mapping[str, Any]) -> str:
    """The self-contained page: ``data`` (from ``page_data``) inline with its script and style."""
    assets = resources.files(__package__)
    script = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return (PAGE.replace("@TITLE@", html.escape(title))
            .replace("@STYLE@", assets.joinpath("page.css").read_text(encoding="utf-8"))
            .replace("@SCRIPT@", assets.joinpath("page.js").read_text(encoding="utf-8"))
            .replace("@DATA@", script))


def write_page(path: str | os.PathLike[str], plan: MemoryPlan, subject: Subject) -> None:
    """Write the page of ``plan`` to ``path``, titled and described by ``subject``."""
    page = render_page(subject.title, page_data(plan, subject))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(page)


def write_html(program: Program, path: str | os.PathLike[str], name: str = "model",
               at: Mapping[str, int] | None = None) -> None:
    """Write the interactive memory report of ``program`` to ``path`` (one self-contained file),
    opening at the sizes ``at`` of the dynamic dims (by Dim name; default their upper bounds).

    Open it in any browser, from disk. See the module docstring for what the page shows.
    """
    write_page(path, program.plan, model_subject(program, name, value_details(program), at))


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
