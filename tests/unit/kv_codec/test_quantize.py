"""Grouped asymmetric quantization: the min/max start keeps every error within half a step, the least-squares
refit never raises a group's squared error and lowers it on average; fp16 metadata, edge groups."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.kv_codec import SUPPORTED_BITS, dequantize_groups, quantize, quantize_groups


@pytest.fixture
def min_max_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The encoder's first stage alone (no least-squares refit)."""
    monkeypatch.setattr(quantize, "REFIT_ROUNDS", 0)


def _group_squared_error(x: torch.Tensor, bits: int, group_size: int) -> torch.Tensor:
    error = (dequantize_groups(quantize_groups(x, bits, group_size)) - x.float()).pow(2)
    return error.reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size).sum(dim=-1)


def _spread_rows(generator: torch.Generator) -> torch.Tensor:
    magnitude = torch.exp(torch.randn(6, 3, 1, generator=generator) * 2)  # per-row scales over e^+-4
    offset = torch.randn(6, 3, 1, generator=generator) * 5
    x = torch.randn(6, 3, 64, generator=generator) * magnitude + offset
    x[0, 0, 5] = 40.0 * magnitude[0, 0, 0]  # an outlier channel
    return x


def _max_error_in_steps(x: torch.Tensor, bits: int, group_size: int) -> torch.Tensor:
    quantized = quantize_groups(x, bits, group_size)
    error = (dequantize_groups(quantized) - x.float()).abs()
    grouped = error.reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size).amax(dim=-1)
    return grouped / quantized.scale.float()


@pytest.mark.parametrize("bits", SUPPORTED_BITS)
@pytest.mark.parametrize("group_size", [8, 32, 64])
def test_min_max_start_errs_at_most_half_a_step(
    bits: int, group_size: int, generator: torch.Generator, min_max_only: None
) -> None:
    assert float(_max_error_in_steps(_spread_rows(generator), bits, group_size).max()) <= 0.5 + 1e-3


@pytest.mark.parametrize("bits", SUPPORTED_BITS)
@pytest.mark.parametrize("group_size", [8, 32, 64])
def test_refit_never_raises_a_group_error(
    bits: int, group_size: int, generator: torch.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = _spread_rows(generator)
    refit = _group_squared_error(x, bits, group_size)
    monkeypatch.setattr(quantize, "REFIT_ROUNDS", 0)
    start = _group_squared_error(x, bits, group_size)
    assert bool((refit <= start).all())


@pytest.mark.parametrize("bits, most", [(2, 0.75), (3, 0.9), (4, 0.95)])
def test_refit_lowers_the_mean_error_of_gaussian_groups(
    bits: int, most: float, generator: torch.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = torch.randn(400, 64, generator=generator)
    refit = _group_squared_error(x, bits, 32).mean()
    monkeypatch.setattr(quantize, "REFIT_ROUNDS", 0)
    assert float(refit / _group_squared_error(x, bits, 32).mean()) < most


def test_refit_keeps_codes_in_range_and_metadata_fp16_rounded(generator: torch.Generator) -> None:
    x = torch.randn(50, 64, generator=generator) * 4
    quantized = quantize_groups(x, 3, 32)
    assert float(quantized.scale.float().min()) >= quantize.SMALLEST_STEP
    decoded = dequantize_groups(quantized).reshape(50, 2, 32)
    top = quantized.zero.float() + 7 * quantized.scale.float()
    assert bool((decoded >= quantized.zero.float().unsqueeze(-1)).all())
    assert bool((decoded <= top.unsqueeze(-1) + 1e-6).all())


def test_metadata_is_fp16_and_shapes_follow_groups(generator: torch.Generator) -> None:
    x = torch.randn(4, 2, 64, generator=generator)
    quantized = quantize_groups(x, 3, 16)
    assert quantized.codes.shape == (4, 2, 24) and quantized.codes.dtype == torch.uint8
    assert quantized.scale.shape == quantized.zero.shape == (4, 2, 4)
    assert quantized.scale.dtype == quantized.zero.dtype == torch.float16
    assert quantized.head_dim == 64


def test_constant_group_decodes_exactly(generator: torch.Generator) -> None:
    value = float(torch.randn(1, generator=generator))
    x = torch.full((3, 32), value)
    decoded = dequantize_groups(quantize_groups(x, 2, 32))
    assert torch.allclose(decoded, torch.tensor(value, dtype=torch.float16).float().expand_as(x), atol=1e-3)


def test_group_far_from_zero_keeps_half_step_bound(generator: torch.Generator, min_max_only: None) -> None:
    x = 100.0 + torch.rand(4, 64, generator=generator) * 0.1  # range comparable to the fp16 spacing at 100 (1/16)
    assert float(_max_error_in_steps(x, 4, 32).max()) <= 0.5 + 5e-3  # slack: fp32 resolution at 100


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_min_max_start_represents_the_extremes_of_each_group(
    bits: int, generator: torch.Generator, min_max_only: None
) -> None:
    x = torch.randn(5, 64, generator=generator)
    decoded = dequantize_groups(quantize_groups(x, bits, 32)).reshape(5, 2, 32)
    grouped = x.reshape(5, 2, 32)
    step = quantize_groups(x, bits, 32).scale.float()
    assert bool(((decoded.amin(-1) - grouped.amin(-1)).abs() <= step / 2 + 1e-6).all())
    assert bool(((decoded.amax(-1) - grouped.amax(-1)).abs() <= step / 2 + 1e-6).all())
