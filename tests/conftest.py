"""Shared test setup: one CPU thread (the test machine is shared) and a fixed seed per test."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed_torch() -> None:
    """Every test starts from the same torch RNG state, so failures reproduce."""
    torch.manual_seed(0)
