"""Shared helpers for the stage tests."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

warnings.filterwarnings("ignore", category=UserWarning)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """Torch on one thread for the test (bitwise comparisons), restored after it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _group(nodeid: str, models: frozenset[str]) -> str:
    """The unit ``make test``'s scheduler sends to one worker: the zoo model a test is
    parametrized by (a part of its id between ``[`` and ``]``, split at ``-``), else its file."""
    params = nodeid.partition("[")[2].rpartition("]")[0]
    model = next((part for part in params.split("-") if part in models), None)
    return model or nodeid.split("::")[0]


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``-n 2 --dist loadscope`` (``make test``), each worker gets whole groups
    (``_group``): the tests of one zoo model run in one process, whatever their file, so the
    per-process caches (``zoo_programs.compiled``, ``executorch_reference.executorch_arena``)
    capture and lower each model once; the other tests run with their file, so a
    module-scoped fixture is made once. (xdist's own ``loadgroup`` marks do not group under
    pytest 9, whose node ids no longer take xdist's suffix.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    from tensorplan import zoo

    models = frozenset(zoo.names())

    class ByModelOrFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid, models)

    return ByModelOrFile(config, log)
