"""Int8 CNNs as ExecuTorch's Cortex-M backend runs them, planned whole and patch by patch.

Usage: ``python benchmarks/bench_int8.py [--out FILE] [--models a,b]``

Each model (random weights, batch 1, channels-last) goes through ExecuTorch's own Cortex-M flow
(``cortex_m.py``: ``CortexMQuantizer``, ``to_edge``, ``CortexMPassManager``): torchvision's
MobileNetV2 at 224x224 and 160x160 (the issue's and MCUNetV2's setting) and a CNN no zoo model
is (``fresh_inverted_residuals_96``: three inverted-residual blocks of other widths at 96x96).
Measured: ExecuTorch's own planning of the program (its default ``to_executorch``), tensorplan's
arena with the defaults and with ``patches="auto"`` (the split, grid and multiply-adds), the
float input image's bytes (every arena here counts it: it is the program's input, alive until
its ``quantize_per_tensor``), and whether both programs' outputs equal the edge program's own
module bit for bit. ExecuTorch's pip runtime has no ``cortex_m`` kernels, so nothing is run in
it.
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
from tensorplan.zoo.vision import import_torchvision

TARGET_PATCHED = 0.5  # patched arena / ExecuTorch's planning


def _image(size: int) -> Callable[[], torch.Tensor]:
    return lambda: torch.randn(1, 3, size, size).to(memory_format=torch.channels_last)


def _mobilenet_v2() -> torch.nn.Module:
    return import_torchvision().models.mobilenet_v2(weights=None)


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


MODELS: dict[str, tuple[Callable[[], torch.nn.Module], int]] = {
    "mobilenet_v2_224": (_mobilenet_v2, 224),
    "mobilenet_v2_160": (_mobilenet_v2, 160),
    "fresh_inverted_residuals_96": (_InvertedResiduals, 96),
}


@dataclass(frozen=True)
class Row:
    """One model's measurements."""

    model: str
    executorch: int        # bytes ExecuTorch's planning gives
    off: tp.Program
    on: tp.Program
    input_bytes: int
    equal: bool            # both programs bitwise equal to the edge program's module
    seconds: tuple[float, float]  # compile: defaults, patches="auto"


def measure(name: str) -> Row:
    """Run one model through the Cortex-M flow, plan it both ways and check it."""
    build, size = MODELS[name]
    torch.manual_seed(0)
    image = _image(size)
    flow = through_cortex_m(build().eval(), image)
    start = time.perf_counter()
    off = tp.compile(flow.manager)
    middle = time.perf_counter()
    on = tp.compile(flow.manager, patches="auto")
    seconds = (middle - start, time.perf_counter() - middle)
    module = flow.manager.exported_program().module()  # type: ignore[attr-defined]
    equal = all(torch.equal(program.run(x), module(x)) for x in (image(), image())
                for program in (off, on))
    return Row(name, executorch_planned_bytes(flow.manager), off, on,
               image().numel() * 4, equal, seconds)


def table(rows: Sequence[Row]) -> str:
    """The markdown table of the rows."""
    header = ["model", "ExecuTorch's planning (B)", "tensorplan (B)", "patches auto (B)",
              "/ ExecuTorch", "split, grid", "multiply-adds", "float input (B)",
              "bitwise equal", "compile s off → auto"]
    body = []
    for row in rows:
        chosen = row.on.patching.chosen
        body.append([row.model, str(row.executorch), str(row.off.plan.arena_bytes),
                     str(row.on.plan.arena_bytes),
                     common.ratio(row.on.plan.arena_bytes, row.executorch),
                     f"{chosen.split or '(as exported)'}, {chosen.grid[0]}x{chosen.grid[1]}",
                     f"{chosen.overhead:.2f}x", str(row.input_bytes),
                     "yes" if row.equal else "NO",
                     f"{row.seconds[0]:.1f} → {row.seconds[1]:.1f}"])
    return common.markdown(header, body)


def summary(rows: Sequence[Row]) -> str:
    """One line: the patched arenas against ExecuTorch's planning, and equality."""
    ratios = [row.on.plan.arena_bytes / row.executorch for row in rows]
    above = [row.model for row, r in zip(rows, ratios, strict=True) if r > TARGET_PATCHED]
    return (f"**Summary**: `patches=\"auto\"` plans the Cortex-M int8 programs at a median "
            f"{statistics.median(ratios):.2f}x of ExecuTorch's own planning ("
            f"{min(ratios):.2f}-{max(ratios):.2f}x; target <= {TARGET_PATCHED}x, above it: "
            f"{', '.join(above) or 'none'}); every program bitwise equal to the edge program: "
            f"{'yes' if all(row.equal for row in rows) else 'NO'}.\n")


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
