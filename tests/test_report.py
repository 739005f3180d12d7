"""Reports: the spec and plan tables, the JSON document, the C header and the timeline."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import subprocess
import sys

import pytest
import torch
from rich.console import Console
from shared_models import Branches, Chain
from torch.export import Dim

import tensorplan as tp
from tensorplan import zoo
from tensorplan.report import (
    plan_summary,
    plan_to_c_header,
    plan_to_json,
    plot_timeline,
    spec_table,
)
from tensorplan.report.diff import diff_plans, diff_report
from tensorplan.report.export import c_identifier
from tensorplan.report.figures import plan_numbers
from tensorplan.report.geometry import peak, x_maps
from tensorplan.report.tables import storage_table
from tensorplan.report.text import bytes_text, human_bytes
from tensorplan.report.timeline import LABELLED, _label, plot_plan


@pytest.fixture(scope="module")
def mlp() -> tp.Program:
    # one storage per value in graph order, so every report row below has its own storage;
    # test_reused_storages_are_reported_with_every_value covers storages that hold several
    e = zoo.example("mlp")
    return tp.compile(e.model, e.args, reuse=False, reorder=False, fold=False)


@pytest.fixture(scope="module")
def dynamic() -> tp.Program:
    return tp.compile(Chain(), (torch.randn(3, 8),),
                      dynamic_shapes=({0: Dim("rows", min=2, max=100)},))


@pytest.fixture(scope="module")
def branches() -> tp.Program:
    return tp.compile(Branches(), (torch.randn(8, 8), torch.randn(1)))


def rows(renderable) -> list[list[str]]:
    """The body rows of rendered rich tables, as lists of stripped cell texts."""
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(renderable)
    lines = console.file.getvalue().splitlines()
    return [[cell.strip() for cell in line.strip("│").split("│")]
            for line in lines if line.startswith("│")]


@pytest.mark.parametrize(("n", "human", "text"), [
    (0, "0 B", "0 B"),
    (1023, "1023 B", "1,023 B"),
    (1024, "1.0 KiB", "1,024 B (1.0 KiB)"),
    (1536, "1.5 KiB", "1,536 B (1.5 KiB)"),
    (2**20, "1.0 MiB", "1,048,576 B (1.0 MiB)"),
    (5 * 2**30, "5.0 GiB", "5,368,709,120 B (5.0 GiB)"),
    (3 * 2**50, "3072.0 TiB", "3,377,699,720,527,872 B (3072.0 TiB)"),
])
def test_byte_texts(n, human, text):
    assert human_bytes(n) == human
    assert bytes_text(n) == text


def test_spec_table_has_one_row_per_tensor_value(mlp):
    table = rows(spec_table(mlp.specs))
    assert [r[0] for r in table] == ["p_fc1_weight", "p_fc1_bias", "p_fc2_weight", "p_fc2_bias",
                                     "x", "permute", "addmm", "gelu", "permute_1", "addmm_1"]
    assert table[4] == ["x", "[8, 64]", "float32", "(0, 1)", "2,048 B (2.0 KiB)", "0", ""]
    assert table[0] == ["p_fc1_weight", "[256, 64]", "float32", "(0, 1)",
                        "65,536 B (64.0 KiB)", "-", "yes"]
    assert table[5][3] == "(1, 0)"


def test_spec_table_shows_symbolic_dims_with_their_bound(dynamic):
    table = {r[0]: r for r in rows(spec_table(dynamic.specs))}
    assert set(table) == {"x", "relu", "neg"}
    assert table["relu"][1] == "[rows<=100, 8]"
    assert table["relu"][4] == "3,200 B (3.1 KiB)"


def test_spec_table_names_items_of_multi_output_values():
    e = zoo.example("kv_cache")
    names = [r[0] for r in rows(spec_table(tp.compile(e.model, e.args).specs))]
    assert names[names.index("split_with_sizes[0]"):][:3] == [
        "split_with_sizes[0]", "split_with_sizes[1]", "split_with_sizes[2]"]


def test_plan_summary_numbers(mlp):
    plan = mlp.plan
    overview, storages = rows(plan_summary(mlp, top=2))[:11], rows(plan_summary(mlp, top=2))[11:]
    assert dict(overview) == {
        "arena": bytes_text(plan.arena_bytes),
        "lower bound": bytes_text(plan.lower_bound_bytes),
        "ratio": f"{plan.arena_bytes / plan.lower_bound_bytes:.3f} (arena / lower bound)",
        "baseline bound": "16,384 B (16.0 KiB) (arena 1.00x)",
        "order": "exported",
        "constants": "76,840 B (75.0 KiB)",
        "algorithm": plan.algorithm,
        "optimal": "yes" if plan.optimal else "not proven",
        "alignment": "16 B",
        "storages": "4 (3 activation, 1 input)",
        "regions": "0",
    }
    assert plan.arena_bytes == 16384
    largest = sorted(plan.storages.values(), key=lambda s: (-s.size, s.id))[:2]
    assert storages == [[str(s.id), f"{s.offset:,}", "8,192 B (8.0 KiB)", f"[{s.start}, {s.end})",
                         "activation", s.values[0]] for s in largest]


def test_storage_table_names_each_storages_bank_as_the_plan_assigned_it(mlp):
    e = zoo.example("mlp")
    banks = [tp.Bank("sram", 8192, 1.0), tp.Bank("dram", None, 40.0)]
    plan = tp.compile(e.model, e.args, reuse=False, reorder=False, fold=False,
                      banks=banks).plan
    table = rows(storage_table(plan, top=len(plan.storages)))
    assert [row[0] for row in table] == [str(s.id) for s in sorted(
        plan.storages.values(), key=lambda s: (-s.size, s.id))]
    assert [row[1] for row in table] == [plan.bank_of(row[6]) for row in table]
    assert [row[1] for row in table] == [plan.storages[int(row[0])].bank for row in table]
    assert {row[1] for row in table} == {"sram", "dram"}
    assert all(len(row) == 6 for row in rows(storage_table(mlp.plan)))  # no banks: no column


def test_storage_table_shows_the_top_storages_and_sums_the_rest(mlp):
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(storage_table(mlp.plan, top=2))
    out = console.file.getvalue()
    assert len(rows(storage_table(mlp.plan, top=2))) == 2
    # x (2,048 B) and addmm_1 (320 B) are below the two 8 KiB storages
    assert out.splitlines()[-1].strip() == "and 2 more storages, 2,368 B (2.3 KiB) in all"
    assert "more storages" not in str(rows(storage_table(mlp.plan, top=4)))


def test_diff_shows_the_constants_and_before_folding_when_folding_changed_them(mlp):
    folded = dataclasses.replace(mlp.plan, constant_bytes=60_000)
    table = rows(diff_report(diff_plans(mlp.plan, folded)))
    assert ["constants", "76,840 B (75.0 KiB)", "60,000 B (58.6 KiB)",
            "-16,840 B (16.4 KiB) (-21.9 %)"] in table
    assert ["constants before folding", "76,840 B (75.0 KiB)", "76,840 B (75.0 KiB)",
            "+0 B (+0.0 %)"] in table
    assert not any(row[0] == "constants before folding"
                   for row in rows(diff_report(diff_plans(mlp.plan, mlp.plan))))


def test_plan_summary_names_subgraph_lifetimes(branches):
    table = rows(plan_summary(branches, top=20))
    lifetimes = [r[3] for r in table if len(r) == 6]
    # the big branch's chain exp -> mul -> sin -> add lives in one storage (in-place reuse)
    assert sum("in true_graph_0/" in t for t in lifetimes) == 1
    assert sum("in false_graph_0/" in t for t in lifetimes) == 1
    assert dict(r for r in table if len(r) == 2)["regions"] == "1"


def test_plan_json_holds_the_plan_and_every_value(mlp):
    doc = json.loads(json.dumps(plan_to_json(mlp, "mlp")))
    plan = mlp.plan
    assert (doc["schema"], doc["version"]) == ("tensorplan.plan", 2)
    assert doc["model"]["name"] == "mlp"
    assert doc["model"]["inputs"] == ["x"] and doc["model"]["outputs"] == ["addmm_1"]
    assert (doc["arena_bytes"], doc["lower_bound_bytes"]) == (plan.arena_bytes,
                                                              plan.lower_bound_bytes)
    assert (doc["alignment"], doc["algorithm"], doc["optimal"]) == (16, plan.algorithm,
                                                                    plan.optimal)
    assert [s["id"] for s in doc["storages"]] == [0, 1, 2, 3]
    for entry in doc["storages"]:
        s = plan.storages[entry["id"]]
        assert entry == {"id": s.id, "offset": s.offset, "size": s.size, "start": s.start,
                         "end": s.end, "kind": s.kind, "graph": "", "values": list(s.values)}
    values = {v["name"]: v for v in doc["values"]}
    assert len(values) == 10
    assert values["x"] == {"name": "x", "storage": 0, "shape": [8, 64], "sym_shape": ["8", "64"],
                           "dtype": "float32", "dim_order": [0, 1], "strides": [64, 1],
                           "nbytes": 2048, "const": False}
    assert values["p_fc1_weight"]["storage"] is None and values["p_fc1_weight"]["const"]


def test_plan_json_of_dynamic_dims_and_regions(dynamic, branches):
    relu = {v["name"]: v for v in plan_to_json(dynamic)["values"]}["relu"]
    assert relu["shape"] == [100, 8] and relu["nbytes"] == 3200
    assert relu["sym_shape"] == ["rows", "8"]
    (region,) = plan_to_json(branches)["regions"]
    r = branches.plan.regions[0]
    assert region == {"node": "cond", "graph": "", "offset": r.offset, "size": r.size,
                      "step": r.step, "subgraphs": ["true_graph_0/", "false_graph_0/"]}


def test_c_identifiers():
    assert c_identifier("native_layer_norm[1]") == "NATIVE_LAYER_NORM_1"
    assert c_identifier("true_graph_0/add") == "TRUE_GRAPH_0_ADD"
    assert c_identifier("tiny-gpt v2") == "TINY_GPT_V2"
    assert c_identifier("3d") == "M_3D"
    assert c_identifier("") == "M_"


def test_c_header_defines_every_number(mlp):
    header = plan_to_c_header(mlp, "mlp")
    plan = mlp.plan
    assert header.splitlines()[1:3] == ["#ifndef TENSORPLAN_MLP_H", "#define TENSORPLAN_MLP_H"]
    assert "#define MLP_ARENA_BYTES 16384u" in header
    assert f"#define MLP_LOWER_BOUND_BYTES {plan.lower_bound_bytes}u" in header
    assert "#define MLP_ALIGNMENT 16u" in header and "#define MLP_NUM_STORAGES 4u" in header
    assert f"#define MLP_S2_GELU_OFFSET {plan.storages[2].offset}u" in header
    assert "#define MLP_S3_ADDMM_1_SIZE 320u" in header
    s1 = plan.storages[1]
    assert f"/* storage 1, activation, steps [{s1.start}, {s1.end}): addmm */" in header
    assert header.rstrip().endswith("#endif /* TENSORPLAN_MLP_H */")


def _gcc(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(["gcc", "-fsyntax-only", "-Wall", "-Wextra", "-pedantic", "-Werror",
                           *args], cwd=cwd, capture_output=True, text=True, check=False)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_c_header_compiles_and_its_numbers_are_constants(mlp, branches, tmp_path):
    (tmp_path / "mlp_plan.h").write_text(plan_to_c_header(mlp, "mlp"))
    (tmp_path / "branches_plan.h").write_text(plan_to_c_header(branches, "branches"))
    for header in ("mlp_plan.h", "branches_plan.h"):
        result = _gcc("-std=c99", "-x", "c", header, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    asserts = "\n".join(f'_Static_assert(MLP_S{s.id}_{c_identifier(s.values[0])}_OFFSET == '
                        f'{s.offset}, "offset {s.id}");' for s in mlp.plan.storages.values())
    (tmp_path / "use.c").write_text(
        '#include "mlp_plan.h"\n#include "branches_plan.h"\n'
        '_Static_assert(MLP_ARENA_BYTES == 16384, "arena");\n'
        f"{asserts}\n"
        "unsigned long long last(void) { return mlp_storage_offsets[MLP_NUM_STORAGES - 1]"
        " + branches_storage_sizes[0]; }\n")
    result = _gcc("-std=c11", "use.c", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_timeline_is_a_png_of_the_expected_size(branches, tmp_path):
    from matplotlib.image import imread

    path = tmp_path / "timeline.png"
    plot_timeline(branches, path, "branches")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert imread(path).shape == (720, 1440, 4)


def test_timeline_puts_each_branch_in_its_half_of_the_region(branches):
    maps = x_maps(branches.plan)
    step = branches.plan.regions[0].step
    assert maps[""](3) == 3
    assert maps["true_graph_0/"](0) == step
    assert maps["false_graph_0/"](0) == step + 0.5
    last = max(s.end for s in branches.plan.storages.values() if s.graph == "false_graph_0/")
    assert maps["false_graph_0/"](last) == step + 1


def test_timeline_without_matplotlib_says_how_to_install_it(mlp, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(tp.TensorPlanError, match=r"tensorplan\[plot\]"):
        plot_timeline(mlp, tmp_path / "t.png")
    assert not (tmp_path / "t.png").exists()


def _svg_texts(path) -> list[str]:
    return [t.strip() for t in re.findall(r"<text[^>]*>([^<]*)</text>", path.read_text())]


def test_svg_timeline_labels_the_largest_storages_and_explains_the_marks(mlp, tmp_path):
    plot_timeline(mlp, tmp_path / "mlp.svg", "mlp")
    texts = _svg_texts(tmp_path / "mlp.svg")
    assert {"addmm: 8.0 KiB", "gelu: 8.0 KiB"} <= set(texts)
    top = peak(mlp.plan)
    assert f"peak: step {top.step}, 16.0 KiB live" in texts
    assert {"lower bound 16.0 KiB", "activation (computed during a run)",
            "input (the caller's tensors, copied in)"} <= set(texts)


def test_a_label_is_drawn_only_where_it_fits():
    s = tp.PlannedStorage(3, 0, 8192, 0, 4, "activation", "", ("convolution",))
    assert _label(s, 200, 20) == ("convolution: 8.0 KiB", 0)
    assert _label(s, 100, 40) == ("convolution\n8.0 KiB", 0)
    assert _label(s, 18, 200) == ("convolution: 8.0 KiB", 90)
    shared = tp.PlannedStorage(3, 0, 8192, 0, 4, "activation", "", ("convolution", "relu"))
    assert _label(shared, 200, 20) == ("convolution +1: 8.0 KiB", 0)  # relu shares it
    assert _label(s, 14, 14) is None


def test_a_1000_storage_timeline_labels_only_the_largest_that_fit(tmp_path):
    from tensorplan.formats.dsa import load_instance
    from tensorplan.plan.planners import plan_buffers
    from tensorplan.report.html import placement_plan

    rng = __import__("random").Random(1)
    rows = ["id,lower,upper,size"]
    for i in range(1000):
        start = rng.randrange(0, 2000)
        rows.append(f"b{i},{start},{start + rng.randrange(1, 400)},{rng.randrange(1, 9) * 4096}")
    rows += [f"big{i},{400 * i},{400 * i + 1200},{(60 + i) * 16384}" for i in range(4)]
    (tmp_path / "many.csv").write_text("\n".join(rows) + "\n")
    instance = load_instance(tmp_path / "many.csv")
    plan = placement_plan(instance, plan_buffers(instance.problem.buffers, algorithm="greedy"))
    plot_plan(plan, tmp_path / "many.svg", "many")
    labels = [t for t in _svg_texts(tmp_path / "many.svg") if re.fullmatch(r"b(ig)?\d+: .*iB", t)]
    assert 1 <= len(labels) <= LABELLED
    largest = max(plan.storages.values(), key=lambda s: s.size)
    assert largest.values == ("big3",) and labels[0] == "big3: 1008.0 KiB"


def test_the_peak_step_holds_the_lower_bound(mlp, branches):
    for program in (mlp, branches):
        top = peak(program.plan)
        assert top.live_bytes == program.plan.lower_bound_bytes
        live = [s for s in program.plan.storages.values()
                if not s.graph and s.start <= top.step < s.end]
        assert sorted(top.storages) == sorted(s.id for s in live)
    assert peak(branches.plan).regions in ((), ("cond",))


def test_an_arena_at_its_lower_bound_is_optimal_at_any_size(dynamic):
    """Away from the bounds the planner proved nothing, but an arena equal to the lower bound
    cannot be beaten."""
    at10 = dynamic.plan.at(rows=10)
    assert (at10.optimal, at10.arena_bytes, at10.lower_bound_bytes) == (False, 320, 320)
    assert dict(plan_numbers(dynamic.plan, {"rows": 10}))["optimal"] == \
        "yes (the arena is the lower bound)"


def test_the_size_sweep_starts_at_each_dims_lower_bound(dynamic):
    from tensorplan.report.symbolic import sweep_sizes

    assert sweep_sizes(dynamic.plan) == [{"rows": 2}, {"rows": 12}, {"rows": 25}, {"rows": 50},
                                         {"rows": 100}]
