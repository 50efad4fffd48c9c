"""Per-row int8 weights (`--cpu-weights int8`) on fresh random inputs: the quantizer against a float64 torch
reference (codes, error bound, bfloat16 scales held exactly), fusion by rows, and torch's CPU int8 kernel against
the float32 product with the dequantized weight."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.models.int8_weights import CODE_LIMIT, Int8Linear, Int8Weight

# bfloat16 rounds the activations and the outputs, each by at most 2^-8 relative (the scales are exact).
_BFLOAT16_BOUND = 1.01 * 2.0**-7  # the two roundings compound by a factor (1 + 2^-8)


def random_weight(rows: int, columns: int, generator: torch.Generator) -> torch.Tensor:
    """Rows of different magnitudes, so that their scales differ."""
    return torch.randn(rows, columns, generator=generator) * torch.rand(rows, 1, generator=generator).mul(0.1).add(1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantize_matches_the_float64_reference(dtype: torch.dtype, torch_generator) -> None:
    weight = random_weight(48, 96, torch_generator).to(dtype)

    quantized = Int8Weight.quantize(weight)

    values = weight.double()
    peak = values.abs().amax(dim=1)
    assert quantized.scale.dtype == torch.bfloat16 and quantized.codes.dtype == torch.int8
    scale = quantized.scale.double()
    assert bool(((scale - peak / CODE_LIMIT).abs() <= 2.0**-8 * peak / CODE_LIMIT).all())  # bfloat16 rounding
    reference = torch.round(values / scale[:, None]).clamp(-CODE_LIMIT, CODE_LIMIT)
    assert int((quantized.codes.double() - reference).abs().max()) <= 1  # float32 division at exact half-ties
    assert bool((quantized.codes.abs().amax(dim=1) == CODE_LIMIT).all())  # every row spans the range
    error = (quantized.dequantize().double() - values).abs()
    assert bool((error <= scale[:, None] * (0.5 + 1e-6)).all()), error.max()
    assert torch.equal(quantized.dequantize(), quantized.codes.float() * quantized.scale.float()[:, None])
    assert quantized.nbytes == 48 * 96 + 48 * 2


def test_zero_rows_and_bad_shapes(torch_generator) -> None:
    weight = random_weight(4, 32, torch_generator)
    weight[2] = 0
    quantized = Int8Weight.quantize(weight)
    assert float(quantized.scale[2]) == 1.0 and not quantized.codes[2].any()
    with pytest.raises(ValueError, match=r"float \[N, K\] matrix, got torch.float32\[32\]"):
        Int8Weight.quantize(weight[0])
    with pytest.raises(ValueError, match=r"got torch.int8\[4, 32\]"):
        Int8Weight.quantize(quantized.codes)


def test_fused_rows_equal_the_quantized_stack(torch_generator) -> None:
    first, second = random_weight(24, 64, torch_generator), random_weight(40, 64, torch_generator)
    fused = Int8Weight.concatenate([Int8Weight.quantize(first), Int8Weight.quantize(second)])
    stacked = Int8Weight.quantize(torch.cat((first, second)))
    assert torch.equal(fused.codes, stacked.codes) and torch.equal(fused.scale, stacked.scale)


@pytest.mark.parametrize("num_tokens", [1, 7])
@pytest.mark.parametrize("with_bias", [False, True])
def test_kernel_matches_the_dequantized_product(num_tokens: int, with_bias: bool, torch_generator) -> None:
    weight = Int8Weight.quantize(random_weight(80, 96, torch_generator))
    bias = torch.randn(80, generator=torch_generator) if with_bias else None
    states = torch.randn(num_tokens, 96, generator=torch_generator)
    dense = weight.dequantize()

    actual = Int8Linear(weight, bias)(states)

    expected = states @ dense.T + (0 if bias is None else bias)
    bound = _BFLOAT16_BOUND * (states.abs() @ dense.abs().T + (0 if bias is None else bias.abs()))
    assert actual.dtype == torch.float32 and actual.shape == (num_tokens, 80)
    assert bool(((actual - expected).abs() <= bound).all()), (actual - expected).abs().max()
