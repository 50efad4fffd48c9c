"""Asymmetric uniform quantization of [..., D] tensors in groups of G channels, with densely packed codes.

Each group stores an fp16 `scale` (the step) and an fp16 `zero` (the value code 0 stands for, i.e. the group
minimum rounded down to fp16); a channel decodes as `zero + code * scale`. The fp16 rounding is done before the
codes are chosen (zero rounded down, scale rounded up), so every input lies inside the representable range and
the decode error is at most half a step. Inputs must lie within fp16 range.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec.packing import pack_codes, packed_width, unpack_codes
from arbi_grpc.kv_codec.spec import validate_bits, validate_group_size

METADATA_DTYPE = torch.float16
SMALLEST_STEP = 2.0**-14
"""Smallest fp16 normal: steps below it (near-constant groups) are raised to it, keeping the division safe."""


@dataclass(frozen=True)
class QuantizedGroups:
    """Packed codes [..., D*bits/8] (uint8) plus fp16 scale and zero [..., D/group_size]."""

    codes: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    bits: int
    group_size: int

    @property
    def head_dim(self) -> int:
        return self.scale.shape[-1] * self.group_size


def _round_fp16(values: torch.Tensor, toward: float) -> torch.Tensor:
    """Round fp32 values to fp16, moving one ulp toward `toward` (+inf or -inf) where rounding went the other way."""
    rounded = values.to(METADATA_DTYPE)
    went_wrong_way = rounded.float() < values if toward > 0 else rounded.float() > values
    stepped = torch.nextafter(rounded, torch.full_like(rounded, toward))
    return torch.where(went_wrong_way, stepped, rounded)


def quantize_groups(x: torch.Tensor, bits: int, group_size: int) -> QuantizedGroups:
    """Quantize x [..., D] to `bits` bits per channel with one (scale, zero) per `group_size` channels."""
    validate_bits(bits)
    head_dim = x.shape[-1]
    validate_group_size(group_size, head_dim)
    packed_width(head_dim, bits)
    top_code = (1 << bits) - 1
    groups = x.to(torch.float32).reshape(*x.shape[:-1], head_dim // group_size, group_size)  # [..., D/G, G]
    zero = _round_fp16(groups.amin(dim=-1), toward=float("-inf"))  # [..., D/G]
    step = (groups.amax(dim=-1) - zero.float()) / top_code
    scale = _round_fp16(step.clamp_min(SMALLEST_STEP), toward=float("inf"))
    codes = torch.round((groups - zero.float().unsqueeze(-1)) / scale.float().unsqueeze(-1))
    codes = codes.clamp_(0, top_code).to(torch.uint8).reshape(x.shape)
    return QuantizedGroups(pack_codes(codes, bits), scale, zero, bits, group_size)


def dequantize_groups(quantized: QuantizedGroups, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Decode `quantized` back to a [..., D] tensor of `dtype`."""
    codes = unpack_codes(quantized.codes, quantized.bits)  # [..., D]
    head_dim = codes.shape[-1]
    if head_dim != quantized.head_dim:
        raise InvalidArgumentError(
            "quantized", f"codes decode to {head_dim} channels but metadata covers {quantized.head_dim}"
        )
    groups = codes.to(torch.float32).reshape(*codes.shape[:-1], head_dim // quantized.group_size, quantized.group_size)
    values = quantized.zero.float().unsqueeze(-1) + groups * quantized.scale.float().unsqueeze(-1)
    return values.reshape(codes.shape).to(dtype)
