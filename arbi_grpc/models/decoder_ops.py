"""The kernels the decoder runs, chosen once when the model is built (`decoder_ops_for`): arbi_kernels' fused
Triton kernels on CUDA (`triton_decoder_ops`), C++ kernels on the CPU (`cpu_decoder_ops`), or the torch reference
here, which runs on any device. The decoder calls one
`DecoderOps` object and never looks at a tensor's device.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor


class HeadNormWeights(NamedTuple):
    """Qwen3's per-head RMSNorm of queries and keys before the rotation: weights [head_dim] each, one eps."""

    query_weight: Tensor
    key_weight: Tensor
    eps: float


class Rotation(Protocol):
    """The rotary rotation of one step's tokens: prepared once per forward pass, applied in every layer."""

    def apply(self, query: Tensor, key: Tensor, head_norms: HeadNormWeights | None) -> tuple[Tensor, Tensor]:
        """query [T, H, D], key [T, Hkv, D] -> rotated (after the head norms, when given); may work in place."""
        ...


class DecoderOps(Protocol):
    """The position-wise operations of a decoder layer; attention itself goes through the `AttentionBackend`."""

    def linear(self, states: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """states [T, in] @ weight[out, in].T (+ bias)."""
        ...

    def rms_norm(self, states: Tensor, weight: Tensor, eps: float) -> Tensor:
        """RMSNorm over the last axis of states [T, size], statistics in float32."""
        ...

    def add_rms_norm(self, states: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        """(norm(states + residual), states + residual): the residual stream's next value and its norm."""
        ...

    def silu_and_mul(self, gate_up: Tensor) -> Tensor:
        """gate_up [T, 2I] -> silu(gate) * up [T, I]."""
        ...

    def rotation(self, positions: Tensor, dtype: torch.dtype) -> Rotation:
        """The rotation of tokens at positions [T] for states of `dtype`."""
        ...


def decoder_ops_for(device: torch.device, inverse_frequencies: Tensor, max_positions: int) -> DecoderOps:
    """The Triton kernels on CUDA, the C++ ones on the CPU; `inverse_frequencies` [D / 2] (on `device`) define
    the rotary angles of positions below `max_positions`."""
    if device.type == "cuda":
        # Imported here: it imports triton, which a CPU server never loads.
        from arbi_grpc.models.triton_decoder_ops import TritonDecoderOps

        return TritonDecoderOps(inverse_frequencies, max_positions)
    if device.type == "cpu":
        from arbi_grpc.models.cpu_decoder_ops import cpu_decoder_ops  # it imports this module

        return cpu_decoder_ops(inverse_frequencies)
    return TorchDecoderOps(inverse_frequencies)


class TorchDecoderOps:
    """Plain torch, as the HF reference computes it; runs on any device."""

    def __init__(self, inverse_frequencies: Tensor) -> None:
        self.inverse_frequencies = inverse_frequencies  # [D / 2] float32

    def linear(self, states: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        return F.linear(states, weight, bias)

    def rms_norm(self, states: Tensor, weight: Tensor, eps: float) -> Tensor:
        if states.dtype != torch.float32:
            states32 = states.to(torch.float32)
            mean_square = states32.pow(2).mean(dim=-1, keepdim=True)
            return weight * (states32 * torch.rsqrt(mean_square + eps)).to(states.dtype)
        # float32 states: the same in one call, without the two conversions (each op costs a dispatch, which
        # dominates at decode sizes); F.rms_norm computes it with the same float32 ops, bit for bit.
        return F.rms_norm(states, states.shape[-1:], weight, eps)

    def add_rms_norm(self, states: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        summed = states + residual
        return self.rms_norm(summed, weight, eps), summed

    def silu_and_mul(self, gate_up: Tensor) -> Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate, inplace=True).mul_(up)  # in place: no third [T, I] tensor

    def rotation(self, positions: Tensor, dtype: torch.dtype) -> Rotation:
        angles = positions.to(torch.float32)[:, None] * self.inverse_frequencies[None, :]  # [T, D / 2]
        angles = torch.cat((angles, angles), dim=-1)  # [T, D]
        sin = angles.sin()
        sin[:, : sin.shape[1] // 2].neg_()  # the sign of rotate-half's negated half, folded into its sines
        return _TorchRotation(self, angles.cos().to(dtype), sin.to(dtype))


class _TorchRotation:
    """Rotates by one step's cos rows and signed sin rows [T, D] in the states' dtype (the two halves of a head form
    the pairs): x cos + (-x2, x1) sin as x cos + (x2, x1) (-sin1, sin2), the same products bit for bit in fewer ops."""

    def __init__(self, ops: TorchDecoderOps, cos: Tensor, signed_sin: Tensor) -> None:
        self.ops = ops
        self.cos, self.signed_sin = cos[:, None, :], signed_sin[:, None, :]  # [T, 1, D], broadcast over the heads

    def apply(self, query: Tensor, key: Tensor, head_norms: HeadNormWeights | None) -> tuple[Tensor, Tensor]:
        if head_norms is not None:
            query = self.ops.rms_norm(query, head_norms.query_weight, head_norms.eps)
            key = self.ops.rms_norm(key, head_norms.key_weight, head_norms.eps)
        return self._rotate(query), self._rotate(key)

    def _rotate(self, states: Tensor) -> Tensor:
        """states [T, heads, D] rotated by the per-token angles."""
        swapped = states.roll(states.shape[-1] // 2, dims=-1)  # (x2, x1) [T, heads, D]
        return states * self.cos + swapped * self.signed_sin
