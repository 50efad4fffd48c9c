"""Asymmetric uniform quantization of [..., D] tensors in groups of G channels, with densely packed codes.

Each group stores an fp16 `scale` (the step) and an fp16 `zero` (the value code 0 stands for); a channel decodes
as `zero + code * scale`, code = round((x - zero) / scale) clamped to [0, 2^bits - 1]. Inputs must lie within
fp16 range. The encoder is a per-group operation a write kernel does on the fly:

1. Min/max start: zero = the group minimum rounded down to fp16, scale = (max - zero) / (2^bits - 1) raised to
   at least SMALLEST_STEP and rounded up to fp16. The rounding comes before the codes, so every input is
   representable and the error is at most half a step.
2. REFIT_ROUNDS least-squares refits: with the codes c of the current best (zero, scale), the least-squares
   line x ~ z + s*c over the group (n = G, det = n*sum(c^2) - sum(c)^2; when det > 0,
   s = (n*sum(c*x) - sum(c)*sum(x)) / det raised to at least SMALLEST_STEP, z = (sum(x) - s*sum(c)) / n) gives a
   candidate zero = z rounded down, scale = s rounded up to fp16; its codes are chosen again (rounded, clamped)
   and it replaces the current best only if its squared error over the group is strictly smaller.

So a group's squared error never exceeds that of the min/max encoding; values clamped by a refit can err by more
than half a step. The study (docs/tkv.md) found the refit worth 0.3-0.4 points of perplexity at 3 bits, while
choosing a clipped range per group by squared error made perplexity worse: attention needs the extremes.
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
REFIT_ROUNDS = 2


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


def _group_metadata(zero: torch.Tensor, step: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp16 (zero rounded down, step raised to SMALLEST_STEP and rounded up) from fp32 [..., D/G] values."""
    fp16_zero = _round_fp16(zero, toward=float("-inf"))
    return fp16_zero, _round_fp16(step.clamp_min(SMALLEST_STEP), toward=float("inf"))


def _group_codes(groups: torch.Tensor, zero: torch.Tensor, scale: torch.Tensor, top_code: int) -> torch.Tensor:
    """fp32 codes [..., D/G, G] of groups under fp16 (zero, scale) [..., D/G]."""
    return torch.round((groups - zero.float().unsqueeze(-1)) / scale.float().unsqueeze(-1)).clamp_(0, top_code)


def _squared_error(groups: torch.Tensor, codes: torch.Tensor, zero: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    decoded = zero.float().unsqueeze(-1) + codes * scale.float().unsqueeze(-1)
    return (decoded - groups).pow(2).sum(dim=-1)  # [..., D/G]


def _least_squares_line(
    groups: torch.Tensor, codes: torch.Tensor, zero: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(z, s) fp32 minimizing sum (z + s*c - x)^2 per group; where all codes are equal, the given zero and scale."""
    count = groups.shape[-1]
    code_sum, code_square_sum = codes.sum(dim=-1), codes.pow(2).sum(dim=-1)
    value_sum, cross_sum = groups.sum(dim=-1), (codes * groups).sum(dim=-1)
    det = count * code_square_sum - code_sum.pow(2)
    solvable = det > 0
    step = (count * cross_sum - code_sum * value_sum) / torch.where(solvable, det, torch.ones_like(det))
    step = torch.where(solvable, step.clamp_min(SMALLEST_STEP), scale.float())
    return torch.where(solvable, (value_sum - step * code_sum) / count, zero.float()), step


def quantize_groups(x: torch.Tensor, bits: int, group_size: int) -> QuantizedGroups:
    """Quantize x [..., D] to `bits` bits per channel with one (scale, zero) per `group_size` channels."""
    validate_bits(bits)
    head_dim = x.shape[-1]
    validate_group_size(group_size, head_dim)
    packed_width(head_dim, bits)
    top_code = (1 << bits) - 1
    groups = x.to(torch.float32).reshape(*x.shape[:-1], head_dim // group_size, group_size)  # [..., D/G, G]
    low = groups.amin(dim=-1)
    zero, scale = _group_metadata(low, (groups.amax(dim=-1) - _round_fp16(low, float("-inf")).float()) / top_code)
    codes = _group_codes(groups, zero, scale, top_code)
    error = _squared_error(groups, codes, zero, scale)
    for _ in range(REFIT_ROUNDS):
        new_zero, new_scale = _group_metadata(*_least_squares_line(groups, codes, zero, scale))
        new_codes = _group_codes(groups, new_zero, new_scale, top_code)
        new_error = _squared_error(groups, new_codes, new_zero, new_scale)
        better = new_error < error
        zero, scale = torch.where(better, new_zero, zero), torch.where(better, new_scale, scale)
        codes = torch.where(better.unsqueeze(-1), new_codes, codes)
        error = torch.where(better, new_error, error)
    packed = pack_codes(codes.to(torch.uint8).reshape(x.shape), bits)
    return QuantizedGroups(packed, scale, zero, bits, group_size)


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
