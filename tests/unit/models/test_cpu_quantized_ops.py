"""The CPU int4 kernels of block-quantized weights against the float32 dequantization, on fresh random inputs;
and GGUF's Q4_0 / Q4_1 / Q8_0 blocks read into the stored form that dequantizes to gguf-py's values exactly."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from arbi_grpc.models.cpu_quantized_ops import PackedInt4Linear, pack_int4
from arbi_grpc.models.gguf.quantized_tensors import read_quantized
from arbi_grpc.models.gguf.tensors import TensorPlan
from arbi_grpc.models.quantized_weights import QuantizedWeight

# bfloat16 rounds the activations, the scales, the zeros and the outputs, each by at most 2^-9 relative.
_BFLOAT16_BOUND = 2.0**-7

FORMATS = {"q4_0": GGMLQuantizationType.Q4_0, "q4_1": GGMLQuantizationType.Q4_1, "q8_0": GGMLQuantizationType.Q8_0}


def random_quantized(kind: str, rows: int, columns: int, generator: torch.Generator) -> QuantizedWeight:
    groups = columns // 32
    scale = torch.rand(rows, groups, generator=generator) * 0.02 + 1e-3
    if kind == "q8":
        codes = torch.randint(-128, 128, (rows, columns), generator=generator, dtype=torch.int8)
        return QuantizedWeight("q8", codes, scale, None)
    codes = torch.randint(0, 256, (rows, columns // 2), generator=generator, dtype=torch.uint8)
    return QuantizedWeight("q4", codes, scale, torch.randn(rows, groups, generator=generator) * 0.05)


@pytest.mark.parametrize("kind", ["q4", "q8"])
@pytest.mark.parametrize("num_tokens", [1, 7])
def test_linear_matches_the_dequantized_weight(kind: str, num_tokens: int, torch_generator) -> None:
    weight = random_quantized(kind, 128, 96, torch_generator)
    bias = torch.randn(128, generator=torch_generator)
    states = torch.randn(num_tokens, 96, generator=torch_generator)
    dense = weight.dequantize()

    actual = PackedInt4Linear(weight, bias)(states)

    expected = states @ dense.T + bias
    bound = _BFLOAT16_BOUND * (states.abs() @ dense.abs().T + bias.abs())
    assert actual.dtype == torch.float32 and actual.shape == (num_tokens, 128)
    assert bool(((actual - expected).abs() <= bound).all()), (actual - expected).abs().max()


@pytest.mark.parametrize("rows", [64, 192, 48])
def test_packing_equals_torch_conversion(rows: int, torch_generator) -> None:
    codes = torch.randint(0, 16, (rows, 128), generator=torch_generator, dtype=torch.uint8)
    expected = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), 2)
    assert torch.equal(pack_int4(codes), expected)


def test_unpackable_shape_is_a_precise_not_implemented(torch_generator) -> None:
    with pytest.raises(NotImplementedError, match=r"N % 16 == 0 .* \[40, 64\]"):
        PackedInt4Linear(random_quantized("q4", 40, 64, torch_generator), None)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_gguf_blocks_dequantize_exactly_to_gguf_values(name: str, rng) -> None:
    tensor_type = FORMATS[name]
    values = np.random.default_rng(rng.randrange(2**32)).standard_normal((64, 96)).astype(np.float32)
    blocks = quantize(values, tensor_type)
    source = SimpleNamespace(name="blk.0.ffn_up.weight", tensor_type=tensor_type, data=blocks)
    plan = TensorPlan(source=source, hf_name="model.layers.0.mlp.up_proj.weight", hf_shape=(64, 96),
                      permuted_heads=None)

    weight = read_quantized(Path("random.gguf"), plan)

    expected = dequantize(blocks, tensor_type).reshape(64, 96)
    np.testing.assert_array_equal(weight.dequantize().numpy(), expected)
    assert weight.kind == ("q8" if tensor_type == GGMLQuantizationType.Q8_0 else "q4")
