"""Per-output-channel int8 weights (`--cpu-weights int8`): the quantizer applied at load to a float checkpoint's
layer matrices, its exact float meaning, and the CPU kernel that runs it.

Each row n of a [N, K] weight gets one scale s_n = max_k |w_nk| / 127, rounded to bfloat16 before the codes are
chosen, and codes q_nk = round(w_nk / s_n) in -127..127 (symmetric, no zero point): w ~ s_n q_nk, with an error
of at most s_n / 2 per weight. Since s_n is a bfloat16 value, the kernel's scales hold it exactly and
`dequantize` is the exact meaning of what runs.

The kernel is torch's weight-only int8 matmul (`_weight_int8pack_mm`). Its bfloat16 path is vectorised and its
float32 and float16 paths are not (2x to 80x slower than the float32 matmul on SmolLM2's shapes): the
activations go in as bfloat16 and the outputs come back in the caller's dtype, a relative rounding of ~2^-8 on
the inputs and on the outputs (`python -m benchmarks.cpu_weight_kernels` measures the three against float32).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

_KERNEL_DTYPE = torch.bfloat16
CODE_LIMIT = 127
SCALE_BYTES = 2  # one bfloat16 scale per output row


@dataclass(frozen=True)
class Int8Weight:
    """One [N, K] weight matrix as per-row int8 codes and bfloat16 scales (CPU tensors)."""

    codes: Tensor  # int8 [N, K] in -127..127
    scale: Tensor  # bfloat16 [N]

    kind = "int8"  # beside `QuantizedWeight.kind`: projections fuse only when their kinds agree

    @classmethod
    def quantize(cls, weight: Tensor) -> Int8Weight:
        """The codes and scales of a float [N, K] weight (any float dtype); an all-zero row gets scale 1."""
        if weight.dim() != 2 or not weight.is_floating_point():
            raise ValueError(f"int8 quantization takes a float [N, K] matrix, got {weight.dtype}{list(weight.shape)}")
        values = weight.float()
        peak = values.abs().amax(dim=1)
        scale = torch.where(peak > 0, peak / CODE_LIMIT, torch.ones_like(peak)).to(_KERNEL_DTYPE)
        codes = torch.round(values / scale.float()[:, None]).clamp_(-CODE_LIMIT, CODE_LIMIT).to(torch.int8)
        return cls(codes, scale)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    @property
    def nbytes(self) -> int:
        return self.codes.numel() + self.scale.numel() * SCALE_BYTES

    def dequantize(self) -> Tensor:
        """float32 [N, K], what the kernel multiplies by."""
        return self.codes.float() * self.scale.float()[:, None]

    @staticmethod
    def concatenate(weights: list[Int8Weight]) -> Int8Weight:
        """The weights stacked along the output axis (the fused q/k/v or gate/up matrix): per-row scales make it
        the quantization of the stacked float matrix."""
        return Int8Weight(torch.cat([weight.codes for weight in weights]),
                          torch.cat([weight.scale for weight in weights]))


class Int8Linear(nn.Module):
    """y = x @ w.T (+ bias) for an int8 w [N, K]; x [T, K] of any float dtype, y [T, N] in x's dtype."""

    def __init__(self, weight: Int8Weight, bias: Tensor | None) -> None:
        super().__init__()
        self.out_features = weight.shape[0]
        self.register_buffer("codes", weight.codes.contiguous())
        self.register_buffer("scale", weight.scale.contiguous())
        self.register_buffer("bias", bias)

    def forward(self, states: Tensor) -> Tensor:
        out = torch.ops.aten._weight_int8pack_mm(states.to(_KERNEL_DTYPE), self.codes, self.scale).to(states.dtype)
        return out if self.bias is None else out.add_(self.bias)
