"""Rotary position embeddings in the half-split layout of HF checkpoints, with optional Llama 3.1 scaling."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from arbi_grpc.models.config import Llama3RopeScaling, ModelConfig


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

    def cos_sin(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """positions [T] -> (cos, sin), each [T, head_dim], computed in float32 then cast to `dtype`."""
        angles = positions.to(torch.float32)[:, None] * self.inverse_frequencies[None, :]  # [T, D / 2]
        angles = torch.cat((angles, angles), dim=-1)  # [T, D]
        return angles.cos().to(dtype), angles.sin().to(dtype)


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
