"""Real size: a 30-layer, 135 M-parameter model's static-cache decode step (issue 30).

Usage: ``python benchmarks/bench_real_size.py [--out FILE] [--layers N --cache N [--small]]``

By default it measures ``SHAPES``: the real size, then a fresh, smaller shape of the same step
(hidden 128, 4 query over 2 key-value heads, MLP 344, vocabulary 1,000; 24 layers, a cache of
512), each with a summary line of its own. ``--layers`` and ``--cache`` (with ``--small`` for
the smaller widths) measure that one shape instead.

The case is ``zoo.hf.smollm2_static_cache``: SmolLM2-135M's shape, a one-token decode step over
a static KV cache of 1,024 positions held in mutable buffers (47 MB), random weights. Each step
runs in a fresh subprocess, after the model is built, so its time and memory are its own:

- ``tp.compile`` (capture, plan, everything a ``Program`` holds);
- ``to_executorch`` of that program (tensorplan's ``.pte``, ``lower``);
- ExecuTorch's own lowering of the same exported program, in each configuration of
  ``common.EXECUTORCH_CONFIGS`` that plans a KV cache in place (its default, and const-prop
  with its re-inplace pass).

Per step: wall seconds, and peak memory above what the process held once the model was built
(``ru_maxrss`` at the end minus the resident size before the step). The arenas: the Python plan,
the ``.pte``'s, ExecuTorch's; every ``.pte`` is run once in ExecuTorch's runtime and compared with
eager. Targets (``*_TARGET``, in each shape's summary line): ``.pte`` arena <= 1.05x the Python
plan; compile <= 0.5x ExecuTorch's fastest lowering time, ``to_executorch`` <= 1.3x; peak memory
<= 1.5x the weights (a target for the real size: the fresh shape's 17 MiB of weights are less
than what any of the steps holds of its own).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import common
import torch
from common import quiet

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = ("compile", "pte", "greedy", "const-prop + re-inplace")
MIB = 1 << 20


def _resident_bytes() -> int:
    with open("/proc/self/statm", encoding="utf-8") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


SMALL = {"hidden": 128, "heads": 4, "kv_heads": 2, "intermediate": 344, "vocab": 1000}
# (smaller widths, layers, cache positions) measured by default: the real size, then a fresh one
SHAPES = ((False, 30, 1024), (True, 24, 512))
COMPILE_TARGET = 0.5  # tp.compile's seconds over ExecuTorch's fastest lowering
PTE_TARGET = 1.3      # to_executorch's seconds over ExecuTorch's fastest lowering
PEAK_TARGET = 1.5     # a step's peak memory growth over the weights
ARENA_TARGET = 1.05   # the .pte's arena over the Python plan's


def _measure(step: str, layers: int, cache: int, small: bool) -> dict:
    """Build the model, then run ``step`` once: its seconds, peak growth and figures."""
    from executorch.runtime import Runtime

    import tensorplan as tp
    from tensorplan.integrations.executorch import lower
    from tensorplan.zoo.hf import smollm2_static_cache

    torch.manual_seed(0)
    torch.set_num_threads(1)
    example = smollm2_static_cache(layers, cache, **(SMALL if small else {}))
    weights = sum(p.numel() * p.element_size() for p in example.model.parameters())
    with torch.no_grad():
        expected = example.model(*example.args)  # writes position 0 again: the same step
    before, start = _resident_bytes(), time.perf_counter()
    result: dict = {"weights": weights}
    with torch.no_grad(), quiet():
        if step == "compile":
            prog = tp.compile(example.model, example.args)
            result["arena"] = prog.plan.arena_bytes
        elif step == "pte":
            prog = tp.compile(example.model, example.args)
            before, start = _resident_bytes(), time.perf_counter()
            manager = lower(prog).manager
        else:
            exported = torch.export.export(example.model, example.args, strict=False)
            before, start = _resident_bytes(), time.perf_counter()
            from executorch.exir import to_edge

            edge = to_edge(exported)
            manager = edge.to_executorch(common._backend_config(step, edge.exported_program()))
    result["seconds"] = time.perf_counter() - start
    result["peak_growth"] = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
                                - before)
    if step != "compile":
        result["arena"] = common.executorch_arena_bytes(manager)
        program = Runtime.get().load_program(manager.buffer)  # owns the bytes
        got = program.load_method("forward").execute(list(example.args))[0]
        result["difference"] = (got - expected).abs().max().item()
    return result


def _child(step: str, layers: int, cache: int, small: bool) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--step", step, "--layers",
               str(layers), "--cache", str(cache)] + (["--small"] if small else [])
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"failed": common.one_line(done.stderr.strip().splitlines()[-1]
                                          if done.stderr.strip() else "no output", 160)}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _lowering_seconds(results: dict[str, dict]) -> float | None:
    """The fastest of ExecuTorch's own lowerings, or None when none ran."""
    return min((results[s]["seconds"] for s in STEPS[2:] if "seconds" in results[s]),
               default=None)


def _summary(results: dict[str, dict], label: str) -> str:
    """The targets of the docstring, each with its figure and whether it is met."""
    if any("failed" in results[step] for step in STEPS[:2]) or _lowering_seconds(results) is None:
        return f"**Summary** ({label}): a step failed; see the table.\n\n"
    lowering, weights = _lowering_seconds(results), results["compile"]["weights"]
    compile_, pte = results["compile"], results["pte"]
    figures = [("compile / ExecuTorch's fastest lowering", compile_["seconds"] / lowering,
                COMPILE_TARGET),
               ("`to_executorch` / ExecuTorch's fastest lowering", pte["seconds"] / lowering,
                PTE_TARGET),
               ("compile peak / weights", compile_["peak_growth"] / weights, PEAK_TARGET),
               ("`to_executorch` peak / weights", pte["peak_growth"] / weights, PEAK_TARGET),
               ("`.pte` arena / Python plan", pte["arena"] / compile_["arena"], ARENA_TARGET)]
    best = min(results[step]["arena"] for step in STEPS[2:] if "arena" in results[step])
    items = "; ".join(f"{name} **{value:.2f}x** (target <= {target:.2f}x: "
                      f"{'met' if value <= target else 'missed'})"
                      for name, value, target in figures)
    return (f"**Summary** ({label}): {items}; `.pte` arena {pte['arena']:,} B where "
            f"ExecuTorch's smallest is {best:,} B ({pte['arena'] / best:.2f}x).\n\n")


def _report(results: dict[str, dict], layers: int, cache: int, small: bool) -> str:
    weights = next(r["weights"] for r in results.values() if "weights" in r)
    plan = results["compile"].get("arena")
    lowering = _lowering_seconds(results)
    rows = []
    for step in STEPS:
        r = results[step]
        if "failed" in r:
            rows.append([step, "failed: " + r["failed"], "", "", "", "", ""])
            continue
        rows.append([step, f"{r['seconds']:.1f}", common.ratio(r["seconds"], lowering),
                     f"{r['peak_growth'] / MIB:.0f}", common.ratio(r["peak_growth"], weights),
                     f"{r['arena']:,}", common.ratio(r["arena"], plan),
                     f"{r['difference']:.1e}" if "difference" in r else "(Python plan)"])
    header = ["step", "seconds", "/ fastest ExecuTorch lowering", "peak growth (MiB)",
              "/ weights", "arena (B)", "/ Python plan", "largest difference from eager"]
    shape = ("a fresh shape (hidden 128, 4 over 2 heads)" if small
             else "SmolLM2-135M's shape")
    label = f"{shape}, {layers} layers, a static KV cache of {cache} positions"
    return (_summary(results, label) + f"{label}, one decode step; weights "
            f"{weights / MIB:.0f} MiB; one thread, each step in a fresh process after the "
            "model is built.\n\n" + common.markdown(header, rows) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--layers", type=int, help="with --cache: measure this shape alone")
    parser.add_argument("--cache", type=int)
    parser.add_argument("--small", action="store_true",
                        help="with --layers: the smaller widths (see the docstring)")
    parser.add_argument("--step", choices=STEPS, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.step:
        print(json.dumps(_measure(options.step, options.layers, options.cache,
                                  options.small)))
        return
    if not common.executorch_installed():
        common.emit("executorch is not installed: nothing to compare with.\n", options.out)
        return
    shapes = SHAPES if options.layers is None else \
        ((options.small, options.layers, options.cache or 1024),)
    reports = []
    for small, layers, cache in shapes:
        results = {step: _child(step, layers, cache, small) for step in STEPS}
        reports.append(_report(results, layers, cache, small))
    common.emit("\n".join(reports), options.out)


if __name__ == "__main__":
    main()
