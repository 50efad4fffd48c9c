"""The position-wise building blocks of the decoder: RMSNorm (with the fused residual add) and the SwiGLU
feed-forward network. On CUDA they run arbi_kernels' fused Triton kernels; elsewhere plain torch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last axis, computed in float32 like the HF reference."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, states: Tensor) -> Tensor:
        if states.is_cuda and states.dim() == 2:
            from arbi_kernels import rms_norm

            return rms_norm(states, self.weight, self.eps)[0]
        states32 = states.to(torch.float32)
        mean_square = states32.pow(2).mean(dim=-1, keepdim=True)
        return self.weight * (states32 * torch.rsqrt(mean_square + self.eps)).to(states.dtype)

    def add_and_norm(self, states: Tensor, residual: Tensor) -> tuple[Tensor, Tensor]:
        """(norm(states + residual), states + residual): the residual stream's next value and its norm."""
        if states.is_cuda:
            from arbi_kernels import rms_norm

            return rms_norm(states, self.weight, self.eps, residual)
        summed = states + residual
        return self(summed), summed


class SwiGLUMLP(nn.Module):
    """down(silu(gate(x)) * up(x)), bias-free, with HF parameter names.

    After `fuse_projections` the gate and up weights are views into one [2I, H] matrix, multiplied at once.
    """

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.gate_up_weight: Tensor | None = None

    def fuse_projections(self) -> None:
        self.gate_up_weight = fuse_linear_weights(self.gate_proj, self.up_proj)[0]

    def forward(self, states: Tensor) -> Tensor:
        if self.gate_up_weight is None:
            raise RuntimeError("SwiGLUMLP: call CausalLM.fuse_projections() once the weights are loaded")
        gate_up = project(states, self.gate_up_weight)  # [T, 2I]
        if gate_up.is_cuda:
            from arbi_kernels import silu_and_mul

            return project(silu_and_mul(gate_up), self.down_proj.weight)
        gate, up = gate_up.chunk(2, dim=-1)
        return self.down_proj(F.silu(gate, inplace=True).mul_(up))  # in place: no third [T, I] tensor


def project(states: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """states [T, in] @ weight[out, in].T (+ bias). One-row CUDA inputs (batch-1 decode) of a shape the skinny
    Triton kernel was tuned for read the weights faster through it than through cuBLAS; all else is F.linear."""
    if states.is_cuda and states.dim() == 2 and states.shape[0] == 1:
        from arbi_kernels.skinny_matmul import has_tuned_tiles, skinny_matmul

        if has_tuned_tiles(1, weight.shape[0], weight.shape[1], weight.dtype) and states.dtype == weight.dtype:
            return skinny_matmul(states, weight, bias)
    return F.linear(states, weight, bias)


def fuse_linear_weights(*layers: nn.Linear) -> tuple[Tensor, Tensor | None]:
    """Concatenate the layers' weights (and biases) along the output axis into one new tensor, and re-point
    each layer's parameters at its slice, so the checkpoint names stay valid and nothing is held twice.
    """
    with torch.no_grad():
        weight = torch.cat([layer.weight for layer in layers])
        has_bias = [layer.bias is not None for layer in layers]
        if any(has_bias) and not all(has_bias):
            raise ValueError("fuse_linear_weights: either every layer has a bias or none")
        bias = torch.cat([layer.bias for layer in layers]) if all(has_bias) else None
        start = 0
        for layer in layers:
            rows = layer.weight.shape[0]
            layer.weight = nn.Parameter(weight[start: start + rows], requires_grad=False)
            if bias is not None:
                layer.bias = nn.Parameter(bias[start: start + rows], requires_grad=False)
            start += rows
    return weight, bias
