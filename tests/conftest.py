"""Shared helpers for the stage tests."""

from __future__ import annotations

import warnings

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
