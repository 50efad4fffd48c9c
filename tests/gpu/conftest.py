"""Runs the Triton kernels compiled, at real serving shapes; every test here is skipped without CUDA."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import torch

CUDA_AVAILABLE = torch.cuda.is_available()

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skipif(not CUDA_AVAILABLE, reason="needs a CUDA GPU (real-shape Triton kernel tests)")
    for item in items:
        if _HERE in Path(item.path).resolve().parents:
            item.add_marker(skip)


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda")


@pytest.fixture
def generator() -> torch.Generator:
    """A CUDA generator with a fresh seed per test; the seed is printed so a failure can be replayed."""
    seed = secrets.randbits(62)
    print(f"generator seed: {seed}")
    return torch.Generator(device="cuda").manual_seed(seed)
