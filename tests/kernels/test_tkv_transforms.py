"""The TKV query and output transform kernels against arbi_grpc.kv_codec.attention_transforms, bit for bit."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from arbi_grpc.kv_codec.attention_transforms import transform_output, transform_queries
from arbi_kernels.tkv_transforms import tkv_transform_output, tkv_transform_queries
from tests.kernels.tkv_batches import TkvShape, random_tkv_layer


@pytest.mark.parametrize(
    ("head_dim", "group_size", "rotate", "dtype"),
    [(64, 4, True, torch.bfloat16), (128, 1, True, torch.float32), (32, 3, False, torch.float16)],
)
def test_match_the_torch_transforms_bit_for_bit(head_dim, group_size, rotate, dtype, device, generator, interpreting):
    shape = TkvShape(2 * group_size, 2, head_dim, 16, 4, 4, 16, rotate=rotate)
    layer = random_tkv_layer(shape, 1, device, generator)
    fused = torch.randn((21, 3 * shape.num_heads, head_dim), generator=generator).to(device=device, dtype=dtype)
    query = fused[:, : shape.num_heads]  # a strided view, as sliced from a fused QKV projection
    assert torch.equal(tkv_transform_queries(query, layer), transform_queries(query, layer))
    accumulated = torch.randn((21, shape.num_heads, head_dim), generator=generator).to(device)
    actual, expected = tkv_transform_output(accumulated, layer, dtype), transform_output(accumulated, layer, dtype)
    if dtype == torch.bfloat16 and interpreting:  # the interpreter truncates float32 to bfloat16: one ulp
        torch.testing.assert_close(actual, expected, atol=0.0, rtol=2.0**-7)
    else:
        assert torch.equal(actual, expected)


def test_rejects_bad_arguments(device, generator):
    layer = random_tkv_layer(TkvShape(4, 2, 64, 16, 4, 4), 1, device, generator)
    with pytest.raises(ValueError, match="num_heads 3 must be a multiple of num_kv_heads 2"):
        tkv_transform_queries(torch.zeros((2, 3, 64), device=device), layer)
    with pytest.raises(ValueError, match="query: expected shape"):
        tkv_transform_queries(torch.zeros((2, 4, 32), device=device), layer)
    with pytest.raises(ValueError, match="dtype"):
        tkv_transform_output(torch.zeros((2, 4, 64), device=device), layer, torch.int32)
    with pytest.raises(ValueError, match="value_shift"):
        tkv_transform_output(torch.zeros((2, 4, 64), device=device),
                             dataclasses.replace(layer, value_shift=layer.value_shift[:1]), torch.float32)
