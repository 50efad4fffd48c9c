"""Fixtures for the TKV codec tests: a freshly seeded torch generator per test (the seed is printed, so a
failing run can be replayed)."""

from __future__ import annotations

import random

import pytest
import torch


@pytest.fixture
def generator() -> torch.Generator:
    seed = random.randrange(2**31)
    print(f"torch generator seed: {seed}")
    return torch.Generator().manual_seed(seed)
