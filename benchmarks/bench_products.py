"""ExecuTorch's matrix-product kernels measured in its runtime: which ones are slow.

Usage: ``python benchmarks/bench_products.py [--out FILE] [--runs N] [--no-models]``

For each shape ``M x K x N`` of ``SHAPES`` and each product kernel of ExecuTorch's runtime
(``addmm.out``, ``mm.out``, ``linear.out``, ``bmm.out``, and ``convolution.out`` as a 1x1
convolution over M pixels of K channels, where M > 1), the script lowers a one-product program
with ExecuTorch's own ``to_edge(...).to_executorch()`` (``linear`` made by ``rewrite.py``'s first
rule, which to_edge would otherwise decompose), checks that the emitted program runs that
kernel, loads it in the runtime, and times ``method.execute`` on one thread (median of
``--runs`` interleaved calls), beside eager PyTorch's product. A kernel is slow at a shape when
it runs below ``SLOW_FRACTION`` of the fastest kernel's rate there. The summary says whether
the kernels measured slow are exactly ``kernels.slow_products()``, the table the ``.pte``
rewrite (``integrations/executorch/rewrite.py``) moves products off.

Then real-size transformers (two layers, ``bench_chunks``' builders; fresh configs beside the
zoo's shapes, GPT-NeoX among them, a family the zoo lacks): eager PyTorch, ExecuTorch's own
``.pte`` (its default lowering), tensorplan's ``.pte`` of the program as exported and of the
program with ``chunks="auto"``, each run in ExecuTorch's runtime on one thread (one untimed
call, then the median of ``--model-runs`` rounds of one call each, interleaved), its outputs
compared with eager.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import common
import torch
from torch.utils import _pytree as pytree

from tensorplan.integrations.executorch.kernels import installed_version, slow_products

SHAPES = ((128, 768, 3072), (512, 768, 768), (1, 768, 768), (64, 256, 1024))
DEFAULT_RUNS = 5      # timed calls of each product program
GPT2_SMALL = "gpt2_small_1024"  # the model the run-time target names
MODEL_RUNS = 2        # timed rounds of each model program (ExecuTorch's GPT-2: a minute a call)
SLOW_FRACTION = 0.25  # a kernel below this fraction of the fastest one's rate is slow


class _Call(torch.nn.Module):
    def __init__(self, function: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.function = function

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.function(*args)


def _cases(m: int, k: int, n: int) -> dict[str, tuple[Callable[..., Any], tuple]]:
    """Kernel name -> (the product, its inputs) for one shape."""
    x, w, b = torch.randn(m, k), torch.randn(k, n), torch.randn(n)
    cases = {"aten::addmm.out": (torch.addmm, (b, x, w)),
             "aten::mm.out": (torch.mm, (x, w)),
             "aten::linear.out": (torch.nn.functional.linear, (x, w.t().contiguous(), b)),
             "aten::bmm.out": (torch.bmm, (x[None], w[None]))}
    if m > 1:  # ExecuTorch 1.5.1's convolution.out refuses a 1x1 map (error 0x12 at execute)
        # the same product as a 1x1 convolution: the M rows are M pixels of K channels
        cases["aten::convolution.out"] = (torch.nn.functional.conv2d,
                                          (x.t().contiguous()[None, :, :, None],
                                           w.t().contiguous()[:, :, None, None]))
    return cases


def _lowered(function: Callable[..., Any], args: tuple) -> Any:
    from executorch.exir import to_edge

    from tensorplan.integrations.executorch.rewrite import fast_products

    with torch.no_grad():
        edge = to_edge(torch.export.export(_Call(function), args))
        fast_products(edge.exported_program(), slow=frozenset())  # linear kept as linear
        return edge.to_executorch()


def _kernels(lowered: Any) -> list[str]:
    plan = lowered.executorch_program.execution_plan[0]
    return [f"{o.name}.{o.overload}" for o in plan.operators]


def measure(shape: tuple[int, int, int], runs: int) -> dict[str, float]:
    """Kernel name (and ``"eager"``) -> median ms of one product of ``shape``."""
    calls, programs = {}, []
    for kernel, (function, args) in _cases(*shape).items():
        lowered = _lowered(function, args)
        if _kernels(lowered) != [kernel]:
            raise RuntimeError(f"the program for {kernel} runs {_kernels(lowered)}")
        program = common.load_executorch(lowered)
        programs.append(program)  # held: its methods run from its bytes
        calls[kernel] = common.executorch_call(program, args, {})
        calls["eager " + kernel] = lambda function=function, args=args: function(*args)
    times = common.medians(calls, runs)
    eager = min(t for name, t in times.items() if name.startswith("eager "))
    return {**{k: t for k, t in times.items() if not k.startswith("eager ")}, "eager": eager}


def _rate(shape: tuple[int, int, int], ms: float) -> float:
    m, k, n = shape
    return 2 * m * k * n / (ms * 1e-3) / 1e9


def report(results: dict[tuple[int, int, int], dict[str, float]]) -> str:
    """The summary line and one row per (shape, kernel)."""
    rows, slow = [], set()
    for shape, times in results.items():
        fastest = min(t for k, t in times.items() if k != "eager")
        for kernel, ms in times.items():
            is_slow = kernel != "eager" and ms * SLOW_FRACTION > fastest
            if is_slow:
                slow.add(kernel)
            rows.append(["x".join(map(str, shape)), kernel, f"{ms:.2f}",
                         f"{_rate(shape, ms):.1f}", common.ratio(ms, times["eager"]),
                         "slow" if is_slow else ""])
    table = frozenset(slow_products())
    agrees = "yes" if table == frozenset(slow) else \
        f"no: measured {sorted(slow)}, the table says {sorted(table)}"
    return (f"**Summary**: product kernels measured slow (below {SLOW_FRACTION:.2f}x the "
            f"fastest kernel's rate at some shape) in ExecuTorch {installed_version()}'s "
            f"runtime: {', '.join(sorted(slow)) or 'none'}; `kernels.slow_products()` names "
            f"exactly these: {agrees}.\n\n"
            "One product per program, lowered by ExecuTorch's own `to_edge(...).to_executorch()`, "
            "run in its runtime on one thread (median ms of interleaved calls); eager: the "
            "fastest of torch's own calls of the same products. Rate: 2 M K N over the time.\n\n"
            + common.markdown(["M x K x N", "kernel", "ms", "GFLOP/s", "/ eager", ""], rows))


def _models() -> dict[str, Callable[[], Any]]:
    """Row name -> the model's builder (``bench_chunks``')."""
    import bench_chunks

    return {GPT2_SMALL: lambda: bench_chunks.gpt2(768, 12, 1024),
            "fresh_gpt2_16h_1024w_768": lambda: bench_chunks.gpt2(1024, 16, 768),
            "bert_base_512": lambda: bench_chunks.bert(2, 768, 12, 512),
            "fresh_bert_512w_384": lambda: bench_chunks.bert(2, 512, 8, 384),
            "fresh_gpt_neox_640": lambda: bench_chunks.gpt_neox(640)}


def measure_model(build: Callable[[], Any], runs: int) -> dict[str, tuple[float, bool, int]]:
    """Program name -> (median ms, equal to eager, instructions; 0 for eager)."""
    import tensorplan as tp
    from tensorplan.integrations.executorch import to_executorch

    torch.manual_seed(0)
    example = build()
    with common.quiet(), torch.no_grad():
        exported = torch.export.export(example.model, example.args, strict=False)
        programs = {"ExecuTorch's .pte": common.lower_to_executorch(example),
                    "tensorplan's .pte": to_executorch(exported),
                    "tensorplan's .pte, chunks auto": to_executorch(
                        tp.compile(example.model, example.args, chunks="auto"))}
    loaded = {name: common.load_executorch(lowered)  # held while their methods run
              for name, lowered in programs.items()}
    calls = {"eager": lambda: example.model(*example.args),
             **{name: common.executorch_call(program, example.args, {})
                for name, program in loaded.items()}}
    with torch.no_grad():
        first = {name: common.copied(call()) for name, call in calls.items()}
        times = common.interleaved(calls, runs)
    expected = pytree.tree_leaves(first["eager"])
    found = {"eager": (times["eager"], True, 0)}
    for name, lowered in programs.items():
        instructions = sum(len(chain.instructions) for chain in
                           lowered.executorch_program.execution_plan[0].chains)
        found[name] = (times[name], common.same_outputs(expected, list(first[name])),
                       instructions)
    return found


def model_report(results: dict[str, dict[str, tuple[float, bool, int]]]) -> str:
    """One row per model: each program's time, its ratio to eager and to ExecuTorch's; the
    chunked-over-unchunked ratio for the zoo's shapes and for the fresh configs."""
    rows, chunked, gpt2 = [], {}, None
    for model, found in results.items():
        theirs, plain = found["ExecuTorch's .pte"][0], found["tensorplan's .pte"][0]
        for name, (ms, equal, instructions) in found.items():
            rows.append([model, name, f"{ms:.0f}", common.ratio(ms, found["eager"][0]),
                         common.ratio(ms, theirs), common.ratio(ms, plain),
                         str(instructions or "-"), "yes" if equal else "NO"])
        chunked[model] = found["tensorplan's .pte, chunks auto"][0] / plain
        if model == GPT2_SMALL:
            gpt2 = plain / found["eager"][0]
    gpt2_cell = f"{gpt2:.1f}x eager" if gpt2 is not None else "not measured"
    labels = {"zoo": "the zoo's shapes", "fresh": "the fresh configs"}
    maxima = ", ".join(f"{labels[key]} max {max(chunked[name] for name in names):.2f}x"
                       for key, names in common.by_group(chunked, str).items())
    return (f"**Summary**: tensorplan's `.pte` of GPT-2 small at 1024 tokens runs at "
            f"{gpt2_cell} (target <= 5x); a chunked `.pte` / the unchunked one: "
            f"{maxima} (target <= 1.35x).\n\n"
            + common.markdown(["model", "program", "ms", "/ eager", "/ ExecuTorch's .pte",
                               "/ tensorplan's unchunked", "instructions", "equal to eager"],
                              rows))


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown table to this file")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS,
                        help=f"timed calls of each product (default {DEFAULT_RUNS})")
    parser.add_argument("--model-runs", type=int, default=MODEL_RUNS,
                        help=f"timed calls of each model program (default {MODEL_RUNS})")
    parser.add_argument("--no-models", action="store_true",
                        help="measure the product kernels only")
    parser.add_argument("--models", help="comma-separated words: only the model rows whose "
                                         "name holds one of them")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every kernel at every shape, print the table, write it to ``--out``."""
    options = _arguments(argv)
    if not common.executorch_installed():
        common.emit("executorch is not installed: no kernel to measure.\n", options.out)
        return 0
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = {shape: measure(shape, options.runs) for shape in SHAPES}
    text = report(results)
    if not options.no_models:
        models = {}
        words = options.models.split(",") if options.models else [""]
        for name, build in _models().items():
            if not any(word in name for word in words):
                continue
            models[name] = measure_model(build, options.model_runs)
            print(f"{name}: done", file=sys.stderr, flush=True)
        text += "\n" + model_report(models)
    common.emit(text, options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
