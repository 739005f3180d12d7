"""Int8 CNNs as ExecuTorch's Cortex-M backend runs them, planned whole and patch by patch.

Usage: ``python benchmarks/bench_int8.py [--out FILE] [--models a,b]``

Each model (random weights, batch 1, channels-last) goes through ExecuTorch's own Cortex-M flow
(``cortex_m.py``: ``CortexMQuantizer``, ``to_edge``, ``CortexMPassManager``): torchvision's
MobileNetV2 at 224x224 and 160x160 (the issue's and MCUNetV2's setting), a CNN no zoo model
is (``fresh_inverted_residuals_96``: three inverted-residual blocks of other widths at 96x96),
and the models of ExecuTorch's own Cortex-M tests at their tests' sizes (torchvision's
MobileNetV3-small at 232x232; MLPerf Tiny's MobileNetV1-0.25 at 96x96, ResNet8 at 32x32 and
DS-CNN on a 49x10 spectrogram, as ``executorch.examples.models.mlperf_tiny`` builds them).
Measured two ways, as deployments count: with the float input image in the arena (it is the
program's input, alive until its ``quantize_per_tensor``; TensorFlow Lite Micro counts so) and
with the image in a buffer of its own (``compile(inputs_in_arena=False)``, ExecuTorch's
``alloc_graph_input=False``; MCUNetV2 counts so: its 172 kB for MobileNetV2 at 224 leaves the
image out). Each way: ExecuTorch's own planning of the program (its ``to_executorch``),
tensorplan's arena with the defaults and with ``patches="auto"`` (the split, the value the
patches are cut from, the grid and multiply-adds), and whether every program's outputs equal
the edge program's own module bit for bit. The patched program is also shipped
(``integrations.executorch.lower``: ExecuTorch's verifier, the ``.pte``'s arena beside the
Python plan's) and its ``.pte`` run from its bytes with its plan (``emulate_pte``: the kernels'
reference implementations), since ExecuTorch's pip runtime has no ``cortex_m`` kernels and
runs none of these programs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import common
import torch
from common import quiet
from cortex_m import executorch_planned_bytes, through_cortex_m

import tensorplan as tp
from tensorplan.integrations.executorch import Shipped, emulate_pte, lower
from tensorplan.integrations.executorch.gap import describe, pte_gap
from tensorplan.zoo.vision import import_torchvision

TARGET_PATCHED = 0.5  # patched arena / ExecuTorch's planning
MCUNETV2_224 = 172_000  # MCUNetV2's MobileNetV2 int8 at 224, patch by patch, image not counted


def _image(shape: tuple[int, ...]) -> Callable[[], torch.Tensor]:
    return lambda: torch.randn(shape).to(memory_format=torch.channels_last)


def _mobilenet_v2() -> torch.nn.Module:
    return import_torchvision().models.mobilenet_v2(weights=None)


def _mobilenet_v3_small() -> torch.nn.Module:
    return import_torchvision().models.mobilenet_v3_small(weights=None)


def _mlperf_tiny(name: str) -> Callable[[], torch.nn.Module]:
    """The MLPerf Tiny model class ``name`` that ExecuTorch ships
    (``executorch.examples.models.mlperf_tiny``, its Cortex-M tests' models)."""
    def build() -> torch.nn.Module:
        from executorch.examples.models import mlperf_tiny

        return getattr(mlperf_tiny, name)()
    return build


class _InvertedResiduals(torch.nn.Module):
    """A stride-2 stem of 24 channels, then three inverted-residual blocks (expansion 4, a
    stride-2 depthwise conv in the first, skip adds in the others), a pool and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        relu6, conv = torch.nn.ReLU6, torch.nn.Conv2d

        def block(inputs: int, outputs: int, stride: int) -> torch.nn.Module:
            wide = 4 * inputs
            return torch.nn.Sequential(
                conv(inputs, wide, 1), relu6(),
                conv(wide, wide, 3, stride=stride, padding=1, groups=wide), relu6(),
                conv(wide, outputs, 1))
        self.stem = torch.nn.Sequential(conv(3, 24, 3, stride=2, padding=1), relu6())
        self.first, self.second, self.third = block(24, 32, 2), block(32, 32, 1), block(32, 32, 1)
        self.head = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                        torch.nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.first(self.stem(x))
        y = self.second(y) + y
        return self.head(self.third(y) + y)


MODELS: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]] = {
    "mobilenet_v2_224": (_mobilenet_v2, (1, 3, 224, 224)),
    "mobilenet_v2_160": (_mobilenet_v2, (1, 3, 160, 160)),
    "fresh_inverted_residuals_96": (_InvertedResiduals, (1, 3, 96, 96)),
    # the models of ExecuTorch's own Cortex-M tests (backends/cortex_m/test/models), at their
    # tests' input sizes
    "executorch_mobilenet_v3_small_232": (_mobilenet_v3_small, (1, 3, 232, 232)),
    "executorch_mobilenet_v1_025_96": (_mlperf_tiny("MobileNetV1025"), (1, 3, 96, 96)),
    "executorch_resnet8_32": (_mlperf_tiny("ResNet8"), (1, 3, 32, 32)),
    "executorch_ds_cnn_49x10": (_mlperf_tiny("DSCNNKWS"), (1, 1, 49, 10)),
}


@dataclass(frozen=True)
class Counted:
    """One model planned one way (the image in the arena or not)."""

    executorch: int        # bytes ExecuTorch's planning gives
    off: tp.Program
    on: tp.Program         # patches="auto"
    seconds: tuple[float, float]  # compile: defaults, patches="auto"
    shipped: Shipped       # ``on`` lowered to a .pte (its manager kept for the emulation)


@dataclass(frozen=True)
class Row:
    """One model's measurements."""

    model: str
    inside: Counted        # the float image in the arena
    outside: Counted       # the image in a buffer of its own
    input_bytes: int
    equal: bool            # every program bitwise equal to the edge program's module
    pte_equal: bool        # every patched .pte, emulated, bitwise equal to it as well


def _counted(manager: object, inputs_in_arena: bool) -> Counted:
    start = time.perf_counter()
    off = tp.compile(manager, inputs_in_arena=inputs_in_arena)
    middle = time.perf_counter()
    on = tp.compile(manager, patches="auto", inputs_in_arena=inputs_in_arena)
    seconds = (middle - start, time.perf_counter() - middle)
    return Counted(executorch_planned_bytes(manager, inputs_in_arena), off, on, seconds,
                   lower(on))


def measure(name: str) -> Row:
    """Run one model through the Cortex-M flow, plan it both ways and check it."""
    build, shape = MODELS[name]
    torch.manual_seed(0)
    image = _image(shape)
    flow = through_cortex_m(build().eval(), image)
    inside, outside = _counted(flow.manager, True), _counted(flow.manager, False)
    module = flow.manager.exported_program()  # type: ignore[attr-defined]
    run = module.module()
    equal = all(torch.equal(program.run(x), run(x)) for x in (image(), image())
                for counted in (inside, outside) for program in (counted.off, counted.on))
    x = image()
    pte_equal = all(torch.equal(emulate_pte(counted.shipped.manager.buffer, [x])[0], run(x))
                    for counted in (inside, outside))
    return Row(name, inside, outside, image().numel() * 4, equal, pte_equal)


def table(rows: Sequence[Row]) -> str:
    """The markdown table of the rows, one line per model and way of counting."""
    header = ["model", "image", "ExecuTorch's planning (B)", "tensorplan (B)",
              "patches auto (B)", "/ ExecuTorch", "split, cut from, grid", "multiply-adds",
              "bitwise equal", "patched .pte (B)", ".pte emulated bitwise equal",
              "compile s off → auto"]
    body = []
    for row in rows:
        for way, counted in (("in the arena", row.inside),
                             (f"outside ({row.input_bytes} B)", row.outside)):
            chosen = counted.on.patching.chosen
            where = f"{chosen.split}, {chosen.source}" if chosen.split else "(as exported)"
            body.append([row.model, way, str(counted.executorch),
                         str(counted.off.plan.arena_bytes), str(counted.on.plan.arena_bytes),
                         common.ratio(counted.on.plan.arena_bytes, counted.executorch),
                         f"{where}, {chosen.grid[0]}x{chosen.grid[1]}",
                         f"{chosen.overhead:.2f}x", "yes" if row.equal else "NO",
                         _pte_cell(counted), "yes" if row.pte_equal else "NO",
                         f"{counted.seconds[0]:.1f} → {counted.seconds[1]:.1f}"])
    return common.markdown(header, body)


def _pte_cell(counted: Counted) -> str:
    """The patched .pte's arena against the Python plan's, and what keeps it above."""
    pte = counted.shipped.arena_bytes
    gap = describe(pte_gap(counted.on, counted.shipped))
    return (f"{pte} ({common.ratio(pte, counted.on.plan.arena_bytes)} of the Python plan)"
            + (f"; above it: {gap}" if gap else ""))


def _arena(counted: Counted) -> str:
    """The patched arena, and its ratio to ExecuTorch's planning: ``330,608 B (0.22x)``."""
    arena = counted.on.plan.arena_bytes
    return f"{arena:,} B ({arena / counted.executorch:.2f}x)"


def _ratios(rows: Sequence[Row], way: str) -> list[float]:
    return [getattr(row, way).on.plan.arena_bytes / getattr(row, way).executorch
            for row in rows]


def summary(rows: Sequence[Row]) -> str:
    """One line: the patched arenas against ExecuTorch's planning both ways (the rows above
    the target named), the unpatched ones above it (none expected), MCUNetV2's figure, and
    equality."""
    inside, outside = _ratios(rows, "inside"), _ratios(rows, "outside")

    def above(ratios: Sequence[float]) -> str:
        return ", ".join(row.model for row, r in zip(rows, ratios, strict=True)
                         if r > TARGET_PATCHED) or "none"

    heavier = sorted({row.model for row in rows for counted in (row.inside, row.outside)
                      if counted.off.plan.arena_bytes > counted.executorch})
    mcunet = next((f"; MobileNetV2 at 224: {_arena(row.inside)} with the image in the arena, "
                   f"{_arena(row.outside)} with it outside (MCUNetV2: {MCUNETV2_224:,} B)"
                   for row in rows if row.model == "mobilenet_v2_224"), "")
    return (f"**Summary** over {len(rows)} models: `patches=\"auto\"` plans the Cortex-M int8 "
            f"programs at a median {statistics.median(inside):.2f}x of ExecuTorch's own "
            f"planning with the image in the arena ({min(inside):.2f}-{max(inside):.2f}x; "
            f"target <= {TARGET_PATCHED}x, above it: {above(inside)}), "
            f"{statistics.median(outside):.2f}x with the image outside it "
            f"({min(outside):.2f}-{max(outside):.2f}x; above the target: {above(outside)}); "
            f"unpatched, above ExecuTorch's planning: {', '.join(heavier) or 'none'}{mcunet}; "
            f"every program bitwise equal to the edge program: "
            f"{'yes' if all(row.equal for row in rows) else 'NO'}; the patched `.pte`s "
            f"{_shipped(rows)}, every one emulated bitwise equal: "
            f"{'yes' if all(row.pte_equal for row in rows) else 'NO'}.\n")


def _shipped(rows: Sequence[Row]) -> str:
    """The patched .pte's arena against the Python plan's, both ways of counting."""
    ratios = {way: [getattr(row, way).shipped.arena_bytes / getattr(row, way).on.plan.arena_bytes
                    for row in rows] for way in ("inside", "outside")}
    return (f"at {min(ratios['inside']):.2f}-{max(ratios['inside']):.2f}x the Python plan with "
            f"the image in the arena, {min(ratios['outside']):.2f}-"
            f"{max(ratios['outside']):.2f}x with it outside")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown table to this file")
    parser.add_argument("--models", help="comma-separated names (default: all)")
    options = parser.parse_args(argv)
    if not common.executorch_installed():
        print("bench_int8: needs the executorch extra (pip install -e '.[executorch]')")
        return 1
    torch.set_num_threads(1)
    names = options.models.split(",") if options.models else list(MODELS)
    rows = []
    for name in names:
        with quiet():
            rows.append(measure(name))
        print(f"{name}: done", file=sys.stderr, flush=True)
    common.emit(summary(rows) + "\n" + table(rows), options.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
