"""The picture (report/timeline.py) drawn with matplotlib: one axis per memory bank with its
own bound, traffic, capacity and cost; the sizes of ``--at``; labels that keep a name and a
size apart; a DSA instance's picture titled by its file's name, with buffers for storages."""

from __future__ import annotations

import pytest
import torch
from test_banks import _hot

import tensorplan as tp
from tensorplan import zoo
from tensorplan.formats.dsa import load_instance
from tensorplan.plan.planners import plan_buffers
from tensorplan.report.banks import BANK_COLUMNS, bank_rows
from tensorplan.report.figures import ratio_value
from tensorplan.report.html import placement_plan
from tensorplan.report.subject import instance_subject, model_subject
from tensorplan.report.text import human_bytes
from tensorplan.report.timeline import _label, draw

pytest.importorskip("matplotlib")


def _dashed(ax) -> list[float]:
    """The y of each dashed line of an axis (the lower bound)."""
    return [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]


def test_each_bank_is_drawn_on_its_own_axis_with_its_bound_traffic_capacity_and_cost():
    prog, _ = _hot()
    plan = prog.plan
    fig = draw(plan, model_subject(prog, "hot", {}))
    assert len(fig.axes) == len(plan.banks) == 2
    for ax, bank, row in zip(fig.axes, plan.banks, bank_rows(plan), strict=True):
        cells = dict(zip(BANK_COLUMNS, row, strict=True))
        assert _dashed(ax) == [bank.lower_bound_bytes]  # its own bound, not the plan's
        assert ax.get_ylim() == (0, max(bank.arena_bytes, bank.lower_bound_bytes) * 1.08)
        title = ax.get_title(loc="left")
        assert title.startswith(f"bank {bank.name}: arena {cells['arena']} of capacity "
                                f"{cells['capacity']}, lower bound {cells['lower bound']}")
        assert f"traffic {cells['traffic']} per run ({cells['share']})" in title
        assert title.endswith(f"cost {cells['cost']}")
        drawn = [p for p in ax.patches if p.get_alpha() == 0.85]  # storages (not the peak)
        mine = [s for s in plan.storages.values() if s.bank == bank.name]
        assert len(drawn) == len(mine)
        assert max(p.get_y() + p.get_height() for p in drawn) <= bank.arena_bytes
    assert plan.banks[0].capacity is not None
    sram = fig.axes[0]
    capacity = [line.get_ydata()[0] for line in sram.get_lines() if line.get_linestyle() == ":"]
    assert capacity == [plan.banks[0].capacity]  # within the axis: drawn
    assert f"traffic cost {plan.traffic_cost:,.0f}" in fig.get_suptitle()


def test_the_picture_at_seq_16_is_titled_with_the_figures_there_and_says_the_placeholders():
    e = zoo.example("tiny_gpt")
    prog = tp.compile(e.model, e.args, dynamic_shapes=e.dynamic_shapes)
    at = prog.plan.at(seq=16)
    fig = draw(at, model_subject(prog, "tiny_gpt at seq=16", {}, {"seq": 16}))
    (ax,) = fig.axes
    ratio = ratio_value(at.arena_bytes, at.lower_bound_bytes)
    assert fig.get_suptitle().startswith(
        f"tiny_gpt at seq=16: arena {human_bytes(at.arena_bytes)} vs lower bound "
        f"{human_bytes(at.lower_bound_bytes)} (ratio {ratio})")
    assert ratio == "1.002"
    assert _dashed(ax) == [at.lower_bound_bytes]
    placeholders = sum(n.op == "placeholder" for n in prog.exported_program.graph.nodes)
    assert ax.get_xlabel() == (f"step (top-level schedule; steps 0-{placeholders - 1}: the "
                               f"{placeholders} placeholders, where nothing runs)")


def test_a_label_keeps_the_name_and_the_size_apart():
    prog = tp.compile(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
    storage = next(iter(prog.plan.storages.values()))
    text, rotation = _label(storage, 1000, 1000)
    assert text == f"{storage.values[0]}: {human_bytes(storage.size)}" and rotation == 0


def test_a_dsa_picture_is_titled_by_the_file_s_name_and_shows_buffers(tmp_path):
    path = tmp_path / "sub" / "three.csv"
    path.parent.mkdir()
    path.write_text("id,lower,upper,size\n122,0,4,219136\n7,2,6,1024\n9,5,8,512\n")
    instance = load_instance(path)
    placement = plan_buffers(instance.problem.buffers, algorithm="greedy")
    plan = placement_plan(instance, placement)
    fig = draw(plan, instance_subject(str(path), (), plan))
    (ax,) = fig.axes
    assert fig.get_suptitle().startswith("three.csv: peak ")
    assert fig.get_suptitle().endswith(", 3 buffers") and str(tmp_path) not in fig.get_suptitle()
    assert [t.get_text() for t in ax.get_legend().get_texts()][0] == \
        "buffer (a row of the instance)"
    assert ax.get_xlabel() == "step"
    labels = [t.get_text() for t in ax.texts]
    assert "122: 214.0 KiB" in labels  # the id and the size apart, not "122 214.0 KiB"
