"""Stage 4: lifetimes, offsets, the MemoryPlan and its verification."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from shared_models import Branches, Chain
from torch.export import Dim
from zoo_programs import check_plan_is_tight, compiled

import tensorplan as tp
from tensorplan import zoo
from tensorplan.analysis.liveness import lifetimes
from tensorplan.plan import plan as plan_stage
from tensorplan.plan import validate
from tensorplan.plan.validate import ViolationKind

# The plan stage on the graph order with one storage per value (test_reuse.py covers the rest).
GRAPH_ORDER = {"reuse": False, "reorder": False, "fold": False}


def test_lifetimes_are_half_open_over_graph_order():
    prog = tp.compile(Chain(), (torch.randn(4),), **GRAPH_ORDER)
    lives = lifetimes(prog.exported_program, prog.alias)[""]
    by_storage = {lt.storage: (lt.start, lt.end) for lt in lives.lifetimes}
    # steps: 0 x, 1 relu, 2 neg, 3 output
    assert by_storage[prog.specs["x"].storage] == (0, 2)
    assert by_storage[prog.specs["relu"].storage] == (1, 3)
    assert by_storage[prog.specs["neg"].storage] == (2, 4)
    # x and neg never meet: 16 B each, aligned to 16 -> two slots at most
    assert prog.plan.arena_bytes == prog.plan.lower_bound_bytes == 32


def test_verify_catches_an_overlapping_plan():
    prog = tp.compile(Chain(), (torch.randn(4),), **GRAPH_ORDER)
    relu = prog.specs["relu"].storage
    neg = prog.specs["neg"].storage
    storages = dict(prog.plan.storages)
    storages[neg] = dataclasses.replace(storages[neg], offset=storages[relu].offset)
    broken = dataclasses.replace(prog.plan, storages=storages)
    with pytest.raises(tp.PlanError, match="overlap"):
        broken.verify()


def test_verify_catches_a_misaligned_offset():
    prog = tp.compile(Chain(), (torch.randn(4),), **GRAPH_ORDER)
    storages = dict(prog.plan.storages)
    sid = prog.specs["neg"].storage
    storages[sid] = dataclasses.replace(storages[sid], offset=storages[sid].offset + 4)
    with pytest.raises(tp.PlanError):
        dataclasses.replace(prog.plan, storages=storages, arena_bytes=10**6).verify()


def _kinds(plan: tp.MemoryPlan) -> list[tuple[ViolationKind, tuple[int | str, ...]]]:
    return [(v.kind, v.buffers) for v in plan.violations()]


def test_a_valid_plan_has_no_violations():
    assert tp.compile(Branches(), (torch.randn(8, 8), torch.randn(1))).plan.violations() == []


def test_violations_name_the_overlapping_storages():
    prog = tp.compile(Chain(), (torch.randn(4),), **GRAPH_ORDER)
    relu, neg = prog.specs["relu"].storage, prog.specs["neg"].storage
    storages = dict(prog.plan.storages)
    storages[neg] = dataclasses.replace(storages[neg], offset=storages[relu].offset)
    broken = dataclasses.replace(prog.plan, storages=storages)
    assert _kinds(broken) == [(ViolationKind.OVERLAP, (relu, neg))]
    assert broken.violations()[0].message.startswith(f"the top-level graph: storage {relu} ")


def test_violations_report_a_misaligned_storage():
    prog = tp.compile(Chain(), (torch.randn(4),), **GRAPH_ORDER)
    sid = prog.specs["neg"].storage
    storages = dict(prog.plan.storages)
    storages[sid] = dataclasses.replace(storages[sid], offset=storages[sid].offset + 4)
    broken = dataclasses.replace(prog.plan, storages=storages, arena_bytes=10**6)
    assert (ViolationKind.ALIGNMENT, (sid,)) in _kinds(broken)


def test_violations_report_storages_beyond_the_arena():
    prog = tp.compile(Chain(), (torch.randn(4),), **GRAPH_ORDER)
    small = dataclasses.replace(prog.plan, arena_bytes=prog.plan.arena_bytes - 16)
    above = [s.id for s in prog.plan.storages.values()
             if s.offset + s.size > prog.plan.arena_bytes - 16]
    assert above and _kinds(small) == [(ViolationKind.OUT_OF_ARENA, (sid,)) for sid in above]
    with pytest.raises(tp.PlanError, match="plan: invalid memory plan .* above the reported peak"):
        small.verify()


def test_violations_report_a_subgraph_storage_outside_its_region():
    prog = tp.compile(Branches(), (torch.randn(8, 8), torch.randn(1)))
    (region,) = prog.plan.regions
    sid = next(s.id for s in prog.plan.storages.values() if s.graph == "true_graph_0/")
    storages = dict(prog.plan.storages)
    storages[sid] = dataclasses.replace(storages[sid], offset=region.offset + region.size)
    broken = dataclasses.replace(prog.plan, storages=storages, arena_bytes=10**6)
    assert (ViolationKind.OUTSIDE_REGION, (sid,)) in _kinds(broken)
    with pytest.raises(tp.PlanError, match=f"storage {sid} of 'true_graph_0/' at .* leaves the "
                                           f"region of '{region.node}'"):
        broken.verify()


def test_each_plan_is_checked_exactly_once(monkeypatch):
    checked = []  # buffers per call of the checker
    real = validate.find_violations

    def counting(sizes, *args, **kwargs):
        checked.append(len(sizes))
        return real(sizes, *args, **kwargs)

    monkeypatch.setattr(validate, "find_violations", counting)  # plan_buffers' check
    monkeypatch.setattr(plan_stage, "find_violations", counting)  # the MemoryPlan's check
    prog = tp.compile(Branches(), (torch.randn(8, 8), torch.randn(1)), **GRAPH_ORDER)
    per_graph = {}
    for item in [*prog.plan.storages.values(), *prog.plan.regions]:
        per_graph[item.graph] = per_graph.get(item.graph, 0) + 1
    assert sorted(per_graph) == ["", "false_graph_0/", "true_graph_0/"]
    assert sorted(checked) == sorted(per_graph.values())  # once per graph, by the plan stage
    checked.clear()
    tp.plan_buffers([tp.Buffer(4, 0, 2), tp.Buffer(4, 1, 3)])
    assert checked == [2]


def test_compile_passes_planner_params_to_the_planners():
    assert tp.PlannerParams is tp.plan.planners.PlannerParams
    model, args = torch.nn.Linear(4, 2), (torch.randn(3, 4),)
    with pytest.raises(tp.PlanError, match="PlannerParams.wide_orders: unknown orders"):
        tp.compile(model, args, planner_params=tp.PlannerParams(wide_orders=("widest",)))
    prog = tp.compile(model, args, algorithm="optimal",
                      planner_params=tp.PlannerParams(steps_per_second=0))
    assert (prog.plan.arena_bytes, prog.plan.optimal) == (80, True)  # greedy meets the bound


@pytest.mark.parametrize("alignment", [4, 16, 64])
def test_alignment_is_honoured(alignment):
    e = zoo.example("mlp")
    prog = tp.compile(e.model, e.args, alignment=alignment)
    assert prog.plan.alignment == alignment
    assert all(s.offset % alignment == 0 and s.size % alignment == 0
               for s in prog.plan.storages.values())
    assert prog.plan.arena_bytes % alignment == 0


def test_dynamic_dims_are_planned_at_their_upper_bound():
    prog = tp.compile(Chain(), (torch.randn(3, 8),),
                      dynamic_shapes=({0: Dim("rows", min=2, max=100)},))
    relu = prog.plan.storages[prog.specs["relu"].storage]
    assert relu.size == 100 * 8 * 4


def test_cond_branches_share_one_region_sized_for_the_larger_branch():
    prog = tp.compile(Branches(), (torch.randn(8, 8), torch.randn(1)))
    (region,) = prog.plan.regions
    assert region.subgraphs == ("true_graph_0/", "false_graph_0/")
    inside = [s for s in prog.plan.storages.values() if s.graph == "true_graph_0/"]
    assert inside and all(region.offset <= s.offset < region.offset + region.size for s in inside)
    assert region.size == 256  # the big branch's temporaries are written over each other
    prog.plan.verify()
    apart = tp.compile(Branches(), (torch.randn(8, 8), torch.randn(1)), reuse=False)
    assert apart.plan.regions[0].size == 2 * 256  # without reuse two live at once


@pytest.mark.parametrize("name", zoo.names())
def test_zoo_models_plan_at_the_lower_bound(name):
    check_plan_is_tight(compiled(name))


def test_storage_first_and_last_steps_are_inclusive():
    prog = tp.compile(Chain(), (torch.randn(4),), **GRAPH_ORDER)
    relu = prog.plan.storages[prog.specs["relu"].storage]
    assert (relu.first, relu.last) == (1, 2)  # defined at step 1, last read by neg at step 2


@pytest.mark.parametrize("alignment", [1, 2, 6])
def test_alignment_below_the_element_size_is_refused_at_compile(alignment):
    # float32 values at offsets that are not multiples of 4 cannot be viewed at run time
    with pytest.raises(tp.PlanError, match=f"alignment {alignment} B .* use a multiple of 4 B"):
        tp.compile(torch.nn.Linear(4, 2), (torch.randn(3, 4),), alignment=alignment)


def test_a_program_and_its_plan_print_in_a_few_lines():
    seq = Dim("seq", min=2, max=64)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    prog = tp.compile(model, (torch.randn(1, 16, 8),), dynamic_shapes=({1: seq},))
    plan = ("MemoryPlan(arena 4,096 B, lower bound 4,096 B, 2 storages, 0 regions, "
            "greedy (optimal), order exported, dims seq in [2, 64])")
    assert repr(prog.plan) == str(prog.plan) == plan
    assert repr(prog) == ("Program(9 values, 1 written in place, 0 folded, rewrites: none,\n"
                          f"        plan={plan})")
    assert dataclasses.replace(prog) == prog  # equality still compares the fields
