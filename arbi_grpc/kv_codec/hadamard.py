"""The normalized Walsh-Hadamard rotation TKV applies to every head vector before quantizing it.

The rotation spreads outlier channels over all channels of a block so per-group ranges even out. It is
orthonormal and symmetric, hence its own inverse: `hadamard_rotate(hadamard_rotate(x)) == x`. For a head_dim
that is not a power of two it is block-diagonal, with blocks of the largest power of two dividing head_dim.
"""

from __future__ import annotations

import torch

from arbi_grpc.errors import InvalidArgumentError

MIN_ROTATION_BLOCK = 8
"""Smaller blocks barely spread outliers; such head dims are refused rather than silently weakened."""


def rotation_block_size(head_dim: int) -> int:
    """The Hadamard block length used for `head_dim`: its largest power-of-two divisor."""
    if head_dim < 1:
        raise InvalidArgumentError("head_dim", f"must be positive, got {head_dim}")
    block = head_dim & -head_dim
    if block < MIN_ROTATION_BLOCK:
        raise NotImplementedError(
            f"TKV Hadamard rotation needs head_dim divisible by {MIN_ROTATION_BLOCK} "
            f"(block-diagonal rotation over power-of-two blocks); head_dim {head_dim} only allows blocks of {block}"
        )
    return block


def hadamard_rotate(x: torch.Tensor) -> torch.Tensor:
    """Apply the normalized (block) Walsh-Hadamard transform along the last dim; returns a new tensor.

    Fast butterfly: log2(block) passes of adds/subtracts, computed in fp32 and returned in x's dtype.
    """
    head_dim = x.shape[-1]
    block = rotation_block_size(head_dim)
    lead_shape = x.shape[:-1]
    y = x.to(torch.float32).reshape(-1, head_dim // block, block)  # y: [N, blocks, B]
    half = 1
    while half < block:
        pairs = y.view(y.shape[0], y.shape[1], block // (2 * half), 2, half)  # [N, blocks, B/2h, 2, h]
        low, high = pairs[..., 0, :], pairs[..., 1, :]
        y = torch.stack((low + high, low - high), dim=-2).view(y.shape[0], y.shape[1], block)
        half *= 2
    y = y * (block**-0.5)
    return y.reshape(*lead_shape, head_dim).to(x.dtype)


def hadamard_matrix(head_dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The dense [head_dim, head_dim] matrix of `hadamard_rotate` (rows are its images of the unit vectors)."""
    return hadamard_rotate(torch.eye(head_dim, dtype=torch.float32)).to(dtype)
