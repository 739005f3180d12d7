"""Shared helpers for the stage tests."""

from __future__ import annotations

import warnings

import pytest
import torch

warnings.filterwarnings("ignore", category=UserWarning)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
