"""Fixtures for the model-code tests: fresh random seeds, printed so a failure can be replayed."""

from __future__ import annotations

import random

import pytest
import torch


@pytest.fixture
def rng() -> random.Random:
    seed = random.SystemRandom().randrange(2**32)
    print(f"random seed {seed}")
    return random.Random(seed)


@pytest.fixture
def torch_generator(rng: random.Random) -> torch.Generator:
    return torch.Generator().manual_seed(rng.randrange(2**32))
