"""An LLM export chunked: its prefill and its decode step, timed chunked against unchunked.

Usage: ``python benchmarks/bench_decode.py [--out FILE] [--models a,b] [--runs N]``

The recipes' exports (``bench_chunks``' builders: ExecuTorch's Llama with its KV cache and a
plain token ``Dim``, transformers' static-cache decoder; fresh configs beside them: another
Llama shape, and the static-cache recipe over GPT-NeoX, a family the zoo lacks) are one
program for both phases of generation: a prompt of any length (prefill) and one token at a
time (decode). ``chunks="auto"`` runs each layer as a loop over chunks of ``ceil(S / n)`` rows
(``rewrite/loop.py``), so a decode step is one chunk of one row. For each model: eager
PyTorch, ``tp.compile`` without and with ``chunks="auto"`` run by ``Program.run``, and both
shipped through ``to_executorch`` and run in ExecuTorch's runtime, on one thread; the prefill
of a prompt at the bound, then one decode step at position ``context / 2``, each the median of
``--runs`` interleaved rounds after an untimed call. Equal: after a prefill of the same
prompt, each program's decode step equals eager's.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import bench_chunks
import common
import torch
from torch.utils import _pytree as pytree

import tensorplan as tp
from tensorplan.zoo import Example

CASES: dict[str, Callable[[], Example]] = {
    **{name: bench_chunks.MODELS[name] for name in (
        "recipe_executorch_llama_1024", "recipe_static_cache_llama_1024",
        "fresh_recipe_executorch_llama_768")},
    "fresh_recipe_static_cache_gpt_neox_768": lambda: bench_chunks.static_cache_gpt_neox(768),
}
DEFAULT_RUNS = 9  # interleaved rounds: 5 left a prefill 0.13x off between two runs
TARGET_PTE = 1.15     # issue 47 item 5: chunked .pte / unchunked .pte
TARGET_PYTHON = 1.3   # chunked Program.run / unchunked


def _at(example: Example, tokens: torch.Tensor, position: int) -> tuple[Any, ...]:
    """``example``'s inputs for ``tokens`` written from cache position ``position``: the
    second input is ``{"input_pos": [position]}`` (ExecuTorch's Llama) or the positions
    themselves (transformers' cache positions)."""
    second = example.args[1]
    if isinstance(second, dict):
        return tokens, {"input_pos": torch.tensor([position])}
    return tokens, torch.arange(position, position + tokens.shape[1])


@dataclass(frozen=True)
class Measured:
    """One model: median ms per phase and program, and whether each decode equals eager's."""

    prefill: dict[str, float]
    decode: dict[str, float]
    equal: dict[str, bool]
    arena: dict[str, int]


def measure(build: Callable[[], Example], runs: int) -> Measured:
    """Compile, ship, check and time one model (see the module docstring)."""
    from tensorplan.integrations.executorch import to_executorch

    torch.manual_seed(0)
    example = build()
    with common.quiet():
        off = tp.compile(example.model, example.args, dynamic_shapes=example.dynamic_shapes)
        on = tp.compile(example.model, example.args, dynamic_shapes=example.dynamic_shapes,
                        chunks="auto")
        shipped = {"pte off": to_executorch(off), "pte on": to_executorch(on)}
    loaded = {name: common.load_executorch(manager) for name, manager in shipped.items()}
    methods = {name: program.load_method("forward") for name, program in loaded.items()}
    runners = {"eager": example.model, "python off": off.run, "python on": on.run,
               **{name: (lambda m: lambda *a: m.execute(pytree.tree_leaves(a)))(method)
                  for name, method in methods.items()}}
    tokens = example.args[0]
    middle = tokens.shape[1] // 2
    prompt, step = _at(example, tokens[:, :middle], 0), _at(example, tokens[:, :1], middle)
    equal = {}
    with torch.no_grad():
        for name, run in runners.items():  # each keeps its own cache
            run(*prompt)
            equal[name] = common.copied(run(*step))
        expected = equal.pop("eager")
        equal = {name: common.same_outputs(_first(expected), _first(got))
                 for name, got in equal.items()}
        whole = _at(example, tokens, 0)
        prefill = common.interleaved({name: (lambda r: lambda: r(*whole))(run)
                                for name, run in runners.items()}, runs)
        decode = common.interleaved({name: (lambda r: lambda: r(*step))(run)
                               for name, run in runners.items()}, runs)
    arena = {"python off": off.plan.arena_bytes, "python on": on.plan.arena_bytes,
             **{name: common.executorch_arena_bytes(m) for name, m in shipped.items()}}
    return Measured(prefill, decode, equal, arena)


def _first(outputs: Any) -> torch.Tensor:
    return pytree.tree_leaves(outputs)[0]


def _ratios(results: dict[str, Measured], runtime: str) -> list[float]:
    """Chunked over unchunked in ``runtime`` ("python" or "pte"), per model and phase."""
    return [times[f"{runtime} on"] / times[f"{runtime} off"] for found in results.values()
            for times in (found.prefill, found.decode)]


def _ratio_clause(results: dict[str, Measured], label: str) -> str:
    python, pte = _ratios(results, "python"), _ratios(results, "pte")
    return (f"over the {len(results)} {label}' prefill at the bound and decode step: in the "
            f"Python runtime median {statistics.median(python):.2f}x, max {max(python):.2f}x "
            f"(target <= {TARGET_PYTHON}x); the `.pte` in ExecuTorch's runtime median "
            f"{statistics.median(pte):.2f}x, max {max(pte):.2f}x (target <= {TARGET_PTE}x)")


def report(results: dict[str, Measured], runs: int) -> str:
    """A row per model and phase, and the ratios the issue's targets read, for the zoo's
    shapes and for the fresh configs."""
    rows = []
    for model, found in results.items():
        for phase, times in (("prefill", found.prefill), ("decode", found.decode)):
            python = times["python on"] / times["python off"]
            pte = times["pte on"] / times["pte off"]
            rows.append([model, phase, f"{times['eager']:.1f}",
                         f"{times['python off']:.1f} → {times['python on']:.1f}",
                         f"{python:.2f}x",
                         f"{times['pte off']:.1f} → {times['pte on']:.1f}", f"{pte:.2f}x"])
        equal = all(found.equal.values())
        rows[-1].append("yes" if equal else
                        "NO: " + ", ".join(n for n, ok in found.equal.items() if not ok))
        rows[-2].append(f"{found.arena['pte off']:,} → {found.arena['pte on']:,} B")
    labels = {"zoo": "zoo shapes", "fresh": "fresh configs"}
    groups = common.by_group(results, str)
    clauses = "; ".join(_ratio_clause({name: results[name] for name in names}, labels[key])
                        for key, names in groups.items())
    return (f"**Summary**: chunked / unchunked, {clauses}.\n\n"
            f"Median ms of {runs} interleaved rounds, one thread; off → on is `chunks=None` → "
            f"`chunks=\"auto\"`. The last column: the `.pte` arenas (prefill row) and whether "
            f"every program's decode step after the same prefill equals eager's (decode row)."
            f"\n\n"
            + common.markdown(["model", "phase", "eager ms", "Program.run ms", "on / off",
                               "`.pte` ms", "on / off", "arena / equal"], rows))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown report to this file")
    parser.add_argument("--models", help=f"comma-separated names (default: {','.join(CASES)})")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    options = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    results = {}
    builders = {**bench_chunks.MODELS, **CASES}  # --models may name any of bench_chunks'
    for name in options.models.split(",") if options.models else CASES:
        results[name] = measure(builders[name], options.runs)
        print(f"{name}: done", file=sys.stderr, flush=True)
    common.emit(report(results, options.runs), options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
