"""The CNN peak with patch-by-patch execution (``compile(..., patches="auto")``) vs without, and
vs ExecuTorch's best configuration.

Usage: ``python benchmarks/bench_patches.py [--out FILE] [--models a,b] [--runs N]``

Models (torchvision, random weights, batch 1, NCHW): MobileNetV2 at 160x160 and 224x224,
MnasNet 1.0, EfficientNet-B0 and ResNet-18 at 224x224, and ``common.FRESH_CNNS`` (families and
resolutions the list does not hold: MobileNetV3-small at 192, EfficientNet-B0 at 160,
MnasNet-0.5 at 176), summarized apart. Each is compiled with the defaults
(patches off) and with ``patches="auto"`` (grids 2x2, 3x3, 4x4 at the two deepest splits within
1.25x the convolutions' multiply-adds), both run on the example input and compared with eager,
timed against eager (median of ``--runs`` calls, one thread, interleaved). ExecuTorch's best
configuration: the smallest arena of ``common.EXECUTORCH_CONFIGS``' "greedy" and "const-prop"
(the best on every CNN of ``bench_plan.py``) among those that load and, where they run, equal
eager (``common.best_result``).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import common
import torch
from common import ExecuTorchResult, quiet, same_outputs

import tensorplan as tp
from tensorplan.zoo import Example
from tensorplan.zoo.vision import import_torchvision

DEFAULT_RUNS = 10
REASON_CHARS = 80
CONFIGS = ("greedy", "const-prop")
TARGET_MOBILENET_160 = 0.40  # arena / ExecuTorch best, MobileNetV2 at 160x160
TARGET_CNN = 0.60            # arena / ExecuTorch best, each CNN


def _models() -> dict[str, Callable[[], Example]]:
    def make(name: str, size: int) -> Callable[[], Example]:
        def build() -> Example:
            torch.manual_seed(0)
            model = getattr(import_torchvision().models, name)(weights=None).eval()
            return Example(model, (torch.randn(1, 3, size, size),))
        return build
    return {"mobilenet_v2_160": make("mobilenet_v2", 160),
            "mobilenet_v2_224": make("mobilenet_v2", 224),
            "mnasnet1_0": make("mnasnet1_0", 224), "efficientnet_b0": make("efficientnet_b0", 224),
            "resnet18": make("resnet18", 224),
            **{name: functools.partial(common.example, name) for name in common.FRESH_CNNS}}


@dataclass(frozen=True)
class Row:
    """One model's measurements."""

    model: str
    off: tp.Program
    on: tp.Program
    seconds: float  # compile time with patches="auto"
    executorch: tuple[ExecuTorchResult, ...]
    shipped: ExecuTorchResult | None  # the patched program's .pte (to_executorch), None
    #                                   without executorch
    equal: bool  # both programs equal eager
    times: dict[str, float]  # median ms: eager, off, on


def measure(name: str, build: Callable[[], Example], runs: int) -> Row:
    """Compile, run and time one model with patches off and on; lower it with ExecuTorch."""
    example = build()
    with quiet():
        off = tp.compile(example.model, example.args)
        start = time.perf_counter()
        on = tp.compile(example.model, example.args, patches="auto")
        seconds = time.perf_counter() - start
    with torch.no_grad():
        expected = example.model(*example.args)
        equal = same_outputs(expected, off.run(*example.args)) and \
            same_outputs(expected, on.run(*example.args))
    results = common.executorch_results(example, expected, CONFIGS, REASON_CHARS)
    shipped = common.shipped_result(on, example, expected, REASON_CHARS) \
        if common.executorch_installed() else None
    times = common.medians({"eager": lambda: example.model(*example.args),
                            "off": lambda: off.run(*example.args),
                            "on": lambda: on.run(*example.args)}, runs)
    return Row(name, off, on, seconds, results, shipped, equal, times)


def _shipped_cell(result: ExecuTorchResult | None, best: int | None) -> str:
    if result is None:
        return "not measured"
    if result.failed not in (None, "run") or result.arena is None:
        return f"{result.failed}: {result.reason}"
    above = f"; above the Python plan: {result.gap}" if result.gap else ""
    return f"{result.arena} ({common.ratio(result.arena, best)}){above}"



def table(rows: Sequence[Row]) -> str:
    header = ["model", "arena, patches off (B)", "arena, patches auto (B)", "on / off",
              "ExecuTorch best (B)", "on / ExecuTorch best",
              "shipped .pte, patches auto (B; / ExecuTorch best)", "split", "grid", "multiply-adds",
              "equal to eager", "eager ms; run / eager off → on", "auto compile (s)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        chosen, best = row.on.patching.chosen, common.best_result(row.executorch)
        best_arena = best.arena if best else None
        lines.append("| " + " | ".join([
            row.model, str(row.off.plan.arena_bytes), str(row.on.plan.arena_bytes),
            common.ratio(row.on.plan.arena_bytes, row.off.plan.arena_bytes),
            f"{best_arena} ({best.config})" if best else "none loads",
            common.ratio(row.on.plan.arena_bytes, best_arena),
            _shipped_cell(row.shipped, best_arena), chosen.split or "(none)",
            f"{chosen.grid[0]}x{chosen.grid[1]}", f"{chosen.overhead:.2f}x",
            "yes" if row.equal else "NO",
            f"{row.times['eager']:.1f}; {common.ratio(row.times['off'], row.times['eager'])} → "
            f"{common.ratio(row.times['on'], row.times['eager'])}", f"{row.seconds:.0f}"]) + " |")
    return "\n".join(lines) + "\n"


def summary(rows: Sequence[Row]) -> str:
    """``group_summary`` of the list's CNNs, then of the fresh configs' (when any ran)."""
    fresh = [row for row in rows if row.model in common.FRESH_CNNS]
    listed = [row for row in rows if row.model not in common.FRESH_CNNS]
    return "".join(group_summary(group, label) for group, label in
                   ((listed, ""), (fresh, "fresh-config ")) if group)


def group_summary(rows: Sequence[Row], label: str) -> str:
    """Over ``rows``: MobileNetV2 at 160 against its target (when among them), the median
    and the CNNs above ``TARGET_CNN`` of the arena over ExecuTorch's best, the largest
    multiply-add overhead, equality, and the shipped ``.pte``s' median."""
    ratios = {}
    for row in rows:
        best = common.best_result(row.executorch)
        if best and best.arena:
            ratios[row.model] = row.on.plan.arena_bytes / best.arena
    if not ratios:
        return f"No ExecuTorch figures for the {label}CNNs: no summary.\n"
    mobilenet = ratios.get("mobilenet_v2_160")
    missed = sorted(name for name, ratio in ratios.items() if ratio > TARGET_CNN)
    overhead = max(row.on.patching.chosen.overhead for row in rows)
    shipped = {row.model: row.shipped.arena / common.best_result(row.executorch).arena
               for row in rows if row.model in ratios and row.shipped is not None
               and row.shipped.failed is None and row.shipped.arena}
    ships = (f"; the patched programs shipped as .pte (ExecuTorch's runtime, equal to eager): "
             f"{len(shipped)} of {len(rows)}, median {statistics.median(shipped.values()):.2f}x "
             "of ExecuTorch's best" if shipped else "")
    first = ("" if mobilenet is None else
             f"MobileNetV2 at 160x160 plans {mobilenet:.2f}x of ExecuTorch's best (target <= "
             f"{TARGET_MOBILENET_160:.2f}x); ")
    return (f"**Summary**: with `patches=\"auto\"`, {first}"
            f"median over {len(ratios)} {label}CNNs {statistics.median(ratios.values()):.2f}x, "
            f"max {max(ratios.values()):.2f}x, above "
            f"{TARGET_CNN:.2f}x: {', '.join(missed) or 'none'}; largest multiply-add overhead "
            f"{overhead:.2f}x (budget 1.25x); every program equal to eager: "
            f"{'yes' if all(row.equal for row in rows) else 'NO'}{ships}.\n\n")


def report(rows: Sequence[Row], runs: int) -> str:
    return "".join([
        summary(rows),
        "Arena: `tp.compile` with the defaults (patches off) and with `patches=\"auto\"`; split "
        "and grid: the patching kept (its candidates are planned with tensorplan's greedy, the "
        "closest to the least planned again as the compile plans); "
        "multiply-adds: the patched convolutions' over the original's. ExecuTorch best: the "
        "smaller arena of its greedy and const-prop configurations among those that load and "
        "equal eager. Shipped: the patched program through `to_executorch`, run in "
        "ExecuTorch's runtime and equal to eager (a failure names its step); where its arena "
        "is above the Python plan's, the ExecuTorch kernels that hold apart, at the `.pte`'s "
        "busiest step, values the Python plan holds in one storage, with their bytes "
        "(`integrations.executorch.gap`). "
        f"Run: eager's median ms over {runs} calls, then `Program.run` / eager "
        "with patches off and on (one thread, interleaved).\n\n",
        table(rows)])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown table to this file")
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    options = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    models = _models()
    names = options.models.split(",") if options.models else list(models)
    rows = []
    for name in names:
        rows.append(measure(name, models[name], options.runs))
        print(f"{name}: done", file=sys.stderr, flush=True)
    common.emit(report(rows, options.runs), options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
