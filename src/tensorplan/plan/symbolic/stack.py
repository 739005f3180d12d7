"""Stage 4c: the plan as a function of the dynamic dims (``SymbolicPlan``).

The concrete plan is made at every dim's upper bound. Its storages are then stacked again with
expressions for sizes: taken bottom-up (mutated state first, so it keeps one place at every
size; then by their offset at the bounds), each storage sits at the largest top, over the
storages below it that are live at a common step, of that storage's offset plus its size:

    offset(j) = max over i below j, live with j, of offset(i) + size(i)

With every size a function that is at least what its values take at those sizes, the plan
holds at EVERY size of the range by construction, and at the bounds every offset is at most
the concrete one (the concrete plan satisfies the same inequalities), so the arena never
grows. Sizes are polynomials in the dims (``sizes.Poly``) whose coefficients are multiples of
the alignment, so every offset is aligned at every size. A storage whose size is not such a
polynomial is *held* at its bound size, with the reason (a data-dependent size, a
concatenation made in place at its bound's strides, a subgraph's storage).
``validate.py`` proves the result over the whole range; ``MemoryPlan.at`` gives the
concrete plan at one size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import sympy
from torch.export import ExportedProgram

from tensorplan.analysis.alias import AliasTable
from tensorplan.frontend.dim_names import named
from tensorplan.frontend.fake import program_shape_env
from tensorplan.frontend.roles import Roles
from tensorplan.plan.plan import MemoryPlan, PlannedStorage
from tensorplan.plan.symbolic.dims import DimRange, SymbolicPlan
from tensorplan.plan.symbolic.sizes import Box, Poly, SizeExpr, Term
from tensorplan.specs.spec import SpecTable, canonical


def _dims(program: ExportedProgram, specs: SpecTable,
          roles: Roles) -> dict[sympy.Symbol, DimRange]:
    """The ShapeEnv symbol of each dynamic dim of the user inputs, with its range."""
    _, shape_env = program_shape_env(program)
    if shape_env is None:
        return {}
    symbols: set[sympy.Symbol] = set()
    for name in roles.user_inputs:
        spec = specs.spec_of(name)
        for size in spec.sym_shape if spec is not None else ():
            expr = canonical(size)
            if not isinstance(expr, int):
                symbols |= expr.free_symbols
    ordered = sorted(symbols, key=str)
    dims = {}
    for symbol in ordered:
        known = program.range_constraints.get(symbol) or shape_env.var_to_range[symbol]
        hints = getattr(shape_env, "backed_var_to_val", None) or shape_env.var_to_val
        example = hints.get(symbol)
        name = specs.dim_names.get(str(symbol), str(symbol))
        dims[symbol] = DimRange(name, str(symbol), int(known.lower), int(known.upper),
                                int(known.upper if example is None else example))
    return dims


def dim_ranges(program: ExportedProgram, specs: SpecTable, roles: Roles) -> tuple[DimRange, ...]:
    """The dynamic dims of the program's user inputs (the sizes a run is given), sorted by
    name; () for a static program."""
    return tuple(sorted(_dims(program, specs, roles).values(), key=lambda d: d.name))


def poly_of(expr: int | sympy.Expr, names: Mapping[sympy.Symbol, str]) -> Poly | str:
    """The size (a byte count, a dim) as a poly in the named dims, or why it is not one."""
    if isinstance(expr, int) or expr.is_Integer:
        return Poly.constant(int(expr))
    text = named(expr, {str(s): n for s, n in names.items()})
    outside = sorted(str(s) for s in expr.free_symbols if s not in names)
    if outside:
        return (f"its size {text} depends on {', '.join(outside)}, known only once the op that "
                "makes it runs (a data-dependent size)")
    if not expr.is_polynomial(*names):
        return f"its size {text} is not a polynomial in the dims"
    poly = sympy.Poly(sympy.expand(expr), *names)
    if not all(c.is_Integer for c in poly.coeffs()):
        return f"its size {text} has a fractional coefficient"
    order = list(names)
    result = Poly.constant(0)
    for powers, coef in poly.terms():
        term = Poly.constant(int(coef))
        for symbol, power in zip(order, powers, strict=True):
            for _ in range(power):
                term = term * Poly.dim(names[symbol])
        result = result + term
    return result


@dataclass(frozen=True)
class _Size:
    """A storage's size: reserved (aligned) and needed (its largest value), or why held."""

    reserved: SizeExpr
    need: SizeExpr
    held: str | None


def _storage_size(placed: PlannedStorage, specs: SpecTable, names: Mapping[sympy.Symbol, str],
                  alignment: int, box: Box, alias: AliasTable) -> _Size:
    """The ``placed`` storage's size at every point of ``box``: the largest of its values that
    address bytes of their own (a view's, an ``expand``'s of a KV cache, are its base's), or
    its concrete size at the bounds and why it is held there."""
    sliced = bool(set(alias.slices) & set(placed.values))
    polys, why = [], None
    for value in placed.values:
        spec = specs.spec_of(value)
        if spec is None or value in alias.views:
            continue
        numel = math.prod(canonical(s) for s in spec.sym_shape) * spec.dtype.itemsize
        found = poly_of(numel if isinstance(numel, int) else sympy.sympify(numel), names)
        if isinstance(found, str):
            why = f"value {value!r}: {found}"
            break
        polys.append(found)
    if why is None and sliced and any(not p.is_constant for p in polys):
        why = "a concatenation is made in it in place, laid out at its bound's strides"
    if why is not None:
        return _Size(SizeExpr.constant(placed.size), SizeExpr.constant(placed.size), why)
    need = SizeExpr.largest((Term(p) for p in polys), box)
    reserved = SizeExpr.largest((Term.aligned(p, alignment) for p in polys), box)
    return _Size(reserved, need, None)


def _stacked(order: Sequence[Any], sizes: Mapping[Any, SizeExpr],
             spans: Mapping[Any, tuple[int, int]], box: Box) -> dict[Any, SizeExpr]:
    """Each item's offset, bottom-up in ``order``: the largest top of the items before it
    that are live at a common step (0 for none)."""
    offsets: dict[Any, SizeExpr] = {}
    tops: list[tuple[int, int, SizeExpr]] = []
    for key in order:
        start, end = spans[key]
        under = [p for s, e, top in tops if s < end and start < e for p in top.terms]
        offsets[key] = SizeExpr.largest(under, box) if under else SizeExpr.constant(0)
        tops.append((start, end, offsets[key].plus(sizes[key], box)))
    return offsets


def plan_symbolic(plan: MemoryPlan, program: ExportedProgram, specs: SpecTable,
                  alias: AliasTable, roles: Roles) -> SymbolicPlan | None:
    """The symbolic plan of a concrete plan made at the upper bounds (None for a program
    without dynamic dims, and for a plan with memory banks or with the inputs outside the
    arena, which stays at its bounds)."""
    found = _dims(program, specs, roles)
    if not found or plan.banks or plan.input_bytes:
        return None
    dims = tuple(sorted(found.values(), key=lambda d: d.name))
    names = {symbol: dim.name for symbol, dim in found.items()}
    box = Box({d.name: (d.lower, d.upper) for d in dims})
    sizes, needs, held = {}, {}, {}
    for sid, placed in plan.storages.items():
        size = _storage_size(placed, specs, names, plan.alignment, box, alias)
        if placed.graph:
            size = _Size(SizeExpr.constant(placed.size), SizeExpr.constant(placed.size),
                         None if size.need.is_constant else
                         f"it lives in subgraph {placed.graph!r}, planned at its bounds")
        sizes[sid], needs[sid] = size.reserved, size.need
        if size.held:
            held[sid] = size.held
    spans, item_sizes, concrete, first = {}, {}, {}, {}
    for s in plan.storages.values():
        if not s.graph:
            spans[s.id], item_sizes[s.id], concrete[s.id] = (s.start, s.end), sizes[s.id], s.offset
            first[s.id] = s.kind != "state"
    for r in plan.regions:
        if not r.graph:
            spans[r.node], concrete[r.node] = (r.step, r.step + 1), r.offset
            item_sizes[r.node], first[r.node] = SizeExpr.constant(r.size), True
    order = sorted(item_sizes, key=lambda k: (first[k], concrete[k], str(k)))
    offsets = _stacked(order, item_sizes, spans, box)
    arena = SizeExpr.largest([t for k in order for t in offsets[k].plus(item_sizes[k], box).terms],
                             box)
    storage_offsets = {k: v for k, v in offsets.items() if isinstance(k, int)}
    region_offsets = {k: v for k, v in offsets.items() if isinstance(k, str)}
    _inside_regions(plan, storage_offsets, region_offsets, box)
    return SymbolicPlan(dims, plan.alignment, arena, storage_offsets, sizes, needs,
                        region_offsets, held)


def _inside_regions(plan: MemoryPlan, offsets: dict[int, SizeExpr],
                    region_offsets: dict[str, SizeExpr], box: Box) -> None:
    """Subgraph storages and nested regions keep their place inside their region, which
    moves with the region's offset (regions are listed outermost first)."""
    region_of = {sub: region for region in plan.regions for sub in region.subgraphs}

    def inside(graph: str, offset: int) -> SizeExpr:
        outer = region_of[graph]
        return region_offsets[outer.node].plus(SizeExpr.constant(offset - outer.offset), box)

    for region in plan.regions:
        if region.graph:
            region_offsets[region.node] = inside(region.graph, region.offset)
    for sid, placed in plan.storages.items():
        if placed.graph:
            offsets[sid] = inside(placed.graph, placed.offset)


def with_symbolic(plan: MemoryPlan, program: ExportedProgram, specs: SpecTable,
                  alias: AliasTable, roles: Roles) -> MemoryPlan:
    """The plan with its symbolic plan (``plan_symbolic``), verified over the whole range:
    unchanged for a program without dynamic dims. Raises ``PlanError`` if the proof fails
    (a planner bug: report it)."""
    symbolic = plan_symbolic(plan, program, specs, alias, roles)
    if symbolic is None:
        return plan
    planned = replace(plan, symbolic=symbolic)
    planned.verify()
    return planned
