"""The rows of ``tensorplan bench``: targets planned (and run) with several planners, measured.

A target is a model (``zoo:NAME``, ``package.module:factory``, a ``.pt2`` or tensorplan file) or
a dynamic-storage-allocation instance (a ``.csv`` file, see ``tensorplan.formats.dsa``). A model is
captured once and planned with each algorithm; every plan is run on the example inputs and,
when the eager model is known, compared with it and timed next to it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from tensorplan.cli.targets import load_example, load_exported, target_name
from tensorplan.errors import InputError
from tensorplan.formats.dsa import load_instance
from tensorplan.frontend.capture import capture
from tensorplan.plan.planners import plan_buffers
from tensorplan.plan.planners.dispatch import PLANNERS
from tensorplan.program import Program, compile
from tensorplan.report.compare import Comparison, compare


@dataclass(frozen=True)
class BenchRow:
    """One target planned with one algorithm."""

    target: str  # short name of the target
    algorithm: str  # the algorithm asked for
    chosen: str  # the planner that made the plan ("greedy" when the search improved nothing)
    buffers: int  # storages (model) or buffers (instance) planned
    arena_bytes: int  # the arena (model) or peak (instance)
    lower_bound_bytes: int  # no plan of this schedule is smaller
    optimal: bool  # proven minimal
    plan_seconds: float  # planning time (a model's: propagate to verified plan, capture excluded)
    run_ms: float | None = None  # median Program.run latency; None for instances
    eager_ms: float | None = None  # median eager latency; None without the eager model
    matches: bool | None = None  # outputs equal eager's; None without the eager model

    @property
    def gap(self) -> float:
        """How far the arena is above the lower bound, as a fraction of the bound."""
        bound = self.lower_bound_bytes
        return 0.0 if bound == 0 else (self.arena_bytes - bound) / bound


def check_algorithms(algorithms: Sequence[str]) -> None:
    """Raise ``InputError`` naming the valid choices if an algorithm is unknown."""
    unknown = [name for name in algorithms if name not in PLANNERS]
    if unknown or not algorithms:
        raise InputError(
            f"bench: unknown algorithm(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(sorted(PLANNERS))}"
        )


def bench_target(
    target: str, algorithms: Sequence[str], runs: int, time_limit: float | None = None
) -> list[BenchRow]:
    """One row per algorithm for ``target``: a model or a ``.csv`` instance."""
    check_algorithms(algorithms)
    if target.endswith(".csv"):
        return [_bench_instance(target, name, time_limit) for name in algorithms]
    return _bench_model(target, algorithms, runs, time_limit)


def _bench_instance(path: str, algorithm: str, time_limit: float | None) -> BenchRow:
    instance = load_instance(path)
    buffers = instance.problem.buffers
    started = time.perf_counter()
    placement = plan_buffers(buffers, algorithm=algorithm, time_limit=time_limit)
    return BenchRow(
        target=target_name(path).removesuffix(".csv"),
        algorithm=algorithm,
        chosen=placement.algorithm,
        buffers=len(buffers),
        arena_bytes=placement.peak,
        lower_bound_bytes=placement.lower_bound,
        optimal=placement.optimal,
        plan_seconds=time.perf_counter() - started,
    )


def _bench_model(
    target: str, algorithms: Sequence[str], runs: int, time_limit: float | None
) -> list[BenchRow]:
    example = load_example(target)
    if example is None:
        program = load_exported(target, command="bench")
        if program.example_inputs is None:
            raise InputError(f"bench: {target} holds no example inputs to run it on")
        args, kwargs = program.example_inputs
    else:
        args, kwargs = example.args, example.kwargs
        program = capture(example.model, args, kwargs, dynamic_shapes=example.dynamic_shapes)
    eager = None if example is None else (lambda: example.model(*args, **kwargs))
    rows = []
    for algorithm in algorithms:
        started = time.perf_counter()
        compiled = compile(program, algorithm=algorithm, time_limit=time_limit)
        seconds = time.perf_counter() - started
        result = compare(lambda p=compiled: p.run(*args, **kwargs), eager, runs)
        rows.append(_model_row(target, algorithm, compiled, seconds, result))
    return rows


def _model_row(
    target: str, algorithm: str, program: Program, seconds: float, result: Comparison
) -> BenchRow:
    plan = program.plan
    return BenchRow(
        target=target_name(target),
        algorithm=algorithm,
        chosen=plan.algorithm,
        buffers=len(plan.storages),
        arena_bytes=plan.arena_bytes,
        lower_bound_bytes=plan.lower_bound_bytes,
        optimal=plan.optimal,
        plan_seconds=seconds,
        run_ms=result.run_ms,
        eager_ms=result.eager_ms,
        matches=result.matches,
    )
