"""Fused residual add + RMSNorm against the torch reference, with and without a residual."""

from __future__ import annotations

import pytest
import torch

from arbi_kernels import rms_norm
from tests.kernels.paged_batches import tolerance
from tests.kernels.reference import rms_norm_reference


def _random(size, dtype, device, generator) -> torch.Tensor:
    return torch.randn(size, generator=generator).to(device=device, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("hidden_size", [64, 576, 1000])
def test_fused_add_matches_reference(dtype, hidden_size, device, generator):
    num_tokens = int(torch.randint(1, 20, (1,), generator=generator))
    hidden = _random((num_tokens, hidden_size), dtype, device, generator)
    residual = _random((num_tokens, hidden_size), dtype, device, generator)
    weight = _random((hidden_size,), torch.float32, device, generator)
    normalized, new_residual = rms_norm(hidden, weight, 1e-5, residual)
    expected_normalized, expected_residual = rms_norm_reference(hidden, weight, 1e-5, residual)
    torch.testing.assert_close(new_residual, expected_residual, **tolerance(dtype))
    torch.testing.assert_close(normalized, expected_normalized, **tolerance(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_without_residual_returns_the_input_as_residual(dtype, device, generator):
    hidden = _random((5, 576), dtype, device, generator)
    weight = _random((576,), dtype, device, generator)
    normalized, new_residual = rms_norm(hidden, weight, 1e-6)
    assert new_residual is hidden
    torch.testing.assert_close(normalized, rms_norm_reference(hidden, weight, 1e-6)[0], **tolerance(dtype))


def test_strided_rows(device, generator):
    """Rows of a wider buffer (row stride > hidden_size) are read and written through their strides."""
    buffer = _random((6, 1200), torch.float16, device, generator)
    hidden, residual = buffer[:, :576], buffer[:, 600:1176]
    weight = _random((576,), torch.float32, device, generator)
    normalized, new_residual = rms_norm(hidden, weight, 1e-5, residual)
    expected_normalized, expected_residual = rms_norm_reference(hidden, weight, 1e-5, residual)
    torch.testing.assert_close(new_residual, expected_residual, **tolerance(torch.float16))
    torch.testing.assert_close(normalized, expected_normalized, **tolerance(torch.float16))


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"hidden": torch.zeros(2, 8, 4)}, ValueError, "hidden: expected shape"),
        ({"weight": torch.zeros(9)}, ValueError, "weight: expected shape"),
        ({"residual": torch.zeros(2, 8, dtype=torch.float16)}, ValueError, "residual: dtype must match hidden"),
        ({"residual": torch.zeros(3, 8)}, ValueError, "residual: expected shape"),
        ({"eps": 0.0}, ValueError, "eps: must be positive"),
        ({"hidden": torch.zeros(1, 70000), "weight": torch.zeros(70000)}, NotImplementedError, "70000"),
    ],
)
def test_rejects_bad_arguments(arguments, error, message):
    defaults = {"hidden": torch.zeros(2, 8), "weight": torch.ones(8), "eps": 1e-5, "residual": None}
    with pytest.raises(error, match=message):
        rms_norm(**(defaults | arguments))
