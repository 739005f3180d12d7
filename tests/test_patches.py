"""Patch-by-patch execution of the high-resolution prefix (``patches.py``, issue 18 item 1)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tensorplan as tp
from tensorplan.errors import InputError
from tensorplan.report.rewrites import rewrite_notes
from tensorplan.rewrite import patches
from tensorplan.rewrite.patch_emit import patch_program
from tensorplan.rewrite.splits import regions, splits
from tensorplan.rewrite.windows import reduces_space, window


class Stack(torch.nn.Module):
    """Strided, padded, dilated and grouped convolutions, batch norm, relu6, a residual add,
    an explicit pad with a non-zero value, a max pool, then a head that is not spatial."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=4)
        self.c3 = torch.nn.Conv2d(8, 16, 5, stride=2, padding=2)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)
        self.head = torch.nn.Linear(16, 10)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu6(self.bn(self.c1(x)))
        h = self.c2(h) + h
        h = F.pad(h, (1, 0, 0, 1), value=0.25)
        h = self.pool(self.c3(h))
        return self.head(h.mean((2, 3)))


def _in_layout(model: torch.nn.Module, x: torch.Tensor, channels_last: bool):
    """The model and its input, both channels_last when asked."""
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    return model, x


def _stack(channels_last: bool, size: tuple[int, int] = (37, 45)):
    return _in_layout(Stack().eval(), torch.randn(2, 3, *size), channels_last)


def _patched(model: torch.nn.Module, x: torch.Tensor, split: str, patch_grid: tuple[int, int]):
    """The captured program, its split named ``split``, and the program patched on the grid."""
    program = tp.capture(model, (x,))
    chosen = next(s for s in splits(program) if s.node == split)
    return program, chosen, patch_program(program, chosen, patch_grid)


def test_the_splits_are_the_values_the_prefix_ends_at() -> None:
    model, x = _stack(False)
    found = splits(tp.capture(model, (x,)))
    assert [s.node for s in found] == ["convolution", "getitem", "hardtanh", "add",
                                       "constant_pad_nd", "convolution_2", "getitem_3"]
    assert found[-1].region[0] == "convolution" and found[-1].source == "x"


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("grid", [(2, 2), (3, 2), (4, 5), (1, 3)])
@pytest.mark.parametrize("split", ["add", "convolution_2", "getitem_3"])
def test_patched_program_equals_eager(split, grid, channels_last) -> None:
    model, x = _stack(channels_last)
    _, _, patched = _patched(model, x, split, grid)
    torch.testing.assert_close(patched.module()(x), model(x))
    compiled = tp.compile(patched)
    torch.testing.assert_close(compiled.run(x), model(x))


def test_border_patches_are_padded_like_the_original_and_inner_ones_not() -> None:
    model, x = _stack(False, (48, 48))  # c1 output 24x24, c2 keeps it, c3 12x12
    program = tp.capture(model, (x,))
    split = next(s for s in splits(program) if s.node == "convolution_2")
    nodes = {n.name: n for n in program.graph.nodes}
    corner = regions(split, nodes, ((0, 4), (0, 4)))
    centre = regions(split, nodes, ((4, 8), (4, 8)))
    c3 = window(nodes["convolution_2"])
    c1 = window(nodes["convolution"])
    # the corner's c3 reads rows from -2 (its zero padding); the pad adds row 24 at the bottom
    assert c3.needs(corner["convolution_2"]) == ((-2, 9), (-2, 9))
    assert c1.needs(corner["convolution"]) == ((-1, 2 * corner["convolution"][0][1]),
                                                (-1, 2 * corner["convolution"][1][1]))
    # the centre needs nothing outside the maps: no padding at all
    assert c3.needs(centre["convolution_2"]) == ((6, 17), (6, 17))
    assert all(0 <= a and b <= 48 for a, b in centre["x"])


class Tiny(torch.nn.Module):
    """A 1x1 convolution on a small map and a head: nothing to gain from patches."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3))


@pytest.mark.parametrize("model, x", [(Tiny().eval(), torch.randn(1, 4, 4, 4)),
                                      (torch.nn.Linear(8, 8), torch.randn(2, 8))])
def test_auto_declines_when_nothing_is_gained(model, x) -> None:
    program = tp.compile(model, (x,), patches="auto")
    assert program.patching.chosen == program.patching.candidates[0]
    assert program.patching.chosen.split == "" and program.patching.chosen.grid == (1, 1)
    plain = tp.compile(model, (x,))
    assert [n.name for n in program.exported_program.graph.nodes] == \
        [n.name for n in plain.exported_program.graph.nodes]
    assert program.plan.arena_bytes == plain.plan.arena_bytes


def test_auto_lowers_the_arena_within_the_budget() -> None:
    model, x = _stack(False, (96, 96))
    program = tp.compile(model, (x,), patches="auto")
    plain = tp.compile(model, (x,))
    chosen = program.patching.chosen
    assert chosen.split and chosen.overhead <= 1.25
    assert all(c.overhead <= 1.25 for c in program.patching.candidates)
    assert program.plan.arena_bytes < plain.plan.arena_bytes
    torch.testing.assert_close(program.run(x), model(x))
    rows, cols = chosen.grid
    (note,) = rewrite_notes(program)  # what the page's summary and the picture's title say
    assert (note.label, note.summary) == ("patched", f"patched {rows}x{cols} up to {chosen.split}")


def test_the_candidates_closest_by_greedy_are_ranked_by_the_compiles_planner() -> None:
    """Greedy's arena ranks the candidates; those within ESTIMATE_MARGIN of the least are
    planned again as the compile plans, and that ranks them (here it reverses greedy's)."""
    base = patches.Candidate("", (1, 1), 1000, 1.0)
    near = patches.Candidate("a", (2, 2), 600, 1.1)
    nearer = patches.Candidate("b", (2, 2), 620, 1.2)
    far = patches.Candidate("c", (4, 4), 700, 1.3)  # 700 > 600 * 1.15: not planned again
    programs = {c: c.split for c in (base, near, nearer, far)}
    planned = {"a": 590, "b": 540}
    again = patches._planned_again([base, near, nearer, far], programs, planned.__getitem__)
    assert [c.planned_bytes for c in again] == [None, 590, 540, None]
    assert min(again, key=patches._rank).split == "b"
    assert all(programs[c] == c.split for c in again)  # the new candidates find their programs


def test_a_split_over_the_budget_is_not_tried() -> None:
    """At 12x12 only the first layer's split stays within 1.01x the multiply-adds; it frees
    nothing, so the program is kept as exported."""
    model, x = _stack(False, (96, 96))
    program = tp.compile(model, (x,), patches=(12, 12), max_overhead=1.01)
    base, *tried = program.patching.candidates
    assert [(c.split, c.overhead) for c in tried] == [("hardtanh", 1.0)]
    assert program.patching.chosen == base and base.split == ""
    assert tried[0].planned_bytes == base.planned_bytes == program.plan.arena_bytes


@pytest.mark.parametrize("bad", [(0, 2), (2,), "some", (2.0, 2)])
def test_patches_must_be_auto_or_a_grid(bad) -> None:
    model, x = _stack(False)
    with pytest.raises(InputError, match="patches"):
        tp.compile(model, (x,), patches=bad)


class Excite(torch.nn.Module):
    """A stem, a depthwise convolution, a squeeze-and-excitation gate (a mean over the image,
    two 1x1 convolutions), a strided projection, then a second gate over the projection."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, 2, 1)
        self.dw = torch.nn.Conv2d(8, 8, 3, 1, 1, groups=8)
        self.fc1, self.fc2 = torch.nn.Conv2d(8, 2, 1), torch.nn.Conv2d(2, 8, 1)
        self.proj = torch.nn.Conv2d(8, 16, 3, 2, 1)
        self.gate = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.dw(F.silu(self.stem(x))))
        h = h * torch.sigmoid(self.fc2(F.silu(self.fc1(h.mean((2, 3), keepdim=True)))))
        h = self.proj(h)
        g = torch.sigmoid(self.gate(h.sum((-1, -2)))).view(2, 16, 1, 1)  # keepdim=False
        return self.head((h * g).relu().mean((2, 3)))


def _excite(channels_last: bool):
    torch.manual_seed(0)
    return _in_layout(Excite().eval(), torch.randn(2, 3, 37, 41), channels_last)


def test_a_split_past_a_spatial_mean_runs_the_mean_and_its_gate_once() -> None:
    model, x = _excite(False)
    found = {s.node: s for s in splits(tp.capture(model, (x,)))}
    after = found["mul_3"]  # the gated map, past the first mean
    assert after.once == ("mean", "convolution_2", "sigmoid_2", "mul_2", "convolution_3",
                          "sigmoid_3")
    assert "mean" not in after.region and after.region[-1] == "mul_3"
    assert found["relu"].once[-1] == "view" and "sum_1" in found["relu"].once


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("grid", [(3, 2), (4, 5)])
@pytest.mark.parametrize("split", ["mul_3", "convolution_4", "relu"])
def test_a_patched_program_with_gates_equals_eager(split, grid, channels_last) -> None:
    model, x = _excite(channels_last)
    program, chosen, patched = _patched(model, x, split, grid)
    # each mean over the image is the sum of its tiles: one sum per tile, per reduction
    sums = [n for n in patched.graph.nodes if n.target is torch.ops.aten.sum.dim_IntList]
    reductions = sum(reduces_space(n) for n in program.graph.nodes
                     if n.name in chosen.once)
    assert len(sums) == reductions * grid[0] * grid[1] + (split != "relu")
    torch.testing.assert_close(patched.module()(x), model(x))
    if grid == (4, 5) and channels_last:  # once per split: the whole pipeline on it
        compiled = tp.compile(model, (x,), patches=grid)
        torch.testing.assert_close(compiled.run(x), model(x))


def test_each_spatial_reduction_costs_one_more_pass_over_its_prefix() -> None:
    model, x = _excite(False)
    program = tp.capture(model, (x,))
    found = {s.node: s for s in splits(program)}
    before, after = patches.overhead(program, found["mul_1"], (1, 1)), \
        patches.overhead(program, found["mul_3"], (1, 1))
    assert before == 1.0  # one tile, no reduction: the program as it was
    # past the mean, the stem and the depthwise convolution run once more, over the image
    nodes = {n.name: n for n in program.graph.nodes}
    again = patches._conv_macs(nodes["convolution"]) + patches._conv_macs(nodes["convolution_1"])
    assert after == pytest.approx(1.0 + again / patches.multiply_adds(program))


@pytest.mark.slow
def test_mobilenet_v2_patched_fits_in_under_a_third() -> None:
    from tensorplan import zoo

    example = zoo.example("hf_mobilenet_v2")
    program = tp.compile(example.model, example.args, patches=(4, 4))
    assert program.patching.chosen.split and program.patching.chosen.overhead <= 1.25
    assert program.plan.arena_bytes <= 0.33 * 903_360  # ExecuTorch's best configuration
    with torch.no_grad():
        torch.testing.assert_close(program.run(*example.args), example.model(*example.args))


@pytest.mark.slow
def test_efficientnet_b0_patched_through_its_gates_is_under_the_target() -> None:
    from tensorplan.zoo.vision import import_torchvision

    torch.manual_seed(0)
    model = import_torchvision().models.efficientnet_b0(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    program = tp.compile(model, (x,), patches=(3, 3))
    chosen = program.patching.chosen
    assert chosen.split == "mul_5" and chosen.overhead <= 1.05  # just before the second gate
    assert program.plan.arena_bytes <= 0.30 * 14_450_688  # ExecuTorch's best configuration
    with torch.no_grad():
        torch.testing.assert_close(program.run(x), model(x))


def test_cli_plan_prints_the_candidates(capsys) -> None:
    from tensorplan.cli import main

    assert main(["plan", "zoo:convnet", "--patches", "2x2"]) == 0
    output = capsys.readouterr().out
    assert "patch-by-patch candidates (multiply-adds within 1.25x)" in output
    assert "│ (as exported) │          │ 1x1  │ 393,216 B (384.0 KiB) │" in output
    kept = next(line for line in output.splitlines() if line.rstrip().endswith("yes  │"))
    assert "│ relu_2        │ x        │ 2x2  │ 262,144 B (256.0 KiB) │" in kept
    assert "grid: patch rows x columns of the split value" in output  # each column explained


def test_cli_refuses_a_malformed_grid(capsys) -> None:
    from tensorplan.cli import main

    with pytest.raises(SystemExit):
        main(["plan", "zoo:convnet", "--patches", "4by4"])
    assert "expected auto or ROWSxCOLS" in capsys.readouterr().err


def test_a_patched_program_saves_loads_and_reports_like_any_other(tmp_path) -> None:
    import json

    from tensorplan.report import plan_to_c_header, plan_to_json

    model, x = _stack(False, (96, 96))
    program = tp.compile(model, (x,), patches=(4, 4))
    assert program.patching.chosen.split and program.patching.chosen.grid == (4, 4)
    program.save(tmp_path / "patched.tplan")
    loaded = tp.load(tmp_path / "patched.tplan")
    assert loaded.plan == program.plan
    torch.testing.assert_close(loaded.run(x), model(x))
    doc = json.loads(json.dumps(plan_to_json(loaded, "patched")))
    assert doc["arena_bytes"] == program.plan.arena_bytes
    assert "PATCHED_ARENA_BYTES" in plan_to_c_header(loaded, "patched")


def test_a_program_with_dynamic_dims_is_not_patched_and_stays_dynamic():
    model, x = Stack().eval(), torch.randn(2, 3, 32, 32)
    batch = torch.export.Dim("batch", min=1, max=8)
    prog = tp.compile(model, (x,), dynamic_shapes=({0: batch},), patches="auto")
    assert prog.patching.declined == (
        "not patched: patches are cut at static sizes, and the program has dynamic dims "
        "(batch); export it at fixed sizes to patch it")
    assert prog.patching.candidates == (prog.patching.chosen,)
    assert [d.name for d in prog.plan.symbolic.dims] == ["batch"]  # not fixed at 2
    plain = tp.compile(model, (x,), dynamic_shapes=({0: batch},))
    assert prog.plan.arena_bytes_at(batch=5) == plain.plan.arena_bytes_at(batch=5)
    five = torch.randn(5, 3, 32, 32)
    torch.testing.assert_close(prog.run(five), model(five), rtol=0, atol=0)


def test_patches_on_a_dynamic_transformer_keep_its_dim():
    from tensorplan.zoo import example

    gpt = example("tiny_gpt")
    prog = tp.compile(gpt.model, gpt.args, dynamic_shapes=gpt.dynamic_shapes, patches="auto")
    assert "(seq)" in prog.patching.declined
    assert prog.plan.arena_bytes_at(seq=16) == 28_736  # as without patches (test_symbolic)


def test_with_the_optimal_planner_the_candidates_are_ranked_by_auto(monkeypatch) -> None:
    """Ranking a candidate plans it with "auto" when the compile plans optimally (a second or
    so each, not the optimal search's 30 s); the kept program alone gets the optimal plan."""
    from tensorplan.options import CompileOptions
    from tensorplan.plan.planners import dispatch
    from tensorplan.program import Candidates

    model, x = _stack(False, (96, 96))
    program = tp.capture(model, (x,))
    by_auto = Candidates(CompileOptions.of()).planned_arena_of(program)

    def refused(*args: object) -> None:
        raise AssertionError("the optimal search ran for a candidate")

    monkeypatch.setitem(dispatch.PLANNERS, "optimal", refused)
    assert Candidates(CompileOptions.of(algorithm="optimal")).planned_arena_of(program) == by_auto
