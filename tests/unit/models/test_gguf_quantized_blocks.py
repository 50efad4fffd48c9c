"""GGUF's Q4_0 / Q4_1 / Q8_0 blocks read into the stored form (`quantized_weights.QuantizedWeight`) dequantize to
gguf-py's values exactly."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from arbi_grpc.models.gguf.quantized_tensors import read_quantized
from arbi_grpc.models.gguf.tensors import TensorPlan

FORMATS = {"q4_0": GGMLQuantizationType.Q4_0, "q4_1": GGMLQuantizationType.Q4_1, "q8_0": GGMLQuantizationType.Q8_0}


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
