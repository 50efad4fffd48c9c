"""The per-layer codec: rotation and channel scales are undone exactly, and rotation helps outlier channels."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec import (
    SUPPORTED_BITS,
    ChannelTransform,
    TkvLayerCodec,
    TkvSpec,
    dequantize_groups,
    hadamard_rotate,
)


@pytest.mark.parametrize("bits", SUPPORTED_BITS)
def test_round_trip_error_shrinks_with_bits(bits: int, generator: torch.Generator) -> None:
    x = torch.randn(64, 3, 64, generator=generator)
    codec = TkvLayerCodec(TkvSpec(bits, bits, 32))
    relative = (codec.fake_quantize_keys(x) - x).norm() / x.norm()
    assert float(relative) < 2.5 / ((1 << bits) - 1)  # step ~ (group range ~ 4.5 sigma) / levels, rms step/3.5


def test_channel_transforms_are_undone_on_decode(generator: torch.Generator) -> None:
    x = torch.randn(64, 3, 64, generator=generator) + 5 * torch.randn(3, 64, generator=generator)
    scale = torch.exp(torch.randn(3, 64, generator=generator) * 0.5)
    shift = torch.randn(3, 64, generator=generator)
    codec = TkvLayerCodec(TkvSpec(8, 8, 32), ChannelTransform(scale, shift), ChannelTransform(1 / scale), rotate=True)
    for decoded in (codec.fake_quantize_keys(x), codec.fake_quantize_values(x)):
        assert float((decoded - x).norm() / x.norm()) < 0.02  # 8 bits: well under 1% typical
    encoded = codec.encode_keys(x)
    assert torch.allclose(codec.decode_keys_rotated(encoded), dequantize_groups(encoded) / scale + shift, atol=1e-5)


def test_centering_removes_a_constant_channel_offset(generator: torch.Generator) -> None:
    offset = torch.zeros(1, 64)
    offset[0, 11] = 40.0  # a key channel that is large for every token
    x = torch.randn(128, 1, 64, generator=generator) + offset
    shift = hadamard_rotate(offset)  # the rotated-space mean of x, as calibration finds it
    plain = TkvLayerCodec(TkvSpec(3, 3, 32))
    centered = TkvLayerCodec(TkvSpec(3, 3, 32), ChannelTransform(shift=shift))
    plain_error = (plain.fake_quantize_keys(x) - x).norm()
    centered_error = (centered.fake_quantize_keys(x) - x).norm()
    assert centered_error < plain_error / 3


def test_decode_rotated_is_the_rotation_of_decode(generator: torch.Generator) -> None:
    x = torch.randn(10, 3, 64, generator=generator)
    codec = TkvLayerCodec(TkvSpec(4, 3, 32))
    encoded = codec.encode_values(x)
    rotated = codec.decode_values_rotated(encoded)
    assert torch.allclose(rotated, hadamard_rotate(codec.decode_values(encoded)), atol=1e-5)


def test_rotation_reduces_error_with_outlier_channels(generator: torch.Generator) -> None:
    x = torch.randn(256, 1, 64, generator=generator)
    x[..., 3] *= 30.0  # one high-variance channel
    rotated = TkvLayerCodec(TkvSpec(4, 4, 32), rotate=True)
    plain = TkvLayerCodec(TkvSpec(4, 4, 32), rotate=False)
    assert (rotated.fake_quantize_keys(x) - x).norm() < (plain.fake_quantize_keys(x) - x).norm()


def test_channel_transforms_are_validated(generator: torch.Generator) -> None:
    codec = TkvLayerCodec(TkvSpec(), ChannelTransform(scale=torch.ones(3, 64)))
    with pytest.raises(InvalidArgumentError):
        codec.encode_keys(torch.randn(4, 2, 64, generator=generator))
    with pytest.raises(InvalidArgumentError):
        TkvLayerCodec(TkvSpec(), ChannelTransform(scale=-torch.ones(3, 64)))
    with pytest.raises(InvalidArgumentError):
        TkvLayerCodec(TkvSpec(), values=ChannelTransform(shift=torch.ones(64)))
    with pytest.raises(InvalidArgumentError):
        TkvLayerCodec(TkvSpec(), values=ChannelTransform(shift=torch.full((3, 64), float("nan"))))
    with pytest.raises(InvalidArgumentError):
        TkvLayerCodec(TkvSpec(), ChannelTransform(torch.ones(3, 64), torch.zeros(2, 64)))
    with pytest.raises(InvalidArgumentError, match="does not divide head_dim"):
        TkvLayerCodec(TkvSpec(group_size=128), ChannelTransform(scale=torch.ones(3, 64)))
