"""`Int8DotLinear`, the integer product of block-quantized weights with int8 activations, on fresh random inputs:
its activation quantization equal to a torch reference exactly; its outputs equal to the same integer arithmetic
(exact int64 dots, float64 sums) within float32 accumulation rounding and to the dequantized float product within
the stated error bound; the vectorised and plain C++ paths equal bit for bit; a row's output independent of its
batch (SmolLM2's K = 576 and 1536, 1 to 64 rows, Q4_1 and Q8_0)."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.models.block_linear import BlockLinear
from arbi_grpc.models.block_linear_int8_dot import Int8DotLinear, quantize_activations
from arbi_grpc.models.quantized_weights import GROUP_SIZE, QuantizedWeight
from tests.unit.models.test_block_linear import random_quantized

ROWS = 45  # blocks of 8 weight rows, the last of 5, and thread shares of 2 blocks
TOKENS = [1, 2, 3, 5, 16, 17, 64]


def reference_activations(states: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q_x, d_x, s_x) in torch float32 operations, each block's codes in the `kind` weight's order."""
    blocks = states.view(states.shape[0], -1, GROUP_SIZE)
    scale = blocks.abs().amax(-1) / 127
    inverse = torch.where(scale != 0, 1 / scale, torch.zeros_like(scale))
    codes = torch.round(blocks * inverse[..., None])  # half to even
    sums = scale * codes.sum(-1)
    if kind == "q4":
        codes = torch.cat((codes[..., 0::2], codes[..., 1::2]), dim=-1)
    return codes.to(torch.int8).view(states.shape), scale, sums


def natural_order(codes: torch.Tensor, kind: str) -> torch.Tensor:
    """Activation codes [T, K] back in column order."""
    if kind == "q8":
        return codes
    blocks = codes.view(codes.shape[0], -1, 2, GROUP_SIZE // 2)  # [T, G, even | odd, 16]
    return blocks.transpose(-1, -2).reshape(codes.shape)


def integer_reference(states: torch.Tensor, weight: QuantizedWeight) -> tuple[torch.Tensor, torch.Tensor]:
    """(y float64, the float32 rounding bound of each output): int64 block dots scaled and summed in float64."""
    codes, scale, sums = reference_activations(states, weight.kind)
    rows, groups = weight.scale.shape
    q_x = natural_order(codes, weight.kind).long().view(-1, 1, groups, GROUP_SIZE)  # [T, 1, G, 32]
    q_w = weight.integer_codes().long().view(1, rows, groups, GROUP_SIZE)  # [1, N, G, 32]
    dots, magnitudes = (q_x * q_w).sum(-1).double(), (q_x * q_w).abs().sum(-1).double()  # [T, N, G]
    scales = weight.scale.double()[None] * scale.double()[:, None]  # d_w d_x, [T, N, G]
    terms, sizes = scales * dots, scales.abs() * magnitudes
    if weight.minimum is not None:
        minimum_terms = weight.minimum.double()[None] * sums.double()[:, None]
        terms, sizes = terms + minimum_terms, sizes + minimum_terms.abs()
    return terms.sum(-1), (2 * groups + 2) * 2.0**-24 * sizes.sum(-1)  # d_w d_x and 2 fma a block rounded


def product(linear: Int8DotLinear, states: torch.Tensor, vectorised: bool) -> torch.Tensor:
    return linear.product(states, vectorised)


@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("vectorised", [True, False])
@pytest.mark.parametrize("columns", [576, 1536])
def test_activations_are_quantized_as_the_reference(kind: str, vectorised: bool, columns: int,
                                                    torch_generator) -> None:
    states = torch.randn(9, columns, generator=torch_generator) * torch.rand(9, 1, generator=torch_generator) * 4
    states[1, 32:64] = 0.0  # a block of zeros: scale 0, codes 0
    states[2, :32] = 0.0
    states[2, :5] = torch.tensor([127.0, 2.5, -3.5, 0.5, -126.5])  # scale 1: halves round to even

    actual = quantize_activations(states, kind, vectorised)

    expected = reference_activations(states, kind)
    for got, want in zip(actual, expected, strict=True):
        assert torch.equal(got, want)
    assert natural_order(actual[0], kind)[2, :5].tolist() == [127, 2, -4, 0, -126]
    assert actual[1][1, 1] == 0 and not natural_order(actual[0], kind)[1, 32:64].any()


@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("vectorised", [True, False])
@pytest.mark.parametrize("columns", [576, 1536])
@pytest.mark.parametrize("num_tokens", TOKENS)
def test_product_is_the_integer_arithmetic(kind: str, vectorised: bool, columns: int, num_tokens: int,
                                           torch_generator) -> None:
    weight = random_quantized(kind, ROWS, columns, torch_generator)
    states = torch.randn(num_tokens, columns, generator=torch_generator)

    actual = product(Int8DotLinear(BlockLinear(weight, None)), states, vectorised)

    assert actual.dtype == torch.float32 and actual.shape == (num_tokens, ROWS)
    expected, bound = integer_reference(states, weight)
    assert bool(((actual.double() - expected).abs() <= bound).all())


@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("columns", [576, 1536])
@pytest.mark.parametrize("num_tokens", TOKENS)
def test_vectorised_and_plain_paths_agree_exactly(kind: str, columns: int, num_tokens: int, torch_generator) -> None:
    linear = Int8DotLinear(BlockLinear(random_quantized(kind, ROWS, columns, torch_generator), None))
    states = torch.randn(num_tokens, columns, generator=torch_generator)

    assert torch.equal(product(linear, states, True), product(linear, states, False))


@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("columns", [576, 1536])
@pytest.mark.parametrize("num_tokens", [2, 5, 17, 64])
def test_a_row_does_not_depend_on_its_batch(kind: str, columns: int, num_tokens: int, torch_generator) -> None:
    linear = Int8DotLinear(BlockLinear(random_quantized(kind, ROWS, columns, torch_generator), None))
    states = torch.randn(num_tokens, columns, generator=torch_generator)

    batched = product(linear, states, True)

    for row in range(num_tokens):
        assert torch.equal(batched[row], product(linear, states[row: row + 1], True)[0])
        assert torch.equal(batched[row], product(linear, states[: row + 1], True)[row])


@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("num_tokens", [1, 16])
def test_error_against_the_dequantized_product_is_within_its_bound(kind: str, num_tokens: int,
                                                                   torch_generator) -> None:
    weight = random_quantized(kind, ROWS, 576, torch_generator)
    states = torch.randn(num_tokens, 576, generator=torch_generator)
    dense = weight.dequantize().double()

    actual = Int8DotLinear(BlockLinear(weight, None))(states)

    _, scale, _ = reference_activations(states, kind)
    steps = scale.double().repeat_interleave(GROUP_SIZE, dim=1) / 2  # [T, K]: each activation's largest move
    _, rounding = integer_reference(states, weight)
    bound = steps @ dense.abs().T + rounding + 2.0**-18 * (states.double().abs() @ dense.abs().T)
    assert bool(((actual.double() - states.double() @ dense.T).abs() <= bound).all())


def test_bias_and_bfloat16_inputs(torch_generator) -> None:
    weight = random_quantized("q4", 16, 64, torch_generator)
    bias = torch.randn(16, generator=torch_generator)
    linear = Int8DotLinear(BlockLinear(weight, bias))
    states = torch.randn(3, 64, generator=torch_generator).bfloat16()

    actual = linear(states)

    assert actual.dtype == torch.bfloat16
    assert torch.equal(actual, linear.product(states.float()).bfloat16().add_(bias))


@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("vectorised", [True, False])
@pytest.mark.parametrize("num_tokens", [1, 5])
def test_the_largest_codes_do_not_overflow(kind: str, vectorised: bool, num_tokens: int, torch_generator) -> None:
    weight = random_quantized(kind, 16, 576, torch_generator)
    weight.codes.fill_(0xFF if kind == "q4" else -128)  # q4: every code 15; q8: every code -128
    states = torch.full((num_tokens, 576), -3.0)  # every activation code -127

    actual = product(Int8DotLinear(BlockLinear(weight, None)), states, vectorised)

    expected, bound = integer_reference(states, weight)
    assert bool(((actual.double() - expected).abs() <= bound).all())
