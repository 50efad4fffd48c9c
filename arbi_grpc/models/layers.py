"""The position-wise building blocks of the decoder: RMSNorm and the SwiGLU feed-forward network."""

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
        states32 = states.to(torch.float32)
        mean_square = states32.pow(2).mean(dim=-1, keepdim=True)
        return self.weight * (states32 * torch.rsqrt(mean_square + self.eps)).to(states.dtype)


class SwiGLUMLP(nn.Module):
    """down(silu(gate(x)) * up(x)), bias-free, with HF parameter names."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, states: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(states)) * self.up_proj(states))
