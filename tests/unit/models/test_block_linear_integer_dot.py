"""`IntegerDotLinear`, the integer product of block-quantized weights with 8- and 16-bit activations, on fresh random
inputs:
its activation quantization equal to a torch reference exactly; its outputs equal to the same integer arithmetic
(exact int64 dots, float64 sums) within float32 accumulation rounding and to the dequantized float product within
the stated error bound; the vectorised and plain C++ paths equal bit for bit; a row's output independent of its
batch (SmolLM2's K = 576 and 1536, 1 to 64 rows, Q4_1 and Q8_0)."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.models.block_linear import BlockLinear
from arbi_grpc.models.block_linear_integer_dot import ACTIVATION_BITS, IntegerDotLinear, quantize_activations
from arbi_grpc.models.quantized_weights import GROUP_SIZE, QuantizedWeight
from tests.unit.models.test_block_linear import random_quantized

ROWS = 45  # blocks of 8 weight rows, the last of 5, and thread shares of 2 blocks
TOKENS = [1, 2, 3, 5, 16, 17, 64]


def reference_activations(states: torch.Tensor, kind: str,
                          bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q_x, d_x, s_x) in torch float32 operations, each block's codes in the `kind` weight's order."""
    blocks = states.view(states.shape[0], -1, GROUP_SIZE)
    scale = blocks.abs().amax(-1) / (2 ** (bits - 1) - 1)
    inverse = torch.where(scale != 0, 1 / scale, torch.zeros_like(scale))
    codes = torch.round(blocks * inverse[..., None])  # half to even
    sums = scale * codes.sum(-1)
    if kind == "q4":
        codes = torch.cat((codes[..., 0::2], codes[..., 1::2]), dim=-1)
    return codes.to(torch.int8 if bits == 8 else torch.int16).view(states.shape), scale, sums


def natural_order(codes: torch.Tensor, kind: str) -> torch.Tensor:
    """Activation codes [T, K] back in column order."""
    if kind == "q8":
        return codes
    blocks = codes.view(codes.shape[0], -1, 2, GROUP_SIZE // 2)  # [T, G, even | odd, 16]
    return blocks.transpose(-1, -2).reshape(codes.shape)


def integer_reference(states: torch.Tensor, weight: QuantizedWeight,
                      bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(y float64, the float32 rounding bound of each output): int64 block dots scaled and summed in float64."""
    codes, scale, sums = reference_activations(states, weight.kind, bits)
    rows, groups = weight.scale.shape
    q_x = natural_order(codes, weight.kind).long().view(-1, 1, groups, GROUP_SIZE)  # [T, 1, G, 32]
    q_w = weight.integer_codes().long().view(1, rows, groups, GROUP_SIZE)  # [1, N, G, 32]
    dots, magnitudes = (q_x * q_w).sum(-1).double(), (q_x * q_w).abs().sum(-1).double()  # [T, N, G]
    scales = weight.scale.double()[None] * scale.double()[:, None]  # d_w d_x, [T, N, G]
    terms, sizes = scales * dots, scales.abs() * magnitudes
    if weight.minimum is not None:
        minimum_terms = weight.minimum.double()[None] * sums.double()[:, None]
        terms, sizes = terms + minimum_terms, sizes + minimum_terms.abs()
    # d_w d_x, the dot's conversion and 2 fma a block rounded
    return terms.sum(-1), (3 * groups + 2) * 2.0**-24 * sizes.sum(-1)


def product(linear: IntegerDotLinear, states: torch.Tensor, vectorised: bool) -> torch.Tensor:
    return linear.product(states, vectorised)


@pytest.mark.parametrize("bits", ACTIVATION_BITS)
@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("vectorised", [True, False])
@pytest.mark.parametrize("columns", [576, 1536])
def test_activations_are_quantized_as_the_reference(bits: int, kind: str, vectorised: bool, columns: int,
                                                    torch_generator) -> None:
    states = torch.randn(9, columns, generator=torch_generator) * torch.rand(9, 1, generator=torch_generator) * 4
    states[1, 32:64] = 0.0  # a block of zeros: scale 0, codes 0
    states[2, :32] = 0.0
    limit = 2 ** (bits - 1) - 1
    states[2, :5] = torch.tensor([limit, 2.5, -3.5, 0.5, 0.5 - limit])  # scale 1: halves round to even

    actual = quantize_activations(states, kind, bits, vectorised)

    expected = reference_activations(states, kind, bits)
    for got, want in zip(actual, expected, strict=True):
        assert torch.equal(got, want)
    assert natural_order(actual[0], kind)[2, :5].tolist() == [limit, 2, -4, 0, 1 - limit]
    assert actual[1][1, 1] == 0 and not natural_order(actual[0], kind)[1, 32:64].any()


@pytest.mark.parametrize("bits", ACTIVATION_BITS)
@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("vectorised", [True, False])
@pytest.mark.parametrize("columns", [576, 1536])
@pytest.mark.parametrize("num_tokens", TOKENS)
def test_product_is_the_integer_arithmetic(bits: int, kind: str, vectorised: bool, columns: int, num_tokens: int,
                                           torch_generator) -> None:
    weight = random_quantized(kind, ROWS, columns, torch_generator)
    states = torch.randn(num_tokens, columns, generator=torch_generator)

    actual = product(IntegerDotLinear(BlockLinear(weight, None), bits), states, vectorised)

    assert actual.dtype == torch.float32 and actual.shape == (num_tokens, ROWS)
    expected, bound = integer_reference(states, weight, bits)
    assert bool(((actual.double() - expected).abs() <= bound).all())


@pytest.mark.parametrize("bits", ACTIVATION_BITS)
@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("columns", [576, 1536])
@pytest.mark.parametrize("num_tokens", TOKENS)
def test_vectorised_and_plain_paths_agree_exactly(bits: int, kind: str, columns: int, num_tokens: int, torch_generator) -> None:
    linear = IntegerDotLinear(BlockLinear(random_quantized(kind, ROWS, columns, torch_generator), None), bits)
    states = torch.randn(num_tokens, columns, generator=torch_generator)

    assert torch.equal(product(linear, states, True), product(linear, states, False))


@pytest.mark.parametrize("bits", ACTIVATION_BITS)
@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("columns", [576, 1536])
@pytest.mark.parametrize("num_tokens", [2, 5, 17, 64])
def test_a_row_does_not_depend_on_its_batch(bits: int, kind: str, columns: int, num_tokens: int, torch_generator) -> None:
    linear = IntegerDotLinear(BlockLinear(random_quantized(kind, ROWS, columns, torch_generator), None), bits)
    states = torch.randn(num_tokens, columns, generator=torch_generator)

    batched = product(linear, states, True)

    for row in range(num_tokens):
        assert torch.equal(batched[row], product(linear, states[row: row + 1], True)[0])
        assert torch.equal(batched[row], product(linear, states[: row + 1], True)[row])


@pytest.mark.parametrize("bits", ACTIVATION_BITS)
@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("num_tokens", [1, 16])
def test_error_against_the_dequantized_product_is_within_its_bound(bits: int, kind: str, num_tokens: int,
                                                                   torch_generator) -> None:
    weight = random_quantized(kind, ROWS, 576, torch_generator)
    states = torch.randn(num_tokens, 576, generator=torch_generator)
    dense = weight.dequantize().double()

    actual = IntegerDotLinear(BlockLinear(weight, None), bits)(states)

    _, scale, _ = reference_activations(states, kind, bits)
    steps = scale.double().repeat_interleave(GROUP_SIZE, dim=1) / 2  # [T, K]: each activation's largest move
    _, rounding = integer_reference(states, weight, bits)
    bound = steps @ dense.abs().T + rounding + 2.0**-18 * (states.double().abs() @ dense.abs().T)
    assert bool(((actual.double() - states.double() @ dense.T).abs() <= bound).all())


def test_bias_and_bfloat16_inputs(torch_generator) -> None:
    weight = random_quantized("q4", 16, 64, torch_generator)
    bias = torch.randn(16, generator=torch_generator)
    linear = IntegerDotLinear(BlockLinear(weight, bias), 16)
    states = torch.randn(3, 64, generator=torch_generator).bfloat16()

    actual = linear(states)

    assert actual.dtype == torch.bfloat16
    assert torch.equal(actual, linear.product(states.float()).bfloat16().add_(bias))


@pytest.mark.parametrize("bits", ACTIVATION_BITS)
@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("vectorised", [True, False])
@pytest.mark.parametrize("num_tokens", [1, 5])
def test_the_largest_codes_do_not_overflow(bits: int, kind: str, vectorised: bool, num_tokens: int, torch_generator) -> None:
    weight = random_quantized(kind, 16, 576, torch_generator)
    weight.codes.fill_(0xFF if kind == "q4" else -128)  # q4: every code 15; q8: every code -128
    states = torch.full((num_tokens, 576), -3.0)  # every activation code -L

    actual = product(IntegerDotLinear(BlockLinear(weight, None), bits), states, vectorised)

    expected, bound = integer_reference(states, weight, bits)
    assert bool(((actual.double() - expected).abs() <= bound).all())
