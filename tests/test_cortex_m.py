"""Int8 programs as ExecuTorch's Cortex-M backend runs them (issue 48, items 1-3).

A small int8 CNN through ExecuTorch 1.5.1's own Cortex-M flow (``CortexMQuantizer`` PT2E
quantization, ``to_edge`` with ``cortex_m_edge_compile_config``, ``CortexMPassManager``, as
its ``backends/cortex_m/test/tester.py`` does): the program is ``cortex_m::`` kernels on int8
channels-last tensors, with CMSIS-NN scratch buffers (``alloc``). tensorplan plans it in its
own dialect, from the program or from the ``EdgeProgramManager``, and runs it through the
kernels' reference implementations bitwise equal to the edge program's module.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("executorch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from cortex_m import CortexMFlow, executorch_planned_bytes, through_cortex_m  # noqa: E402

import tensorplan as tp  # noqa: E402
from tensorplan.errors import CaptureError  # noqa: E402
from tensorplan.integrations.executorch import emulate_pte, lower, run_pte  # noqa: E402

CL = torch.channels_last


class TinyInt8Cnn(torch.nn.Module):
    """A stride-2 stem, an inverted residual (depthwise 3x3, pointwise 1x1, a skip add), a
    stride-2 conv, a global average pool and a classifier: the ops of MobileNetV2."""

    def __init__(self) -> None:
        super().__init__()
        relu6 = torch.nn.ReLU6
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), relu6())
        self.depthwise = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1, groups=8),
                                             relu6())
        self.pointwise = torch.nn.Conv2d(8, 8, 1)
        self.down = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), relu6())
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        y = self.pointwise(self.depthwise(y)) + y
        return self.head(self.pool(self.down(y)).flatten(1))


class InvertedResiduals(torch.nn.Module):
    """MobileNetV2's first layers at 64x64: a stride-2 stem of 16 channels, a block expanding
    to 64 channels with a stride-2 depthwise conv, and a block with a skip add."""

    def __init__(self) -> None:
        super().__init__()
        relu6, conv = torch.nn.ReLU6, torch.nn.Conv2d
        self.stem = torch.nn.Sequential(conv(3, 16, 3, stride=2, padding=1), relu6())
        self.block1 = torch.nn.Sequential(
            conv(16, 64, 1), relu6(), conv(64, 64, 3, stride=2, padding=1, groups=64), relu6(),
            conv(64, 24, 1))
        self.block2 = torch.nn.Sequential(
            conv(24, 96, 1), relu6(), conv(96, 96, 3, padding=1, groups=96), relu6(),
            conv(96, 24, 1))
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.head = torch.nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block1(self.stem(x))
        y = self.block2(y) + y
        return self.head(self.pool(y).flatten(1))


class HardSwishStem(torch.nn.Module):
    """MobileNetV3's first layers at 64x64: a stride-2 stem and a depthwise conv, each followed
    by a hardswish (the Cortex-M passes make it ``minimum`` with a 0-d constant and
    ``quantized_mul``), a pointwise conv, a SiLU (a sigmoid's table, ``quantized_activation``,
    and a ``quantized_mul``), an elementwise maximum (left an edge-dialect ``aten.maximum``)
    and a stride-2 conv."""

    def __init__(self) -> None:
        super().__init__()
        conv, hardswish = torch.nn.Conv2d, torch.nn.Hardswish
        self.stem = torch.nn.Sequential(conv(3, 16, 3, stride=2, padding=1), hardswish())
        self.block = torch.nn.Sequential(conv(16, 16, 3, padding=1, groups=16), hardswish(),
                                         conv(16, 24, 1))
        self.down = torch.nn.Sequential(conv(24, 24, 3, stride=2, padding=1), torch.nn.ReLU6())
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.head = torch.nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(self.stem(x))
        y = torch.maximum(y * torch.sigmoid(y), y)
        return self.head(self.pool(self.down(y)).flatten(1))


def _image(size: int = 32) -> torch.Tensor:
    return torch.randn(1, 3, size, size).to(memory_format=CL)


def _flow(model: type[torch.nn.Module], size: int) -> tuple[CortexMFlow, torch.Tensor]:
    """A ``model``'s Cortex-M flow (``benchmarks/cortex_m.py``, the bench's) and an image."""
    torch.manual_seed(0)
    flow = through_cortex_m(model().eval(), lambda: _image(size))
    return flow, _image(size)


@pytest.fixture(scope="module")
def cortex_m() -> tuple[CortexMFlow, torch.Tensor]:
    """The Cortex-M program of ``TinyInt8Cnn`` at 32x32 (made once: the flow takes seconds)."""
    return _flow(TinyInt8Cnn, 32)


@pytest.fixture(scope="module")
def blocks() -> tuple[CortexMFlow, torch.Tensor]:
    """The Cortex-M program of ``InvertedResiduals`` at 64x64."""
    return _flow(InvertedResiduals, 64)


def _kernels(program: Any) -> set[str]:
    return {node.target._op._schema.name for node in program.graph.nodes
            if node.op == "call_function" and hasattr(node.target, "_op")}


def test_a_cortex_m_program_plans_from_its_manager_and_runs_bitwise_equal(
        cortex_m: tuple[CortexMFlow, torch.Tensor]) -> None:
    flow, image = cortex_m
    manager = flow.manager
    program = manager.exported_program()
    assert {"cortex_m::quantized_conv2d", "cortex_m::quantized_depthwise_conv2d",
            "cortex_m::quantized_add", "cortex_m::quantize_per_tensor"} <= _kernels(program)
    prog = tp.compile(manager)
    assert prog.plan.arena_bytes == tp.compile(program).plan.arena_bytes == 15_360
    for x in (image, _image()):
        assert torch.equal(prog.run(x), program.module()(x))
    # each kernel ran once per call and its result was copied into its planned storage
    assert prog.stats["cortex_m.quantized_conv2d.default"] == 3 * 2


def test_its_values_are_int8_and_its_plan_no_larger_than_executorchs(
        cortex_m: tuple[CortexMFlow, torch.Tensor]) -> None:
    manager = cortex_m[0].manager
    prog = tp.compile(manager)
    convs = [n.name for n in prog.exported_program.graph.nodes
             if "quantized_conv2d" in str(n.target)]
    assert len(convs) == 3 and all(prog.specs[name].dtype == torch.int8 for name in convs)
    assert prog.plan.arena_bytes <= executorch_planned_bytes(manager) == 15_360


def test_a_patched_program_saves_and_loads_with_its_plan_and_runs_bitwise_equal(
        blocks: tuple[CortexMFlow, torch.Tensor], tmp_path: Path) -> None:
    """Saved, each edge-dialect kernel is stored as the ``cortex_m::`` operator it wraps and
    each CMSIS-NN scratch ``alloc`` as an ``empty`` of its shape and dtype (the program in
    memory is left as it was); loaded where the Cortex-M operators are registered, the plan is
    the saved one and the runs are bitwise equal. Where they are not registered, loading
    names the operator."""
    flow, image = blocks
    prog = tp.compile(flow.manager, patches="auto", inputs_in_arena=False)
    targets = [n.target for n in prog.exported_program.graph.nodes]
    path = tmp_path / "int8.tplan"
    prog.save(path)
    assert [n.target for n in prog.exported_program.graph.nodes] == targets
    loaded = tp.load(path)
    assert loaded.plan == prog.plan and loaded.plan.arena_bytes == 37_360
    for x in (image, _image(64)):
        assert torch.equal(loaded.run(x), flow.manager.exported_program().module()(x))
    elsewhere = subprocess.run(
        [sys.executable, "-c", f"import tensorplan as tp; tp.load({str(path)!r})"],
        capture_output=True, text=True, check=False)
    assert elsewhere.returncode == 1
    assert re.search(r"FormatError: .*not a loadable torch\.export program \(We failed to "
                     r"resolve torch\.ops\.cortex_m\.\w+\.default to an operator. If it's a "
                     r"custom op", elsewhere.stderr)
    assert "Ran into the following error" not in elsewhere.stderr  # said once, in the error


def test_a_loaded_programs_scratch_is_planned_when_it_is_compiled_again(
        cortex_m: tuple[CortexMFlow, torch.Tensor], tmp_path: Path) -> None:
    """Saved, a scratch ``alloc`` is an ``empty`` of no input, which folding would compute
    once and keep as a constant; compiled again from the loaded program, every scratch is
    still planned in the arena, as from the manager."""
    flow, image = cortex_m
    prog = tp.compile(flow.manager)
    path = tmp_path / "tiny.tplan"
    prog.save(path)
    again = tp.compile(tp.load(path).exported_program)
    assert again.schedule.folded.computed == frozenset()
    assert again.plan.arena_bytes == prog.plan.arena_bytes
    assert torch.equal(again.run(image), flow.manager.exported_program().module()(image))


def test_a_manager_without_a_forward_program_says_what_to_pass() -> None:
    class Methods:
        def exported_program(self, method_name: str = "forward") -> Any:
            raise KeyError(method_name)

    with pytest.raises(CaptureError, match=r"manager.exported_program\(<method name>\)"):
        tp.compile(Methods())


def test_patches_run_the_int8_prefix_patch_by_patch_bitwise_equal(
        blocks: tuple[CortexMFlow, torch.Tensor]) -> None:
    """The int8 input is quantized once, whole; the stem and the first block (its expansion,
    stride-2 depthwise conv and projection) run 3x3 patch by patch (each patch's halo read
    from its neighbours, the borders padded with the input's zero point), and the program
    equals the unpatched one bit for bit. A 2x2 grid through the second block's skip add
    plans as small an arena at more multiply-adds, so it is not kept."""
    flow, image = blocks
    manager = flow.manager
    program = manager.exported_program()
    whole = tp.compile(manager)
    patched = tp.compile(manager, patches="auto")
    chosen = patched.patching.chosen
    assert whole.plan.arena_bytes == 86_384
    assert (chosen.split, chosen.grid, patched.plan.arena_bytes) == \
        ("cortex_m_quantized_conv2d_default_2", (3, 3), 61_440)
    assert chosen.source == "cortex_m_quantize_per_tensor_default"  # the image quantized whole
    assert 1.0 < chosen.overhead < 1.06  # the halos' multiply-adds, depthwise windows per channel
    through_add = [c for c in patched.patching.candidates
                   if c.split == "cortex_m_quantized_add_default" and c.source == chosen.source]
    assert [(c.grid, c.planned_bytes) for c in through_add] == [((2, 2), 61_440)]
    assert through_add[0].overhead > chosen.overhead
    for x in (image, _image(64), _image(64)):
        assert torch.equal(patched.run(x), program.module()(x))
    assert patched.patching.stopped.startswith(
        "the patches end at node 'cortex_m_quantized_avg_pool2d_default'")


def test_the_patched_program_ships_its_plan_and_its_pte_runs_bitwise_equal_emulated(
        blocks: tuple[CortexMFlow, torch.Tensor]) -> None:
    """``to_executorch`` of the patched program: ExecuTorch's verifier passes (``lower`` runs
    it on the program kept), the ``.pte`` holds the Python plan's arena, and run from its
    bytes with that plan (``emulate_pte``: the Cortex-M kernels' reference implementations)
    it equals the unpatched edge program bit for bit. ExecuTorch's pip runtime has no
    Cortex-M kernels and refuses it."""
    flow, image = blocks
    patched = tp.compile(flow.manager, patches="auto")
    shipped = lower(patched)
    assert shipped.arena_bytes == patched.plan.arena_bytes == 61_440
    expected = flow.manager.exported_program().module()
    for x in (image, _image(64)):
        (emulated,) = emulate_pte(shipped.manager.buffer, [x])
        assert torch.equal(emulated, expected(x))
    with pytest.raises(tp.ShipError, match=r"Missing operator: \[\d+\] cortex_m::"):
        run_pte(shipped.manager.buffer, [image])


@pytest.mark.parametrize("prefer", ["arena", "time"])
def test_no_kernel_scratch_is_shipped_as_a_constant(
        cortex_m: tuple[CortexMFlow, torch.Tensor], prefer: str) -> None:
    """A CMSIS-NN kernel writes its ``scratch`` buffer (an ``alloc`` of the Cortex-M passes),
    though its schema reads it: the ``.pte`` must plan it in the arena, as ExecuTorch's own
    lowering does, never fold it into the constants (a device keeps those in flash). The
    program is lowered as the edge program it is: ``to_edge`` of it again made each ``alloc``
    an ``empty``, which constant propagation folded (DS-CNN's ``.pte`` was 16,000 B with
    10,576 B of scratch among its constants)."""
    from tensorplan.ops.schemas import scratch_position

    flow, image = cortex_m
    program = tp.compile(flow.manager)
    shipped = lower(program, prefer=prefer)
    kept = shipped.manager.exported_program()
    constants = {node.name for node in kept.graph.nodes if node.op == "placeholder"}
    scratches = [node.args[position] for node in kept.graph.nodes
                 if node.op == "call_function" and (position := scratch_position(node)) is not None]
    assert scratches and not [s.name for s in scratches if s.name in constants]
    assert shipped.arena_bytes == program.plan.arena_bytes
    assert shipped.arena_bytes <= executorch_planned_bytes(flow.manager)
    (emulated,) = emulate_pte(shipped.manager.buffer, [image])
    assert torch.equal(emulated, flow.manager.exported_program().module()(image))


def test_the_patched_program_without_the_image_ships_without_it(
        blocks: tuple[CortexMFlow, torch.Tensor]) -> None:
    """Compiled with the image outside the arena, the ``.pte`` leaves it out too
    (``alloc_graph_input=False``). Its arena is above the Python plan's, and ``pte_gap`` says
    why: ExecuTorch's ``slice_copy`` copies a patch's region of the image where the Python
    plan reads it as a view."""
    from tensorplan.integrations.executorch.gap import describe, pte_gap

    flow, image = blocks
    patched = tp.compile(flow.manager, patches="auto", inputs_in_arena=False)
    shipped = lower(patched)
    assert (patched.plan.arena_bytes, shipped.arena_bytes) == (37_360, 52_816)
    assert describe(pte_gap(patched, shipped)) == (
        "aten::slice_copy.Tensor_out copies where the Python plan has a view: 29,952 B at the "
        "peak")
    assert shipped.arena_bytes < executorch_planned_bytes(flow.manager, inputs_in_arena=False)
    (emulated,) = emulate_pte(shipped.manager.buffer, [image])
    assert torch.equal(emulated, flow.manager.exported_program().module()(image))


def test_the_image_outside_the_arena_is_counted_as_executorch_counts_it(
        cortex_m: tuple[CortexMFlow, torch.Tensor]) -> None:
    """With the float image in the camera's buffer (``inputs_in_arena=False``), the arena is
    ExecuTorch's with ``alloc_graph_input=False``, and the runs stay bitwise equal."""
    flow, image = cortex_m
    prog = tp.compile(flow.manager, inputs_in_arena=False)
    assert (prog.plan.arena_bytes, prog.plan.input_bytes) == (8_560, 3 * 32 * 32 * 4)
    assert prog.plan.arena_bytes == executorch_planned_bytes(flow.manager, inputs_in_arena=False)
    assert torch.equal(prog.run(image), flow.manager.exported_program().module()(image))


def test_patches_chosen_by_the_arena_without_the_image(
        blocks: tuple[CortexMFlow, torch.Tensor]) -> None:
    """MCUNetV2's way of counting: the image not in the arena. The unpatched peak (block 1's
    expansion) does not hold the image, so only the patches lower it, each patch quantized
    from the float image's patch (no whole int8 copy) and each kernel call with a scratch
    buffer of its own: 86,384 -> 37,360 B. With the image in the arena it is quantized whole
    first instead (it dies there): 61,440 B."""
    flow, image = blocks
    whole = tp.compile(flow.manager, inputs_in_arena=False)
    patched = tp.compile(flow.manager, patches="auto", inputs_in_arena=False)
    assert whole.plan.arena_bytes == 86_384 == \
        executorch_planned_bytes(flow.manager, inputs_in_arena=False)
    assert patched.plan.input_bytes == 3 * 64 * 64 * 4
    chosen = patched.patching.chosen
    assert (chosen.grid, chosen.source, patched.plan.arena_bytes) == ((2, 2), "x", 37_360)
    assert torch.equal(patched.run(image), flow.manager.exported_program().module()(image))
    # no split at the image's quantize alone (a patch of it frees nothing): at each grid the
    # two deepest splits within the multiply-add budget, each from either source: the stem
    # conv and the skip add at 2x2, the stem and the first block's projection at 3x3 and 4x4
    # (the add's halos cost too much there)
    tried = patched.patching.candidates[1:]
    assert len(tried) == 3 * 2 * 2
    assert sorted({(c.grid, c.split.removeprefix("cortex_m_quantized_")) for c in tried}) == [
        ((2, 2), "add_default"), ((2, 2), "conv2d_default_1"),
        ((3, 3), "conv2d_default_1"), ((3, 3), "conv2d_default_2"),
        ((4, 4), "conv2d_default_1"), ((4, 4), "conv2d_default_2")]
    assert not any(c.split.startswith("cortex_m_quantize_per_tensor") for c in tried)


def test_patches_are_ranked_by_the_arena_the_compile_plans() -> None:
    """MLPerf Tiny's ResNet8 (ExecuTorch's Cortex-M test model) with the image outside: the
    candidates within ``ESTIMATE_MARGIN`` of the least greedy arena are planned again as the
    compile plans, the least of those is kept, and the compile's plan is that one."""
    from executorch.examples.models.mlperf_tiny import ResNet8

    torch.manual_seed(0)
    flow = through_cortex_m(ResNet8().eval(), _image)
    patched = tp.compile(flow.manager, patches="auto", inputs_in_arena=False)
    chosen, tried = patched.patching.chosen, patched.patching.candidates
    least = min(c.arena_bytes for c in tried)
    again = [c for c in tried if c.planned_bytes is not None]
    assert {c for c in tried if c.arena_bytes <= least * 1.15} == set(again)
    assert len(again) >= 2 and chosen.planned_bytes == min(c.planned_bytes for c in again)
    assert (chosen.source, chosen.grid, patched.plan.arena_bytes) == ("x", (2, 2), 27_920)
    assert patched.plan.arena_bytes == chosen.planned_bytes == patched.plan.lower_bound_bytes
    image = _image()
    assert torch.equal(patched.run(image), flow.manager.exported_program().module()(image))


def test_a_program_whose_quantization_has_no_patch_rule_is_planned_as_it_stands(
        blocks: tuple[CortexMFlow, torch.Tensor]) -> None:
    """The PT2E program before the Cortex-M passes: its input's ``quantize_per_tensor`` (the
    ``quantized_decomposed`` dialect, float values between ops) has no patch rule, so nothing
    is patched, no error, and ``patching`` names the node."""
    flow, image = blocks
    quantized = flow.quantized
    prog = tp.compile(quantized, patches="auto")
    assert prog.patching.chosen.split == ""
    assert "reads the image and has no patch rule" in prog.patching.stopped
    assert "quantize_per_tensor" in prog.patching.stopped
    with torch.no_grad():
        assert torch.equal(prog.run(image), quantized.module()(image))


def test_hardswish_and_silu_kernels_run_patch_by_patch_bitwise_equal() -> None:
    """``minimum`` (with a 0-d constant every patch reads whole), ``quantized_mul``,
    ``quantized_activation`` and the edge-dialect ``aten.maximum`` are pointwise: the patches
    run through them to the stride-2 conv, each patch quantized from the image's patch,
    73,728 -> 13,456 B with the image outside the arena (ExecuTorch: 73,728 B), bitwise equal
    to the edge program."""
    flow, image = _flow(HardSwishStem, 64)
    program = flow.manager.exported_program()
    assert {"cortex_m::minimum", "cortex_m::quantized_mul", "cortex_m::quantized_activation",
            "aten::maximum"} <= _kernels(program)
    whole = tp.compile(flow.manager, inputs_in_arena=False)
    patched = tp.compile(flow.manager, patches="auto", inputs_in_arena=False)
    chosen = patched.patching.chosen
    assert executorch_planned_bytes(flow.manager, inputs_in_arena=False) == 73_728
    assert (whole.plan.arena_bytes, patched.plan.arena_bytes) == (73_728, 13_456)
    assert (chosen.split, chosen.grid, chosen.source) == \
        ("cortex_m_quantized_conv2d_default_2", (4, 4), "x")
    patched_nodes = {name.partition("_patch")[0] for name in patched.specs}
    assert {"cortex_m_minimum_default_1", "cortex_m_quantized_activation_default",
            "aten_maximum_default"} <= patched_nodes
    for x in (image, _image(64)):
        assert torch.equal(patched.run(x), program.module()(x))
