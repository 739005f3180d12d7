"""Running a program next to eager PyTorch: agreement and latency, for ``tensorplan run``."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree


@dataclass(frozen=True)
class Comparison:
    """How a program's run compares with eager PyTorch on the same inputs."""

    outputs: tuple[str, ...]         # "dtype[shape]" of each output tensor
    max_abs_error: float | None      # largest |tensorplan - eager| (None without eager)
    matches: bool | None             # torch.testing.assert_close at default tolerances
    run_ms: float                    # median latency of Program.run
    eager_ms: float | None           # median latency of the eager module under no_grad


def median_ms(call: Callable[[], Any], runs: int) -> float:
    """Median wall time of ``call`` in milliseconds over ``runs`` calls, after one warm-up."""
    call()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return 1e3 * statistics.median(times)


def agreement(got: Any, expected: Any) -> tuple[float, bool]:
    """The largest absolute difference over the tensors of two output structures, and whether
    they agree at ``torch.testing.assert_close``'s default tolerances. Values are compared
    detached: eager outputs computed with autograd on compare as they are, without a warning."""
    got, expected = _detached(got), _detached(expected)
    pairs = list(zip(pytree.tree_leaves(got), pytree.tree_leaves(expected), strict=True))
    error = max((float((g.double() - e.double()).abs().max()) for g, e in pairs
                 if isinstance(g, torch.Tensor) and g.numel()), default=0.0)
    try:
        torch.testing.assert_close(got, expected)
    except AssertionError:
        return error, False
    return error, True


def _detached(outputs: Any) -> Any:
    """``outputs`` with each tensor detached from autograd."""
    return pytree.tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, outputs)


def compare(run: Callable[[], Any], eager: Callable[[], Any] | None, runs: int) -> Comparison:
    """Run ``run`` (and ``eager`` if given) once to compare, then time both."""
    got = run()
    shapes = tuple(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
                   for t in pytree.tree_leaves(got) if isinstance(t, torch.Tensor))
    if eager is None:
        return Comparison(shapes, None, None, median_ms(run, runs), None)
    with torch.no_grad():
        error, matches = agreement(got, eager())
        eager_ms = median_ms(eager, runs)
    return Comparison(shapes, error, matches, median_ms(run, runs), eager_ms)
