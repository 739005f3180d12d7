"""ExecuTorch's arena for a zoo model, the reference the zoo tests compare against.

Lowering costs 5–14 s per model here, so each (model, configuration) is lowered once per test
process. The lowering itself is the benchmarks' (``benchmarks/common.py``), so the tests and
``make bench`` measure ExecuTorch the same way.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import common  # noqa: E402  (benchmarks/common.py)

from tensorplan import zoo  # noqa: E402


@functools.cache
def executorch_arena(name: str, config: str = "const-prop") -> int:
    """Bytes of the arena ExecuTorch plans for zoo model ``name`` with the named configuration
    of ``common.EXECUTORCH_CONFIGS`` (default: constant propagation on, its best on nearly
    every model of the bench)."""
    return common.executorch_arena_bytes(common.lower_to_executorch(zoo.example(name), config))
