"""Runs the Triton kernels at small shapes: on CPU through Triton's interpreter, compiled where CUDA exists.

Without CUDA, tests/conftest.py switches Triton to its interpreter before arbi_kernels is first imported.
"""

from __future__ import annotations

import os
import secrets

import pytest
import torch



@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture
def generator() -> torch.Generator:
    """A CPU generator with a fresh seed per test; the seed is printed so a failure can be replayed."""
    seed = secrets.randbits(62)
    print(f"generator seed: {seed}")
    return torch.Generator().manual_seed(seed)


@pytest.fixture
def interpreting() -> bool:
    """True when kernels run in Triton's interpreter (no bfloat16 tl.dot there: triton-lang/triton#11584)."""
    return os.environ.get("TRITON_INTERPRET") == "1"
