"""`BlockLinear`, the CPU kernel of block-quantized weights, against the float64 product with the dequantized
weight on fresh random inputs (the vectorised and the plain C++ paths, the matrix-vector kernel and the
dequantize-then-matmul path above `SMALL_BATCH`, whole or in chunks of rows); its batch rows independent of each
other; its dequantization and embedding rows equal to `QuantizedWeight.dequantize()` exactly."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.models.block_linear import SMALL_BATCH, BlockEmbedding, BlockLinear
from arbi_grpc.models.quantized_weights import QuantizedWeight

# float32 accumulation: each output within this fraction of sum_k |x_k w_k| (+ |bias|) of the exact product.
_FLOAT32_BOUND = 2.0**-18


def random_quantized(kind: str, rows: int, columns: int, generator: torch.Generator) -> QuantizedWeight:
    groups = columns // 32
    scale = (torch.rand(rows, groups, generator=generator) * 0.02 + 1e-3).half().float()  # GGUF's float16 d
    if kind == "q8":
        codes = torch.randint(-128, 128, (rows, columns), generator=generator, dtype=torch.int8)
        return QuantizedWeight("q8", codes, scale, None)
    codes = torch.randint(0, 256, (rows, columns // 2), generator=generator, dtype=torch.uint8)
    return QuantizedWeight("q4", codes, scale, (torch.randn(rows, groups, generator=generator) * 0.05).half().float())


def within_float32(actual: torch.Tensor, states: torch.Tensor, dense: torch.Tensor, bias: torch.Tensor) -> bool:
    exact = states.double() @ dense.double().T + bias.double()
    bound = _FLOAT32_BOUND * (states.double().abs() @ dense.double().abs().T + bias.double().abs())
    return bool(((actual.double() - exact).abs() <= bound).all())


@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("num_tokens", [1, 6, SMALL_BATCH + 1])
def test_linear_matches_the_dequantized_weight(kind: str, num_tokens: int, torch_generator) -> None:
    weight = random_quantized(kind, 40, 96, torch_generator)
    bias = torch.randn(40, generator=torch_generator)
    states = torch.randn(num_tokens, 96, generator=torch_generator)

    actual = BlockLinear(weight, bias)(states)

    assert actual.dtype == torch.float32 and actual.shape == (num_tokens, 40)
    assert within_float32(actual, states, weight.dequantize(), bias)


@pytest.mark.parametrize("kind", ["q4", "q8"])
def test_a_batch_through_chunks_of_rows_matches_the_dequantized_weight(kind: str, torch_generator) -> None:
    weight = random_quantized(kind, 40, 96, torch_generator)
    bias = torch.randn(40, generator=torch_generator)
    states = torch.randn(SMALL_BATCH + 3, 96, generator=torch_generator)
    linear = BlockLinear(weight, bias)
    linear.chunk_rows = 7  # six chunks, the last of 5 rows

    actual = linear(states)

    assert actual.shape == (SMALL_BATCH + 3, 40)
    assert within_float32(actual, states, weight.dequantize(), bias)


def kernel_product(linear: BlockLinear, states: torch.Tensor, vectorised: bool) -> torch.Tensor:
    """The matrix-vector kernel itself (whatever the batch), vectorised or plain C++."""
    if linear.kind == "q4":
        return linear.kernels.q4_linear(states, linear.codes, linear.scale, linear.minimum, vectorised)
    return linear.kernels.q8_linear(states, linear.codes, linear.scale, vectorised)


@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("vectorised", [True, False])
@pytest.mark.parametrize("num_tokens", [1, 2, 4, 5, 7, SMALL_BATCH])
def test_kernel_paths_match_the_dequantized_weight(kind: str, vectorised: bool, num_tokens: int,
                                                   torch_generator) -> None:
    # 41 rows: blocks of 3 and 4 weight rows and 16-row thread shares, each with a remainder
    weight = random_quantized(kind, 41, 160, torch_generator)
    states = torch.randn(num_tokens, 160, generator=torch_generator)

    actual = kernel_product(BlockLinear(weight, None), states, vectorised)

    assert actual.shape == (num_tokens, 41)
    assert within_float32(actual, states, weight.dequantize(), torch.zeros(41))


@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("vectorised", [True, False])
@pytest.mark.parametrize("num_tokens", [2, 5, SMALL_BATCH])
def test_a_row_does_not_depend_on_its_batch(kind: str, vectorised: bool, num_tokens: int, torch_generator) -> None:
    linear = BlockLinear(random_quantized(kind, 41, 128, torch_generator), None)
    states = torch.randn(num_tokens, 128, generator=torch_generator)

    batched = kernel_product(linear, states, vectorised)

    for row in range(num_tokens):
        assert torch.equal(batched[row], kernel_product(linear, states[row: row + 1], vectorised)[0])
        assert torch.equal(batched[row], kernel_product(linear, states[: row + 1], vectorised)[row])
    if vectorised:
        assert torch.equal(linear(states), batched)


@pytest.mark.parametrize("kind", ["q4", "q8"])
def test_dequantization_and_embedding_rows_are_exact(kind: str, torch_generator) -> None:
    weight = random_quantized(kind, 50, 64, torch_generator)
    linear = BlockLinear(weight, None)
    ids = torch.tensor([3, 0, 49, 3])

    assert torch.equal(linear.dequantize(), weight.dequantize())
    assert torch.equal(linear.dequantize(vectorised=False), weight.dequantize())
    assert torch.equal(BlockEmbedding(linear)(ids), weight.dequantize()[ids])


def test_bfloat16_inputs_give_bfloat16_outputs(torch_generator) -> None:
    weight = random_quantized("q4", 16, 64, torch_generator)
    states = torch.randn(2, 64, generator=torch_generator).bfloat16()

    actual = BlockLinear(weight, None)(states)

    assert actual.dtype == torch.bfloat16
    torch.testing.assert_close(actual, (states.float() @ weight.dequantize().T).bfloat16())


def test_a_scale_float16_cannot_hold_is_refused(torch_generator) -> None:
    weight = random_quantized("q8", 16, 64, torch_generator)
    weight.scale[3, 1] = 1e-3 + 2**-30

    with pytest.raises(ValueError, match="not a float16 value"):
        BlockLinear(weight, None)
