"""The CPU kernel of block-quantized weights: linear layers through torch's weight-only int4 matmul
(`_weight_int4pack_mm_for_cpu`).

torch's kernel computes w = (q - 8) * scale + zero per group of 32 inputs, with bfloat16 activations, scales
and outputs and float32 accumulation (its float32 and float16 paths are unvectorised, ~30x slower, measured
with benchmarks/cpu_vs_llama_cpp.py's kernel table). The stored forms map onto it exactly in the integers:
- q4 (w = s * q + m): scale s, zero m + 8 s.
- q8 (w = s * q, q in -128..127): u = q + 128 = 16 h + l with h, l in 0..15, so
  w = 16 s (h - 8) + [s (l - 8) + 8 s]: two int4 groups per stored group, the input repeated twice along K.
The only rounding is bfloat16's (activations, scales): a relative error of ~2^-8 per product, which
tests/unit/test_cpu_quantized_ops.py bounds.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

from arbi_grpc.models.quantized_weights import GROUP_SIZE, QuantizedWeight

_KERNEL_DTYPE = torch.bfloat16
_INNER_K_TILES = 2
# The packing kernel wants N a multiple of this and K a multiple of `_INNER_K_TILES * 16`.
_ROW_MULTIPLE = 16
_LAYOUT_ROWS = 64


class PackedInt4Linear(nn.Module):
    """y = x @ w.T (+ bias) for a quantized w [N, K]; x [T, K] of any float dtype, y in x's dtype."""

    @staticmethod
    def packs(shape: tuple[int, int]) -> bool:
        """Whether the kernel's packing takes a [N, K] weight."""
        rows, columns = shape
        return rows % _ROW_MULTIPLE == 0 and columns % (_INNER_K_TILES * 16) == 0

    def __init__(self, weight: QuantizedWeight, bias: Tensor | None) -> None:
        super().__init__()
        rows, columns = weight.shape
        if not self.packs(weight.shape):
            raise NotImplementedError(
                f"the CPU int4 kernel needs N % {_ROW_MULTIPLE} == 0 and K % {_INNER_K_TILES * 16} == 0, "
                f"got a [{rows}, {columns}] weight"
            )
        scale, minimum = weight.scale, weight.minimum  # [N, G]
        if weight.kind == "q4":
            codes = unpacked_nibbles(weight.codes)
            scales, zeros = scale, minimum + 8 * scale
        else:
            unsigned = weight.codes.view(torch.uint8) ^ 0x80  # q + 128 in 0..255
            codes = torch.cat((unsigned >> 4, unsigned & 0x0F), dim=1)  # [N, 2K]: the input is repeated along K
            scales = torch.cat((16 * scale, scale), dim=1)
            zeros = torch.cat((torch.zeros_like(scale), 8 * scale), dim=1)
        self.repeats = 2 if weight.kind == "q8" else 1
        self.out_features = rows
        self.register_buffer("packed", pack_int4(codes))
        # The kernel's layout: [groups, N, (scale, zero)].
        scales_and_zeros = torch.stack((scales.t(), zeros.t()), dim=-1).to(_KERNEL_DTYPE).contiguous()
        self.register_buffer("scales_and_zeros", scales_and_zeros)
        self.register_buffer("bias", bias)

    def forward(self, states: Tensor) -> Tensor:
        inputs = states.to(_KERNEL_DTYPE)
        if self.repeats == 2:
            inputs = torch.cat((inputs, inputs), dim=-1)
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(inputs, self.packed, GROUP_SIZE, self.scales_and_zeros)
        out = out.to(states.dtype)
        return out if self.bias is None else out.add_(self.bias)


def unpacked_nibbles(codes: Tensor) -> Tensor:
    """uint8 [N, K / 2] two codes per byte (low nibble first) -> uint8 [N, K]."""
    return torch.stack((codes & 0x0F, codes >> 4), dim=-1).reshape(codes.shape[0], -1)


def pack_int4(codes: Tensor) -> Tensor:
    """uint8 codes [N, K] in 0..15 -> the int4 kernel's packed weight.

    `_convert_weight_to_int4pack_for_cpu` wants int32 codes and is slow on large matrices; for N a multiple of
    64 its layout is rows in blocks of 64, byte (block, k, p) holding row 64 block + p in the low nibble and
    row 64 block + 32 + p in the high one. That layout is built here directly with uint8 ops when a probe shows
    the installed torch still uses it; otherwise the conversion op runs.
    """
    rows, columns = codes.shape
    if rows % _LAYOUT_ROWS or not _layout_matches():
        return torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), _INNER_K_TILES)
    blocks = codes.view(rows // _LAYOUT_ROWS, 2, _LAYOUT_ROWS // 2, columns)
    return (blocks[:, 0] | (blocks[:, 1] << 4)).transpose(1, 2).reshape(rows, columns // 2)


@functools.cache
def _layout_matches() -> bool:
    probe = torch.randint(0, 16, (2 * _LAYOUT_ROWS, 128), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    expected = torch.ops.aten._convert_weight_to_int4pack_for_cpu(probe.to(torch.int32), _INNER_K_TILES)
    blocks = probe.view(2, 2, _LAYOUT_ROWS // 2, 128)
    built = (blocks[:, 0] | (blocks[:, 1] << 4)).transpose(1, 2).reshape(2 * _LAYOUT_ROWS, 64)
    return torch.equal(expected, built)
