"""The decoder's CUDA kernels: arbi_kernels' fused add + RMSNorm, SiLU-and-multiply, one-launch rotary (with
Qwen3's head norms fused in) and, for batch-1 decode, the skinny matmul where it was tuned. Importing this
module imports triton.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from arbi_kernels import HeadNorms, apply_rotary_embedding, rms_norm, silu_and_mul
from arbi_kernels.skinny_matmul import has_tuned_tiles, skinny_matmul
from torch import Tensor

from arbi_grpc.models.decoder_ops import HeadNormWeights, Rotation


class TritonDecoderOps:
    """The `DecoderOps` of the CUDA engine path (also runs under Triton's CPU interpreter, for tests)."""

    def __init__(self, inverse_frequencies: Tensor, max_positions: int) -> None:
        all_positions = torch.arange(max_positions, dtype=torch.float32, device=inverse_frequencies.device)
        angles = all_positions[:, None] * inverse_frequencies[None, :]  # [P, D / 2]
        self.cos_table, self.sin_table = angles.cos(), angles.sin()  # float32 [P, D / 2], read by the kernel

    def linear(self, states: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """One-row inputs (batch-1 decode) of a shape the skinny kernel was tuned for read the weights faster
        through it than through cuBLAS; all else is F.linear."""
        if (states.dim() == 2 and states.shape[0] == 1 and states.dtype == weight.dtype
                and has_tuned_tiles(1, weight.shape[0], weight.shape[1], weight.dtype)):
            return skinny_matmul(states, weight, bias)
        return F.linear(states, weight, bias)

    def rms_norm(self, states: Tensor, weight: Tensor, eps: float) -> Tensor:
        return rms_norm(states, weight, eps)[0]

    def add_rms_norm(self, states: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        return rms_norm(states, weight, eps, residual)

    def silu_and_mul(self, gate_up: Tensor) -> Tensor:
        return silu_and_mul(gate_up)

    def rotation(self, positions: Tensor, dtype: torch.dtype) -> Rotation:
        return _TableRotation(positions, self.cos_table, self.sin_table)


class _TableRotation:
    """Rotates queries and keys in place, one kernel launch per layer, from the cos/sin rows of their positions."""

    def __init__(self, positions: Tensor, cos_table: Tensor, sin_table: Tensor) -> None:
        self.positions, self.cos_table, self.sin_table = positions, cos_table, sin_table

    def apply(self, query: Tensor, key: Tensor, head_norms: HeadNormWeights | None) -> tuple[Tensor, Tensor]:
        norms = None if head_norms is None else HeadNorms(*head_norms)
        apply_rotary_embedding(self.positions, query, key, self.cos_table, self.sin_table, head_norms=norms)
        return query, key
