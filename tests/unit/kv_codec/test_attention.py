"""The fused-kernel identity: attention with rotated q/k/v plus one output un-rotation equals plain attention."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.errors import InvalidArgumentError

from arbi_grpc.kv_codec import (
    ChannelTransform,
    TkvLayerCodec,
    TkvSpec,
    hadamard_rotate,
    rotated_space_attention,
    tkv_attention,
)


def _plain_attention(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, causal: bool) -> torch.Tensor:
    heads_per_kv = query.shape[1] // keys.shape[1]
    q = query.transpose(0, 1)  # [Hq, T, D]
    k = keys.repeat_interleave(heads_per_kv, dim=1).transpose(0, 1)
    v = values.repeat_interleave(heads_per_kv, dim=1).transpose(0, 1)
    offset = keys.shape[0] - query.shape[0]
    mask = None
    if causal:
        mask = torch.ones(query.shape[0], keys.shape[0], dtype=torch.bool).tril(diagonal=offset)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(0, 1)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("num_queries", [1, 5, 16])
def test_rotated_space_attention_equals_plain(causal: bool, num_queries: int, generator: torch.Generator) -> None:
    query = torch.randn(num_queries, 9, 64, generator=generator)
    keys = torch.randn(16, 3, 64, generator=generator) * 3
    values = torch.randn(16, 3, 64, generator=generator)
    codec = TkvLayerCodec(TkvSpec(8, 8, 32), rotate=True)
    result = rotated_space_attention(query, hadamard_rotate(keys), hadamard_rotate(values), codec, causal)
    assert torch.allclose(result, _plain_attention(query, keys, values, causal), atol=1e-5)


def test_unrotated_keys_in_rotated_space_give_a_different_answer(generator: torch.Generator) -> None:
    query = torch.randn(4, 2, 64, generator=generator)
    keys = torch.randn(8, 2, 64, generator=generator) * 3
    values = torch.randn(8, 2, 64, generator=generator)
    codec = TkvLayerCodec(TkvSpec(), rotate=True)
    wrong = rotated_space_attention(query, keys, values, codec, causal=True)
    assert not torch.allclose(wrong, _plain_attention(query, keys, values, True), atol=1e-3)


@pytest.mark.parametrize("rotate", [True, False])
def test_tkv_attention_at_8_bits_tracks_plain_attention(rotate: bool, generator: torch.Generator) -> None:
    query = torch.randn(3, 6, 64, generator=generator)
    keys = torch.randn(20, 2, 64, generator=generator)
    values = torch.randn(20, 2, 64, generator=generator)
    scale = torch.exp(torch.randn(2, 64, generator=generator) * 0.3)
    shift = torch.randn(2, 64, generator=generator)
    key_transform, value_transform = ChannelTransform(scale, shift), ChannelTransform(1 / scale, -shift)
    codec = TkvLayerCodec(TkvSpec(8, 8, 32), key_transform, value_transform, rotate)
    result = tkv_attention(query, codec.encode_keys(keys), codec.encode_values(values), codec, causal=True)
    assert torch.allclose(result, _plain_attention(query, keys, values, True), atol=3e-2)


def test_tkv_attention_with_fp16_sink_prefix(generator: torch.Generator) -> None:
    query = torch.randn(4, 6, 64, generator=generator)
    keys = torch.randn(12, 2, 64, generator=generator)
    keys[0] *= 20.0  # the sink token's outsized key
    values = torch.randn(12, 2, 64, generator=generator)
    codec = TkvLayerCodec(TkvSpec(8, 8, 32, sink_tokens=1))
    result = tkv_attention(
        query, codec.encode_keys(keys[1:]), codec.encode_values(values[1:]), codec, True,
        sink_keys=keys[:1].half(), sink_values=values[:1].half(),
    )
    assert torch.allclose(result, _plain_attention(query, keys, values, True), atol=3e-2)


def test_sink_keys_without_sink_values_are_refused(generator: torch.Generator) -> None:
    keys = torch.randn(4, 1, 64, generator=generator)
    codec = TkvLayerCodec(TkvSpec())
    with pytest.raises(InvalidArgumentError):
        encoded = codec.encode_keys(keys)
        tkv_attention(torch.randn(1, 1, 64), encoded, encoded, codec, sink_keys=keys[:1])
