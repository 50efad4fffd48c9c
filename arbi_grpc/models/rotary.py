"""Rotary position embeddings in the half-split layout of HF checkpoints, with optional Llama 3.1 scaling.

On CUDA one Triton kernel rotates a layer's queries and keys in place from a cos/sin table of every position,
after Qwen3's per-head q/k norms when the model has them; elsewhere torch computes the step's cos/sin rows once
and each layer applies them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from arbi_grpc.models.config import Llama3RopeScaling, ModelConfig

if TYPE_CHECKING:
    from arbi_grpc.models.layers import RMSNorm


class RotaryEmbedding:
    """Turns token positions into the cos/sin tables that rotate queries and keys.

    The inverse frequencies are fixed at construction on `device`; they are not model weights.
    """

    def __init__(self, config: ModelConfig, device: torch.device | str) -> None:
        exponents = torch.arange(0, config.head_dim, 2, dtype=torch.float32, device=device) / config.head_dim
        inverse_frequencies = 1.0 / (config.rope_theta**exponents)  # [D / 2]
        if config.rope_scaling is not None:
            inverse_frequencies = llama3_scaled_frequencies(inverse_frequencies, config.rope_scaling)
        self.inverse_frequencies = inverse_frequencies
        self.max_positions = config.max_position_embeddings
        self._tables: tuple[Tensor, Tensor] | None = None  # CUDA: float32 cos, sin [max_positions, D / 2]

    def for_positions(self, positions: Tensor, dtype: torch.dtype) -> RotaryAngles:
        """The rotation of one step's tokens at positions [T], for states of `dtype`."""
        if positions.is_cuda:
            if self._tables is None:
                all_positions = torch.arange(self.max_positions, dtype=torch.float32, device=positions.device)
                angles = all_positions[:, None] * self.inverse_frequencies[None, :]  # [P, D / 2]
                self._tables = angles.cos(), angles.sin()
            return RotaryAngles(positions, None, None, self._tables)
        angles = positions.to(torch.float32)[:, None] * self.inverse_frequencies[None, :]  # [T, D / 2]
        angles = torch.cat((angles, angles), dim=-1)  # [T, D]
        return RotaryAngles(positions, angles.cos().to(dtype), angles.sin().to(dtype), None)


class RotaryAngles:
    """Rotates the queries and keys of one step's tokens: built once per forward pass, applied per layer."""

    def __init__(self, positions: Tensor, cos: Tensor | None, sin: Tensor | None,
                 tables: tuple[Tensor, Tensor] | None) -> None:
        self.positions = positions
        self.cos, self.sin = cos, sin  # [T, D] in the states' dtype (torch path)
        self.tables = tables  # float32 cos, sin [max_positions, D / 2] (CUDA kernel path)

    def apply(self, query: Tensor, key: Tensor, head_norms: tuple[RMSNorm, RMSNorm] | None = None
              ) -> tuple[Tensor, Tensor]:
        """query [T, H, D], key [T, Hkv, D] -> rotated (in place on CUDA, where they may be views).

        `head_norms` (the layer's q_norm and k_norm, Qwen3) normalize each head first; on CUDA in the same
        kernel as the rotation."""
        if self.tables is not None:
            from arbi_kernels import HeadNorms, apply_rotary_embedding

            norms = None
            if head_norms is not None:
                query_norm, key_norm = head_norms
                if query_norm.eps != key_norm.eps:
                    raise ValueError(f"q_norm eps {query_norm.eps} differs from k_norm eps {key_norm.eps}")
                norms = HeadNorms(query_norm.weight, key_norm.weight, query_norm.eps)
            apply_rotary_embedding(self.positions, query, key, *self.tables, head_norms=norms)
            return query, key
        if head_norms is not None:
            query, key = head_norms[0](query), head_norms[1](key)
        return apply_rotary(query, self.cos, self.sin), apply_rotary(key, self.cos, self.sin)


def llama3_scaled_frequencies(inverse_frequencies: Tensor, scaling: Llama3RopeScaling) -> Tensor:
    """Llama 3.1 scaling: keep short wavelengths, divide long ones by `factor`, blend smoothly in between."""
    wavelengths = 2 * math.pi / inverse_frequencies
    long_wavelength = scaling.original_max_position_embeddings / scaling.low_freq_factor
    short_wavelength = scaling.original_max_position_embeddings / scaling.high_freq_factor
    # Blend weight 1 at the short-wavelength edge, 0 at the long-wavelength edge.
    keep_weight = (scaling.original_max_position_embeddings / wavelengths - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    blended = (1 - keep_weight) * inverse_frequencies / scaling.factor + keep_weight * inverse_frequencies
    scaled = torch.where(wavelengths > long_wavelength, inverse_frequencies / scaling.factor, blended)
    return torch.where(wavelengths < short_wavelength, inverse_frequencies, scaled)


def apply_rotary(states: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate `states` [T, heads, D] by the per-token angles in `cos`/`sin` [T, D] (first half pairs with second)."""
    first_half, second_half = states.chunk(2, dim=-1)
    rotated_half = torch.cat((-second_half, first_half), dim=-1)  # [T, heads, D]
    return states * cos[:, None, :] + rotated_half * sin[:, None, :]
