"""Helpers the benchmark scripts share: ExecuTorch lowering, timing, quiet output, table cells,
files."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch.utils import _pytree as pytree

from tensorplan.zoo import Example

WARM_UP = 5  # untimed calls of each method before timing
FRESH_PREFIX = "fresh_"  # the configs the zoo does not hold, built here


def _torchvision_cnn(name: str, side: int) -> Example:
    """torchvision's ``name`` (random weights, 10 classes) on a ``side`` x ``side`` image."""
    from tensorplan.frontend.torchvision_import import import_torchvision

    model = getattr(import_torchvision().models, name)(weights=None, num_classes=10)
    return Example(model.eval(), (torch.randn(1, 3, side, side),))


def _transformer(builder: str, *args: int) -> Callable[[], Example]:
    """``bench_chunks``' builder ``builder`` with ``args`` (imported when built: it imports
    this module)."""
    def build() -> Example:
        import bench_chunks

        return getattr(bench_chunks, builder)(*args)
    return build


# Configs the zoo does not hold, seeded and built by the benches that plan whole models: the
# zoo's transformer families at other widths, depths and lengths, and CNN families it lacks
# (MobileNetV3, EfficientNet, MnasNet) at resolutions it does not use.
FRESH_CNNS: dict[str, Callable[[], Example]] = {
    "fresh_mobilenet_v3_small_192": lambda: _torchvision_cnn("mobilenet_v3_small", 192),
    "fresh_efficientnet_b0_160": lambda: _torchvision_cnn("efficientnet_b0", 160),
    "fresh_mnasnet0_5_176": lambda: _torchvision_cnn("mnasnet0_5", 176),
}
FRESH: dict[str, Callable[[], Example]] = {
    "fresh_bert_3x256_128": _transformer("bert", 3, 256, 8, 128),
    "fresh_gpt2_384_6h_192": _transformer("gpt2", 384, 6, 192),
    **FRESH_CNNS,
}


def example(name: str) -> Example:
    """Zoo model ``name``, or ``FRESH``'s, built with seed 0."""
    from tensorplan import zoo

    torch.manual_seed(0)
    return FRESH[name]() if name in FRESH else zoo.example(name)


# The zoo models a bench that sweeps the zoo measures by default: each family of the zoo (small
# synthetic models, CNNs, vision transformers, encoders, decoder LLMs with and without a cache, a
# mixture of experts, a diffusion transformer), so one run of every section fits in an hour.
# ``--full`` measures every zoo model.
REPRESENTATIVE = (
    "convnet", "mlp", "kv_cache", "tiny_gpt",
    "hf_mobilenet_v2", "hf_resnet", "hf_convnext", "timm_mixnet_s",
    "hf_vit", "hf_swin", "hf_mobilevit",
    "hf_bert", "hf_bert_dynamic", "hf_t5", "hf_wav2vec2",
    "hf_gpt2", "hf_llama", "hf_gemma2", "hf_phi3", "hf_qwen3_prefill", "hf_llama_static_cache",
    "hf_olmoe", "hf_whisper_decoder",
    "diffusers_sd3",
)


def model_names(full: bool = False) -> list[str]:
    """``REPRESENTATIVE`` (every zoo model when ``full``), then every fresh config."""
    from tensorplan import zoo

    return [*(zoo.names() if full else REPRESENTATIVE), *FRESH]


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--models a,b`` and ``--full``, the model choice of the benches that sweep the zoo."""
    parser.add_argument("--models", help="comma-separated zoo or common.FRESH names (default: "
                                          "common.REPRESENTATIVE, then common.FRESH)")
    parser.add_argument("--full", action="store_true",
                        help="every zoo model instead of common.REPRESENTATIVE")


def chosen_models(options: argparse.Namespace) -> list[str]:
    """The models ``add_model_arguments``' options name."""
    return options.models.split(",") if options.models else model_names(options.full)


Item = TypeVar("Item")


def by_group(items: Iterable[Item], name_of: Callable[[Item], str]) -> dict[str, list[Item]]:
    """``items`` split by their model's name: ``"zoo"``, then ``"fresh"`` (the names starting
    with ``FRESH_PREFIX``), each in the items' order; a group with no item is left out."""
    groups: dict[str, list[Item]] = {"zoo": [], "fresh": []}
    for item in items:
        groups["fresh" if name_of(item).startswith(FRESH_PREFIX) else "zoo"].append(item)
    return {label: group for label, group in groups.items() if group}


def selection_note(names: Sequence[str]) -> str:
    """A line saying which models ``names`` holds: how many of the zoo's, how many fresh."""
    from tensorplan import zoo

    fresh = sum(name in FRESH for name in names)
    chosen = len(names) - fresh
    whole = len(zoo.names())
    which = ("every zoo model" if chosen == whole else
             f"{chosen} of the zoo's {whole} models (`common.REPRESENTATIVE`: each family; "
             f"`--full` measures every one)" if set(names) >= set(REPRESENTATIVE) else
             f"{chosen} of the zoo's {whole} models, named by `--models`")
    return f"Models: {which}, and {fresh} fresh configs (`common.FRESH`).\n\n"


def executorch_installed() -> bool:
    """True when the ``executorch`` package can be imported."""
    return importlib.util.find_spec("executorch") is not None


def one_line(error: BaseException | str, limit: int) -> str:
    """A failure as one line of at most ``limit`` characters that is safe in a markdown cell."""
    if isinstance(error, BaseException):
        lines = str(error).strip().splitlines()
        error = f"{type(error).__name__}: {lines[0] if lines else ''}"
    text = error.replace("|", "/")
    return text if len(text) <= limit else text[:limit - 3] + "..."


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the warnings and prints of export and lowering."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _pointwise_edge_ops(edge_program: Any) -> frozenset[Any]:
    """The edge ops of the program whose ATen op is tagged pointwise and returns one tensor."""
    found = set()
    for node in edge_program.graph.nodes:
        op = getattr(node.target, "_op", None)
        if node.op == "call_function" and isinstance(op, torch._ops.OpOverload) \
                and torch.Tag.pointwise in op.tags and len(op._schema.returns) == 1:
            found.add(node.target)
    return frozenset(found)


def _backend_config(name: str, edge_program: Any) -> Any:
    """ExecuTorch's ``ExecutorchBackendConfig`` called ``name`` in ``EXECUTORCH_CONFIGS``."""
    from executorch.exir import ExecutorchBackendConfig

    if name == "greedy":
        return ExecutorchBackendConfig()
    if name == "const-prop":
        return ExecutorchBackendConfig(do_quant_fusion_and_const_prop=True)
    if name == "const-prop + re-inplace":
        return ExecutorchBackendConfig(do_quant_fusion_and_const_prop=True,
                                       run_reinplace_pass=True)
    return ExecutorchBackendConfig(do_quant_fusion_and_const_prop=True, run_reinplace_pass=True,
                                   reinplace_extra_ops=_pointwise_edge_ops(edge_program))


# ExecuTorch configurations measured, by name (all plan with its greedy memory planner, inputs
# and outputs in the arena, alignment 16): its default; constant propagation (and quantisation
# fusion) on; that plus its re-inplace pass (by default it covers ``index_put`` alone); and the
# re-inplace pass extended to every pointwise op of the graph.
EXECUTORCH_CONFIGS = ("greedy", "const-prop", "const-prop + re-inplace",
                      "const-prop + re-inplace pointwise")


def lower_to_executorch(example: Example, config: str = "greedy") -> Any:
    """The example exported and lowered by ExecuTorch with the named ``EXECUTORCH_CONFIGS``
    entry (default: its default config, greedy plan).

    Lowering runs under ``torch.no_grad()``: ExecuTorch's passes execute in-place ops on the
    module's parameters, which autograd rejects for leaves that require grad.
    """
    from executorch.exir import to_edge

    try:
        exported = torch.export.export(example.model, example.args, example.kwargs,
                                       dynamic_shapes=example.dynamic_shapes, strict=False)
    except Exception:  # as tensorplan's capture: a recipe exported strict (a KV-cache LLM)
        exported = torch.export.export(example.model, example.args, example.kwargs,
                                       dynamic_shapes=example.dynamic_shapes, strict=True)
    with torch.no_grad(), quiet():
        edge = to_edge(exported)
        return edge.to_executorch(_backend_config(config, edge.exported_program()))


def executorch_arena_bytes(lowered: Any) -> int:
    """Bytes of a lowered program's planned arena: the sum of its planned buffers
    (``execution_plan[0].non_const_buffer_sizes[1:]``; id 0 is the constant buffer)."""
    return sum(lowered.executorch_program.execution_plan[0].non_const_buffer_sizes[1:])


def executorch_constant_bytes(lowered: Any) -> int:
    """Bytes of a lowered program's constant tensors (its constant buffer, padding included)."""
    program = lowered.executorch_program
    return sum(len(buffer.storage) for buffer in program.constant_buffer)


def load_executorch(lowered: Any) -> Any:
    """A lowered program loaded by ExecuTorch's runtime (its ``Program``).

    The ``Program`` owns the bytes its methods run from, so it must stay referenced while they
    do.
    """
    from executorch.runtime import Runtime

    return Runtime.get().load_program(lowered.buffer)


def executorch_call(program: Any, args: tuple, kwargs: dict) -> Callable[[], Any]:
    """A call of the loaded ExecuTorch program's ``forward`` on the flattened user inputs.

    Loading the method can fail (a kernel the runtime does not have); that raises here. The
    caller keeps ``program`` referenced while the call is used.
    """
    method, flat = program.load_method("forward"), pytree.tree_leaves((args, kwargs))
    return lambda: method.execute(flat)


@contextlib.contextmanager
def native_stderr(lines: list[str]) -> Iterator[None]:
    """Capture what native code writes to file descriptor 2 into ``lines``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines += capture.read().decode(errors="replace").splitlines()


def executorch_failure(call: Callable[[], Any], limit: int) -> str | None:
    """None when ``call`` (loading or running an ExecuTorch method) succeeds, else why it
    failed, in at most ``limit`` characters.

    The runtime raises only an error code; the reason is the last and the first line of its
    native log that say what failed or is missing (the failing kernel, then the check it failed;
    ``[file:line]`` prefixes dropped), or the exception itself.
    """
    log: list[str] = []
    try:
        with native_stderr(log):
            call()
    except Exception as error:  # a runtime failure becomes the cell, not a crash
        failed = [line.split("] ", 1)[-1] for line in log
                  if "failed" in line.lower() or "missing" in line.lower()]
        return one_line(" / ".join(dict.fromkeys(failed[-1:] + failed[:1])) or error, limit)
    return None


def same_outputs(expected: Any, actual: Any) -> bool:
    """True when the two output structures hold equal tensors (``assert_close`` defaults)."""
    try:
        torch.testing.assert_close(actual, expected)
    except (AssertionError, TypeError, ValueError):
        return False
    return True


def medians(methods: dict[str, Callable[[], Any]], runs: int) -> dict[str, float]:
    """Median milliseconds per call of each method, interleaved call by call after
    ``WARM_UP`` untimed calls of each."""
    times: dict[str, list[float]] = {name: [] for name in methods}
    with torch.no_grad():
        for call in methods.values():
            for _ in range(WARM_UP):
                call()
        for _ in range(runs):
            for name, call in methods.items():
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1e3 for name, values in times.items()}


def copied(outputs: Any) -> Any:
    """Outputs copied out (a loaded method's outputs live in its memory)."""
    return pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, outputs)


def interleaved(calls: dict[str, Callable[[], Any]], runs: int) -> dict[str, float]:
    """Median ms of each call over ``runs`` rounds, one call of each per round (so a load on
    the machine weighs on all alike), after the untimed first calls the caller made."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(runs):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def ratio(numerator: float | None, denominator: float | None) -> str:
    """``numerator / denominator`` as ``0.67x``, or ``n/a`` when either is missing or 0."""
    return f"{numerator / denominator:.2f}x" if numerator is not None and denominator else "n/a"


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table of the header and the rows of cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def emit(text: str, out: str | None) -> None:
    """Print a result table, and write it to ``out`` when given."""
    print(text, end="")
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(text)


@dataclass(frozen=True)
class ExecuTorchResult:
    """One ExecuTorch program (a configuration, or tensorplan's) on one model."""

    config: str                  # name in EXECUTORCH_CONFIGS, or "tensorplan"
    arena: int | None            # planned arena bytes, None when it did not lower
    constants: int | None        # constant buffer bytes, None when it did not lower
    failed: str | None           # the step that failed: "lower", "load" (a kernel the runtime
    #                              lacks), "run" or "differs" (from eager); None when none did;
    #                              "skipped": not run, a smaller one is the best (``best_only``)
    reason: str | None           # why that step failed
    gap: str = ""                # tensorplan's: what keeps its arena above the Python plan's
    #                              (``gap.describe``; "" when nothing does)


def check_executorch(config: str, lowered: Any, example: Example, expected: Any,
                     limit: int) -> ExecuTorchResult:
    """Load a lowered program in ExecuTorch's runtime, run it on the example once and compare
    its outputs with eager's ``expected``; failure reasons in at most ``limit`` characters."""
    arena, constants = executorch_arena_bytes(lowered), executorch_constant_bytes(lowered)
    program = load_executorch(lowered)
    calls: list[Any] = []
    outputs: list[Any] = []
    reason = executorch_failure(
        lambda: calls.append(executorch_call(program, example.args, example.kwargs)), limit)
    if reason is not None:
        return ExecuTorchResult(config, arena, constants, "load", reason)
    reason = executorch_failure(lambda: outputs.extend(calls[0]()), limit)
    if reason is not None:
        return ExecuTorchResult(config, arena, constants, "run", reason)
    if not same_outputs(pytree.tree_leaves(expected), outputs):
        return ExecuTorchResult(config, arena, constants, "differs", "outputs differ from eager")
    return ExecuTorchResult(config, arena, constants, None, None)


def executorch_results(example: Example, expected: Any, configs: Sequence[str],
                       limit: int, best_only: bool = False) -> tuple[ExecuTorchResult, ...]:
    """The example lowered with each of ExecuTorch's ``configs`` and checked against eager's
    ``expected`` (a lowering failure becomes the result, its reason in ``limit`` characters).

    ``best_only``: the programs are checked smallest arena first, and once one would be
    ``best_result``'s the larger ones are not run (``failed`` "skipped"): ``best_result`` is the
    same, without running ExecuTorch's slow programs for nothing."""
    results, lowered = {}, {}
    for config in configs if executorch_installed() else ():
        try:
            lowered[config] = lower_to_executorch(example, config)
        except Exception as error:  # a lowering failure becomes the cell
            results[config] = ExecuTorchResult(config, None, None, "lower", one_line(error, limit))
            continue
        if not best_only:
            results[config] = check_executorch(config, lowered.pop(config), example, expected,
                                               limit)
    found = None
    for config in sorted(lowered, key=lambda c: executorch_arena_bytes(lowered[c])):
        if found is not None:
            results[config] = ExecuTorchResult(
                config, executorch_arena_bytes(lowered[config]),
                executorch_constant_bytes(lowered[config]), "skipped",
                f"not run: {found}, with a smaller arena, is the best")
            continue
        results[config] = check_executorch(config, lowered[config], example, expected, limit)
        if results[config].failed in (None, "run"):
            found = config
    return tuple(results[config] for config in configs if config in results)


def shipped_result(program: Any, example: Example, expected: Any,
                   limit: int) -> ExecuTorchResult:
    """A ``tp.Program`` lowered by ``to_executorch`` and run in ExecuTorch's runtime, with what
    keeps its arena above the program's plan (``gap.pte_gap``)."""
    from tensorplan.integrations.executorch import lower
    from tensorplan.integrations.executorch.gap import describe, pte_gap

    try:
        with quiet():
            shipped = lower(program)
    except Exception as error:  # a lowering failure becomes the cell
        return ExecuTorchResult("tensorplan", None, None, "lower", one_line(error, limit))
    result = check_executorch("tensorplan", shipped.manager, example, expected, limit)
    return dataclasses.replace(result, gap=describe(pte_gap(program, shipped)))


def best_result(results: Sequence[ExecuTorchResult]) -> ExecuTorchResult | None:
    """The ExecuTorch configuration with the smallest arena (the earlier one on a tie) among
    those whose program loads (the runtime has every kernel) and, when it runs, equals eager.

    A kernel that fails at run time on every configuration (the portable batch norm on
    channels_last input) says nothing about the plan, so it does not rule a configuration out.
    """
    valid = [result for result in results if result.failed in (None, "run")]
    return min(valid, key=lambda result: result.arena or 0) if valid else None


UNBOUNDED_BANK_BYTES = 1 << 40  # the size given to an unbounded bank: ExecuTorch's need one


def lower_banked_greedy(exported: Any, banks: Sequence[Any], rewritten: bool = False) -> Any:
    """``exported`` lowered by ExecuTorch with its ``banked_greedy`` planner over ``banks``
    (``tp.Bank``, fastest first; bank ``k`` is ``mem_id`` ``k + 1``); raises ExecuTorch's
    ``BankPlacementError`` when it finds no placement. ``rewritten``: the edge program first
    gets tensorplan's rewrites (matrix products on fast kernels, copies that
    change nothing and expands read by broadcasting kernels dropped), so that only the
    planning differs from tensorplan's ``.pte``."""
    from executorch.exir import ExecutorchBackendConfig, to_edge
    from executorch.exir.banked_memory_planning import Bank as ExecuTorchBank
    from executorch.exir.banked_memory_planning import (
        TargetMemoryMap,
        banked_memory_planning_pass,
    )

    from tensorplan.integrations.executorch.broadcasts import broadcast_copies_removed
    from tensorplan.integrations.executorch.identities import identity_copies_removed
    from tensorplan.integrations.executorch.rewrite import fast_products

    target = TargetMemoryMap([ExecuTorchBank(bank.name, UNBOUNDED_BANK_BYTES
                                             if bank.capacity is None else bank.capacity, k + 1)
                              for k, bank in enumerate(banks)])
    with torch.no_grad():
        edge = to_edge(exported)
        if rewritten:
            for method in edge.methods:
                fast_products(edge.exported_program(method))
                identity_copies_removed(edge.exported_program(method))
                broadcast_copies_removed(edge.exported_program(method))
        return edge.to_executorch(ExecutorchBackendConfig(
            memory_planning_pass=banked_memory_planning_pass(target)))


@dataclass(frozen=True)
class BankedResult:
    """One lowered program's banks, measured one way for every planner."""

    arenas: tuple[int, ...]   # bytes of each bank's arena (mem_id 1, 2, ...)
    traffic: tuple[int, ...]  # bytes moved per run in each bank (``mem_id_traffic``)
    cost: float               # sum of traffic x bank cost

    @property
    def fast_share(self) -> float:
        """The share of the traffic served outside the slowest bank."""
        total = sum(self.traffic)
        return sum(self.traffic[:-1]) / total if total else 0.0


def banked_result(manager: Any, banks: Sequence[Any]) -> BankedResult:
    """The arenas and traffic of a lowered program's ``forward``, per bank."""
    from tensorplan.integrations.executorch.banks import mem_id_traffic

    sizes = list(manager.executorch_program.execution_plan[0].non_const_buffer_sizes)
    moved = mem_id_traffic(manager.exported_program().graph_module)
    arenas = tuple(sizes[k + 1] if k + 1 < len(sizes) else 0 for k in range(len(banks)))
    traffic = tuple(moved.get(k + 1, 0) for k in range(len(banks)))
    return BankedResult(arenas, traffic, sum(t * b.cost for t, b in zip(traffic, banks,
                                                                        strict=True)))
