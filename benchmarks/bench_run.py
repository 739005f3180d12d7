"""Latency and memory of ``Program.run`` vs eager PyTorch (and ExecuTorch), on the zoo's models.

Usage: ``python benchmarks/bench_run.py [--out FILE] [--models a,b | --full] [--runs N]``

For each model (default: ``common.REPRESENTATIVE``, every zoo model with ``--full``, then the
fresh configs of ``common.FRESH``, each summarised apart) the script compiles with
``tp.compile`` and reports a summary line per group and two tables:

- **latency**, per input size: eager (the module called directly, never
  ``ExportedProgram.module()``), ``Program.run`` with the bound-lowering off and on
  (``copy_outputs=True``, the default) and
  ``run(..., copy_outputs=False)``, and ExecuTorch's portable runtime when ``executorch`` is
  installed (``to_edge(torch.export.export(...)).to_executorch()``, its ``.buffer`` loaded with
  ``executorch.runtime.Runtime``). Each is the median of ``--runs`` timed calls after a warm-up,
  under ``torch.no_grad()`` with ``torch.set_num_threads(1)``; the methods are interleaved call
  by call, so load from other processes hits them alike. "Lowering off" is the program compiled
  with ``reuse=False, reorder=False, fold=False`` (the plan before the bound-lowering stage).
  Models with a dynamic sequence length are timed at its lower bound, the example length and
  its upper bound. A model whose ``run`` raises is named, with the reason, under the tables.
- **coverage and memory**, per model: the kernel nodes of the graph (ATen calls that compute a
  tensor, views excluded), the ops that ran functionally instead of through an out-variant
  (``Program.stats`` after all runs; target: none), whether ``run`` matches eager, and the peak
  RSS (``ru_maxrss``) of two fresh subprocesses on the example inputs: one that builds the eager
  model and runs it, one that only ``tp.load``-s the program saved by this process and runs it;
  plus each one's RSS growth across its timed runs (``/proc/self/statm``, after one warm-up).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import common
import torch
from common import (
    WARM_UP,
    emit,
    executorch_call,
    executorch_failure,
    executorch_installed,
    load_executorch,
    lower_to_executorch,
    medians,
    one_line,
    quiet,
    same_outputs,
)
from torch.export import Dim

import tensorplan as tp
from tensorplan.zoo import Example

DEFAULT_RUNS = 20      # timed calls of each method (interleaved: a median of 20 holds to a few %)
REASON_CHARS = 160     # longest failure reason printed in a table cell
TARGET = 1.2           # run / eager the summary holds the median to
SLOW_STEP = 1.5        # run / eager above this is named under the table, with its reason
# Why a model's step is slower than SLOW_STEP x eager, as measured with torch.profiler (one
# thread): the cause, and that the program compiled with the bound-lowering off is as slow.
SLOW_REASONS = {
    "hf_wav2vec2": (
        "its attention runs as core ATen decomposes `scaled_dot_product_attention` (`bmm`, "
        "`_softmax`, `eq` / `any` / `where`: about 29 of 45 ms in 5 calls) where eager runs the "
        "fused flash kernel (13 ms); the program with the lowering off is as slow"),
    "diffusers_unet": (
        "its attention runs as core ATen decomposes `scaled_dot_product_attention` (`bmm`, "
        "`_softmax` and a fix-up of fully masked rows, `eq` / `any` / `where` over the scores: "
        "about 105 ms of 166 ms in 5 calls) where eager runs the fused flash kernel (43 ms); "
        "the program with the lowering off is as slow"),
    "tiny_gpt": (
        "a 0.4 ms model of 186 steps: the runtime's Python per step (argument lists, out "
        "views, the step call: about 0.2 ms a run under cProfile) and 5 layer norms run "
        "functionally and copied (ATen's `native_layer_norm.out` is generated: it allocates) "
        "are as long as the kernels; models of 2 ms and more run at 0.8-1.1x"),
    "kv_cache": (
        "a 0.07 ms model: the runtime's fixed cost per run (binding the inputs, copying the "
        "outputs out of the arena) is as long as its kernels"),
}
CHILD_TIMEOUT = 900    # seconds a memory subprocess may take
# Starts its arguments as a grandchild of this process. Linux keeps a process's ru_maxrss across
# execve and a forked child starts with its parent's high-water mark, so a subprocess of this
# (large) process would report this process's peak; a grandchild forked from the small launcher
# reports its own.
LAUNCHER = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"


@dataclass(frozen=True)
class Latency:
    """Median milliseconds per call of each method on one model at one input size."""

    model: str                         # zoo name
    seq: int | None                    # sequence length, None for a static model
    eager: float                       # the eager module
    run_before: float                  # Program.run compiled with reuse, reorder, fold off
    run: float                         # Program.run, outputs copied
    run_no_copy: float                 # Program.run(copy_outputs=False)
    executorch: float | str | None     # ExecuTorch portable runtime, why it failed, or None


@dataclass(frozen=True)
class Memory:
    """What one memory subprocess measured."""

    peak_kb: int                       # ru_maxrss at the end of the process
    growth_kb: int                     # resident set after the timed runs minus before them


@dataclass(frozen=True)
class Coverage:
    """Per-model facts besides latency."""

    model: str                         # zoo name
    kernels: int                       # kernel nodes in all graphs of the program
    fallbacks: dict[str, int]          # op -> functional fallbacks run (Program.stats)
    allocations: dict[str, int]        # top-level op -> bytes it allocated in one run
    matches: bool                      # run's outputs equal eager's (assert_close defaults)
    arena_bytes: int                   # the plan's arena
    eager: Memory | str                # eager subprocess, or why it failed
    tensorplan: Memory | str           # tensorplan subprocess, or why it failed


# --- small helpers ---------------------------------------------------------------------------
def resident_bytes() -> int:
    """The current resident set size of this process, from ``/proc/self/statm``."""
    with open("/proc/self/statm", encoding="ascii") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


# --- inputs ----------------------------------------------------------------------------------
def _seq_dims(example: Example) -> list[tuple[int, int, Dim]]:
    """(argument index, dim, Dim) of the positional inputs' dims that share the first Dim.

    ``dynamic_shapes`` is a tuple aligned with the positional inputs (the zoo's convention).
    """
    found = [(i, d, dim) for i, spec in enumerate(example.dynamic_shapes or ())
             for d, dim in (spec or {}).items() if isinstance(dim, Dim)]
    return [item for item in found if item[2].__name__ == found[0][2].__name__]


def lengths(example: Example) -> list[int | None]:
    """Sequence lengths to time: lower bound, example and upper bound; ``[None]`` if static."""
    dims = _seq_dims(example)
    if not dims:
        return [None]
    index, dim, symbol = dims[0]
    return sorted({symbol.min, example.args[index].shape[dim], symbol.max})


def _resized(tensor: torch.Tensor, dim: int, length: int) -> torch.Tensor:
    """``tensor`` tiled along ``dim`` and cut to ``length`` (token ids stay valid ids)."""
    copies = -(-length // tensor.shape[dim])
    return torch.cat([tensor] * copies, dim=dim).narrow(dim, 0, length).contiguous()


def inputs_at(example: Example, length: int | None) -> tuple[Any, ...]:
    """The example's positional inputs with the sequence dims set to ``length``."""
    args = list(example.args)
    if length is not None:
        for index, dim, _ in _seq_dims(example):
            args[index] = _resized(args[index], dim, length)
    return tuple(args)


# --- graph facts -----------------------------------------------------------------------------
def _computes_tensor(op: torch._ops.OpOverload) -> bool:
    """True when the op returns a tensor that is not a view or alias of an input."""
    returns = op._schema.returns
    return any(isinstance(r.type, torch.TensorType) for r in returns) and \
        all(r.alias_info is None for r in returns)


def kernel_nodes(program: tp.Program) -> int:
    """ATen calls that compute a tensor, in the top-level graph and every subgraph."""
    return sum(1 for module in program.exported_program.graph_module.modules()
               if isinstance(module, torch.fx.GraphModule)
               for node in module.graph.nodes
               if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
               and _computes_tensor(node.target))


def allocations(program: tp.Program, args: tuple, kwargs: dict) -> dict[str, int]:
    """Bytes allocated outside the arena during one ``run(copy_outputs=False)``, by the
    top-level op whose call allocated them.

    This is a check on ``Program.stats`` from outside: every op that allocates here should be a
    counted fallback (an op with no native out-variant) or a data-dependent op.
    """
    program.run(*args, copy_outputs=False, **kwargs)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as profiler:
        program.run(*args, copy_outputs=False, **kwargs)
    allocated: dict[str, int] = {}
    for event in profiler.events():
        if event.cpu_memory_usage > 0:
            root = event
            while root.cpu_parent is not None:
                root = root.cpu_parent
            allocated[root.name] = allocated.get(root.name, 0) + event.cpu_memory_usage
    return allocated


def time_length(name: str, example: Example, programs: tuple[tp.Program, tp.Program],
                executorch_model: Any | str | None, length: int | None, runs: int) -> Latency:
    """Time eager, run before and after lowering the bound, run without copies and ExecuTorch
    on the inputs at ``length``; ``programs`` is (compiled with the lowering off, with it on)."""
    args, kwargs = inputs_at(example, length), example.kwargs
    before, program = programs
    methods: dict[str, Callable[[], Any]] = {
        "eager": lambda: example.model(*args, **kwargs),
        "run_before": lambda: before.run(*args, **kwargs),
        "run": lambda: program.run(*args, **kwargs),
        "run_no_copy": lambda: program.run(*args, copy_outputs=False, **kwargs),
    }
    executorch: float | str | None = executorch_model if isinstance(executorch_model, str) \
        else None
    if executorch_model is not None and executorch is None:
        call = executorch_call(executorch_model, args, kwargs)
        executorch = executorch_failure(call, REASON_CHARS)
        if executorch is None:
            methods["executorch"] = call
    result = medians(methods, runs)
    return Latency(name, length, result["eager"], result["run_before"], result["run"],
                   result["run_no_copy"], result.get("executorch", executorch))


# --- memory subprocesses ---------------------------------------------------------------------
def child_memory(mode: str, name: str, runs: int, program_path: str | None,
                 inputs_path: str | None) -> Memory:
    """In a fresh process: build the eager model or load the saved program, then run it.

    ``mode`` is ``eager`` or ``tensorplan``. One warm-up call, then ``runs`` timed ones.
    """
    torch.set_num_threads(1)
    if mode == "eager":
        example = common.example(name)
        call = _bound(example.model, example.args, example.kwargs)
    else:
        program = tp.load(program_path)
        saved = torch.load(inputs_path, weights_only=True)
        call = _bound(program.run, tuple(saved["args"]), saved["kwargs"])
    with torch.no_grad():
        call()
        before = resident_bytes()
        for _ in range(runs):
            call()
        after = resident_bytes()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return Memory(peak_kb, (after - before) // 1024)


def _bound(function: Callable[..., Any], args: tuple, kwargs: dict) -> Callable[[], Any]:
    """A call of ``function`` on fixed inputs."""
    return lambda: function(*args, **kwargs)


def spawn_memory(mode: str, name: str, runs: int, program_path: str,
                 inputs_path: str) -> Memory | str:
    """Run ``child_memory`` in a fresh interpreter (via ``LAUNCHER``); its ``Memory`` or why
    it failed."""
    command = [sys.executable, "-c", LAUNCHER, sys.executable, os.path.abspath(__file__),
               "--child", mode, "--models", name, "--runs", str(runs),
               "--program", program_path, "--inputs", inputs_path]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env,
                              timeout=CHILD_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return f"timed out after {CHILD_TIMEOUT} s"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = done.stderr.strip().splitlines()
        reason = f"exit {done.returncode}: {tail[-1] if tail else 'no output'}"
        return one_line(reason, REASON_CHARS)
    return Memory(**json.loads(lines[-1]))


# --- one model -------------------------------------------------------------------------------
def _executorch_or_reason(example: Example, with_executorch: bool) -> Any | str | None:
    if not with_executorch:
        return None
    try:
        return load_executorch(lower_to_executorch(example))
    except Exception as error:  # any lowering failure becomes the table cell
        return one_line(error, REASON_CHARS)


def measure(name: str, runs: int, with_executorch: bool,
            workdir: str) -> tuple[list[Latency], Coverage] | str:
    """Compile, check, time and measure the memory of zoo model ``name``; why it could not be
    measured when its run raises."""
    example = common.example(name)
    with quiet():
        before = tp.compile(example.model, example.args, example.kwargs,
                            dynamic_shapes=example.dynamic_shapes, reuse=False, reorder=False,
                            fold=False)
        program = tp.compile(example.model, example.args, example.kwargs,
                             dynamic_shapes=example.dynamic_shapes)
    with torch.no_grad():
        expected = example.model(*example.args, **example.kwargs)
        try:
            matches = same_outputs(expected, program.run(*example.args, **example.kwargs))
        except Exception as error:  # a failing run is reported under the tables
            return one_line(error, REASON_CHARS)
    executorch_model = _executorch_or_reason(example, with_executorch)
    latencies = [time_length(name, example, (before, program), executorch_model, length, runs)
                 for length in lengths(example)]
    program_path = os.path.join(workdir, f"{name}.tpp")
    inputs_path = os.path.join(workdir, f"{name}.inputs.pt")
    program.save(program_path)
    torch.save({"args": list(example.args), "kwargs": dict(example.kwargs)}, inputs_path)
    memories = [spawn_memory(mode, name, runs, program_path, inputs_path)
                for mode in ("eager", "tensorplan")]
    allocated = allocations(program, example.args, example.kwargs)
    coverage = Coverage(name, kernel_nodes(program), program.stats, allocated, matches,
                        program.plan.arena_bytes, *memories)
    return latencies, coverage


# --- tables ----------------------------------------------------------------------------------

def _ms(value: float) -> str:
    return f"{value:.3f}"


def _ratio(value: float | str | None, base: float) -> str:
    return f"{value / base:.2f}x" if isinstance(value, float) and base else "n/a"


def _executorch_cells(row: Latency) -> list[str]:
    if isinstance(row.executorch, float):
        return [_ms(row.executorch), _ratio(row.executorch, row.eager)]
    return [str(row.executorch), "n/a"]


def latency_table(rows: Sequence[Latency], runs: int, with_executorch: bool) -> str:
    """The latency rows as a markdown table with its header note."""
    header = ["model", "seq", "eager (ms)", "run, lowering off (ms)", "off / eager", "run (ms)",
              "run / eager", "run, no copy (ms)", "no copy / eager"]
    if with_executorch:
        header += ["ExecuTorch (ms)", "ExecuTorch / eager"]
    cells = []
    for row in rows:
        line = [row.model, "static" if row.seq is None else str(row.seq), _ms(row.eager),
                _ms(row.run_before), _ratio(row.run_before, row.eager),
                _ms(row.run), _ratio(row.run, row.eager), _ms(row.run_no_copy),
                _ratio(row.run_no_copy, row.eager)]
        cells.append(line + (_executorch_cells(row) if with_executorch else []))
    note = (f"Latency: median of {runs} timed calls after {WARM_UP} warm-up calls, "
            f"`torch.set_num_threads(1)`, under `torch.no_grad()`, methods interleaved call by "
            f"call; eager calls the module directly; \"lowering off\" is the program compiled "
            f"with `reuse=False, reorder=False, fold=False` (one buffer per value, the exported "
            f"order, no folded constants: the plan before issue 11). "
            f"Target: run / eager <= {TARGET}x.\n\n")
    return note + common.markdown(header, cells) + _slow_steps_note(rows)


def _slow_steps_note(rows: Sequence[Latency]) -> str:
    """A paragraph naming each step slower than ``SLOW_STEP`` x eager and why."""
    slow = [row for row in rows if row.run > SLOW_STEP * row.eager]
    if not slow:
        return f"\nNo step is slower than {SLOW_STEP}x eager.\n"
    items = "; ".join(
        f"`{row.model}`{'' if row.seq is None else f' at {row.seq}'} "
        f"({row.run / row.eager:.2f}x): {SLOW_REASONS.get(row.model, 'reason not known')}"
        for row in slow)
    return f"\nSteps slower than {SLOW_STEP}x eager: {items}.\n"


def _fallback_cell(fallbacks: dict[str, int]) -> str:
    if not fallbacks:
        return "0"
    ops = ", ".join(f"{op} ({count})" for op, count in sorted(fallbacks.items()))
    return f"{len(fallbacks)}: {ops}"


def _allocation_cell(allocated: dict[str, int]) -> str:
    """Total KB, then the ops that allocated at least 1 KB, largest first."""
    if not allocated:
        return "0"
    ranked = sorted(allocated.items(), key=lambda item: -item[1])
    ops = [f"{op.removeprefix('aten::')} {size / 1024:.0f}" for op, size in ranked
           if size >= 1024]
    smaller = len(ranked) - len(ops)
    ops += [f"{smaller} more < 1"] if smaller else []
    return f"{sum(allocated.values()) / 1024:.0f} ({', '.join(ops)})"


def _memory_cells(memory: Memory | str) -> tuple[str, str]:
    if isinstance(memory, str):
        return memory, "n/a"
    return f"{memory.peak_kb / 1024:.1f}", str(memory.growth_kb)


def _peak_ratio(row: Coverage) -> str:
    if isinstance(row.eager, Memory) and isinstance(row.tensorplan, Memory):
        return f"{row.tensorplan.peak_kb / row.eager.peak_kb:.2f}x"
    return "n/a"


def coverage_table(rows: Sequence[Coverage], runs: int) -> str:
    """The per-model rows as a markdown table with its header note."""
    header = ["model", "kernel nodes", "fallback ops", "allocated outside the arena (KB/run)",
              "run == eager", "arena (KB)",
              "eager peak RSS (MB)", "tensorplan peak RSS (MB)", "tensorplan / eager",
              "eager RSS growth (KB)", "tensorplan RSS growth (KB)"]
    cells = []
    for row in rows:
        eager_peak, eager_growth = _memory_cells(row.eager)
        tp_peak, tp_growth = _memory_cells(row.tensorplan)
        cells.append([row.model, str(row.kernels), _fallback_cell(row.fallbacks),
                      _allocation_cell(row.allocations), "yes" if row.matches else "NO",
                      f"{row.arena_bytes / 1024:.1f}",
                      eager_peak, tp_peak, _peak_ratio(row), eager_growth, tp_growth])
    note = ("Coverage: kernel nodes are ATen calls that compute a tensor (views excluded); "
            "fallback ops ran functionally and were copied into the arena (`Program.stats` "
            "after all timed runs; target: 0); allocated outside the arena is what one "
            "`run(copy_outputs=False)` on the example inputs allocated, per top-level op "
            "(`torch.profiler` memory events), a check on `stats` from outside: the ops that "
            "allocate should be the counted fallbacks. "
            "Memory: fresh subprocesses on the example inputs, `torch.set_num_threads(1)`, "
            f"one warm-up call then {runs} calls; peak RSS "
            "is `ru_maxrss` at the end (it includes the interpreter and `import torch`; the "
            "eager process also imports `transformers` for `hf_*` models, the tensorplan one "
            "only `tp.load`-s the saved program); RSS growth is the resident set after the "
            "calls minus before them.\n\n")
    return note + common.markdown(header, cells)


def _failures_note(failures: dict[str, str]) -> str:
    """A paragraph naming the models whose run raised, and why; empty when none did."""
    if not failures:
        return ""
    items = "; ".join(f"`{name}`: {reason}" for name, reason in failures.items())
    return f"\nNot measured (`Program.run` raised on the example inputs): {items}\n"


def summary(latencies: Sequence[Latency], coverages: Sequence[Coverage]) -> str:
    """``group_summary`` of the zoo's rows, then of the fresh configs' (when any ran)."""
    labels = {"zoo": "zoo", "fresh": "fresh-config"}
    timed = common.by_group(latencies, lambda row: row.model)
    return "".join(group_summary(timed.get(key, []), group, labels[key]) for key, group in
                   common.by_group(coverages, lambda row: row.model).items())


def group_summary(latencies: Sequence[Latency], coverages: Sequence[Coverage],
                  label: str) -> str:
    """Over the ``label`` models: run / eager (median and max over every timed size),
    ExecuTorch / eager where it ran, the models not equal to eager, and the fallback ops."""
    ratios = {(row.model, row.seq): row.run / row.eager for row in latencies if row.eager}
    worst = max(ratios, key=ratios.__getitem__)
    executorch = [row.executorch / row.eager for row in latencies
                  if isinstance(row.executorch, float) and row.eager]
    differ = sorted(row.model for row in coverages if not row.matches)
    fallbacks = sorted({op for row in coverages for op in row.fallbacks})
    median = statistics.median(ratios.values())
    at = "" if worst[1] is None else f" at {worst[1]}"
    return (f"**Summary** over {len(coverages)} {label} models ({len(ratios)} sizes): "
            f"`Program.run` / eager median **{median:.2f}x** (target <= {TARGET:.1f}x: "
            f"{'met' if median <= TARGET else 'missed'}), max {ratios[worst]:.2f}x "
            f"({worst[0]}{at}); ExecuTorch's runtime / eager median "
            f"{statistics.median(executorch):.2f}x over the {len(executorch)} sizes it ran "
            f"at; not equal to eager: {', '.join(differ) or 'none'}; ops run functionally: "
            f"{', '.join(fallbacks) or 'none'}.\n\n" if executorch else
            f"**Summary** over {len(coverages)} {label} models: `Program.run` / eager median "
            f"**{median:.2f}x**, max {ratios[worst]:.2f}x ({worst[0]}{at}); not equal to "
            f"eager: {', '.join(differ) or 'none'}.\n\n")


# --- entry points ----------------------------------------------------------------------------
def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown tables to this file")
    common.add_model_arguments(parser)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS,
                        help=f"timed calls per method (default {DEFAULT_RUNS})")
    parser.add_argument("--child", choices=("eager", "tensorplan"), help=argparse.SUPPRESS)
    parser.add_argument("--program", help=argparse.SUPPRESS)
    parser.add_argument("--inputs", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _child(options: argparse.Namespace) -> int:
    """Measure one memory subprocess and print its ``Memory`` as one JSON line."""
    with quiet():
        memory = child_memory(options.child, options.models, options.runs, options.program,
                              options.inputs)
    print(json.dumps({"peak_kb": memory.peak_kb, "growth_kb": memory.growth_kb}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the chosen models, print both tables, write them to ``--out``; 0 on success."""
    options = _arguments(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)
    if options.child:
        return _child(options)
    torch.set_num_threads(1)
    names = common.chosen_models(options)
    with_executorch = executorch_installed()
    latencies: list[Latency] = []
    coverages: list[Coverage] = []
    failures: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench_run_") as workdir:
        for name in names:
            measured = measure(name, options.runs, with_executorch, workdir)
            if isinstance(measured, str):
                failures[name] = measured
                continue
            latencies += measured[0]
            coverages.append(measured[1])
    text = (common.selection_note(names) + summary(latencies, coverages)
            + latency_table(latencies, options.runs, with_executorch) + "\n"
            + coverage_table(coverages, options.runs) + _failures_note(failures))
    emit(text, options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
