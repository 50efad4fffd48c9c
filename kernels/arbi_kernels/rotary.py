"""Rotary position embedding, neox/HF style (the two halves of the rotated dims form the pairs), applied in
place to query and key, optionally after a per-head RMSNorm of each (Qwen3's q_norm/k_norm); plus the cos/sin
cache it reads.

One program per token normalizes and rotates all of its query and key heads with the cos/sin row of its
position, so a layer's query/key preparation is one launch.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from arbi_kernels.checks import (
    FLOAT_DTYPES,
    next_power_of_two,
    require_dtype,
    require_same_device,
    require_same_dtype,
    require_shape,
    require_unit_last_stride,
)
from arbi_kernels.pdl import pdl_launch_options, wait_for_previous_kernel


class HeadNorms(NamedTuple):
    """Per-head RMSNorm applied to query and key before the rotation: weights [head_dim] each."""

    query_weight: torch.Tensor
    key_weight: torch.Tensor
    eps: float


def build_rotary_cache(
    max_position: int, rotary_dim: int, base: float, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each float32 [max_position, rotary_dim // 2], for inverse frequencies base^(-2i/rotary_dim)."""
    if max_position < 1:
        raise ValueError(f"max_position: must be >= 1, got {max_position}")
    if rotary_dim < 2 or rotary_dim % 2 != 0:
        raise ValueError(f"rotary_dim: must be a positive even number, got {rotary_dim}")
    if not base > 1.0:
        raise ValueError(f"base: must be > 1, got {base}")
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=device) / rotary_dim
    inverse_frequencies = base ** -exponents  # [rotary_dim // 2]
    positions = torch.arange(max_position, dtype=torch.float64, device=device)
    angles = torch.outer(positions, inverse_frequencies)  # [max_position, rotary_dim // 2]
    return torch.cos(angles).float(), torch.sin(angles).float()


@triton.jit
def _rotate_heads(row_ptr, stride_head, num_heads, cos, sin, norm_weight_ptr, eps, HEADS_PAD: tl.constexpr,
                  HALF: tl.constexpr, HALF_PAD: tl.constexpr, HAS_NORM: tl.constexpr):
    """Rotate dims [0, 2*HALF) of num_heads heads starting at row_ptr; cos/sin: [1, HALF_PAD] float32.

    With HAS_NORM each head is first RMS-normalized over its 2*HALF dims (the whole head) and scaled by the
    weight at norm_weight_ptr, in float32, rounded once with the rotation."""
    heads = tl.arange(0, HEADS_PAD)
    pairs = tl.arange(0, HALF_PAD)
    mask = (heads[:, None] < num_heads) & (pairs[None, :] < HALF)
    first_ptrs = row_ptr + heads[:, None] * stride_head + pairs[None, :]  # [HEADS_PAD, HALF_PAD]
    first = tl.load(first_ptrs, mask=mask, other=0.0).to(tl.float32)
    second = tl.load(first_ptrs + HALF, mask=mask, other=0.0).to(tl.float32)
    if HAS_NORM:
        mean_square = (tl.sum(first * first, axis=1) + tl.sum(second * second, axis=1)) / (2 * HALF)
        inverse_rms = tl.rsqrt(mean_square + eps)[:, None]  # [HEADS_PAD, 1]
        pair_valid = pairs < HALF
        first_weight = tl.load(norm_weight_ptr + pairs, mask=pair_valid, other=0.0).to(tl.float32)
        second_weight = tl.load(norm_weight_ptr + HALF + pairs, mask=pair_valid, other=0.0).to(tl.float32)
        first = first * inverse_rms * first_weight[None, :]
        second = second * inverse_rms * second_weight[None, :]
    element_type = row_ptr.dtype.element_ty
    tl.store(first_ptrs, (first * cos - second * sin).to(element_type), mask=mask)
    tl.store(first_ptrs + HALF, (second * cos + first * sin).to(element_type), mask=mask)


@triton.jit(do_not_specialize=["num_heads", "num_kv_heads"])
def _rotary_kernel(
    positions_ptr, query_ptr, key_ptr, cos_ptr, sin_ptr, query_norm_ptr, key_norm_ptr, norm_eps,
    num_heads, num_kv_heads,
    stride_query_token, stride_query_head, stride_key_token, stride_key_head, stride_cos_position,
    stride_sin_position,
    HEADS_PAD: tl.constexpr, KV_HEADS_PAD: tl.constexpr, HALF: tl.constexpr, HALF_PAD: tl.constexpr,
    HAS_NORM: tl.constexpr, USE_PDL: tl.constexpr,
):
    wait_for_previous_kernel(USE_PDL)
    token = tl.program_id(0).to(tl.int64)
    position = tl.load(positions_ptr + token).to(tl.int64)
    pairs = tl.arange(0, HALF_PAD)
    pair_valid = pairs < HALF
    cos = tl.load(cos_ptr + position * stride_cos_position + pairs, mask=pair_valid, other=0.0)
    sin = tl.load(sin_ptr + position * stride_sin_position + pairs, mask=pair_valid, other=0.0)
    cos = cos.to(tl.float32)[None, :]  # [1, HALF_PAD]
    sin = sin.to(tl.float32)[None, :]
    _rotate_heads(query_ptr + token * stride_query_token, stride_query_head, num_heads, cos, sin,
                  query_norm_ptr, norm_eps, HEADS_PAD, HALF, HALF_PAD, HAS_NORM)
    _rotate_heads(key_ptr + token * stride_key_token, stride_key_head, num_kv_heads, cos, sin,
                  key_norm_ptr, norm_eps, KV_HEADS_PAD, HALF, HALF_PAD, HAS_NORM)


def apply_rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_cache: torch.Tensor,
    sin_cache: torch.Tensor,
    head_norms: HeadNorms | None = None,
) -> None:
    """Rotate query [T, Hq, D] and key [T, Hkv, D] in place at positions [T] (int32 or int64).

    cos_cache/sin_cache: [max_position, rotary_dim // 2] (see build_rotary_cache); dims past rotary_dim are
    left alone. query/key may be strided views (e.g. of a fused QKV output) with a contiguous last dim.
    With `head_norms`, every head is RMS-normalized (float32 statistics) and scaled by its weight first; that
    needs rotary_dim == D. Positions past the cache are not checked (that would need a device sync).
    """
    require_dtype("query", query, FLOAT_DTYPES)
    require_shape("query", query, {"num_tokens": None, "num_heads": None, "head_dim": None})
    num_tokens, num_heads, head_dim = query.shape
    require_shape("key", key, {"num_tokens": num_tokens, "num_kv_heads": None, "head_dim": head_dim})
    require_same_dtype("key", key, "query", query)
    require_unit_last_stride("query", query)
    require_unit_last_stride("key", key)
    require_dtype("positions", positions, (torch.int32, torch.int64))
    require_shape("positions", positions, {"num_tokens": num_tokens})
    require_unit_last_stride("positions", positions)
    require_dtype("cos_cache", cos_cache, FLOAT_DTYPES)
    require_shape("cos_cache", cos_cache, {"max_position": None, "rotary_dim_half": None})
    require_shape("sin_cache", sin_cache, dict(zip(("max_position", "rotary_dim_half"), cos_cache.shape)))
    require_same_dtype("sin_cache", sin_cache, "cos_cache", cos_cache)
    require_unit_last_stride("cos_cache", cos_cache)
    require_unit_last_stride("sin_cache", sin_cache)
    half = cos_cache.shape[1]
    if not 1 <= 2 * half <= head_dim:
        raise ValueError(f"cos_cache: rotary_dim 2 * {half} must be in [2, head_dim={head_dim}]")
    tensors = {"positions": positions, "query": query, "key": key, "cos_cache": cos_cache, "sin_cache": sin_cache}
    if head_norms is not None:
        if 2 * half != head_dim:
            raise NotImplementedError(
                f"head_norms: a per-head norm fused with partial rotary (rotary_dim {2 * half} < head_dim "
                f"{head_dim}) is not implemented"
            )
        for name, weight in (("query_weight", head_norms.query_weight), ("key_weight", head_norms.key_weight)):
            require_dtype(name, weight, FLOAT_DTYPES)
            require_shape(name, weight, {"head_dim": head_dim})
            require_unit_last_stride(name, weight)
            tensors[name] = weight
        if not head_norms.eps > 0.0:
            raise ValueError(f"head_norms.eps: must be positive, got {head_norms.eps}")
    require_same_device(tensors)
    if num_tokens == 0:
        return
    num_kv_heads = key.shape[1]
    query_norm, key_norm, norm_eps = head_norms if head_norms is not None else (query, key, 1.0)
    _rotary_kernel[(num_tokens,)](
        positions, query, key, cos_cache, sin_cache, query_norm, key_norm, norm_eps,
        num_heads, num_kv_heads,
        query.stride(0), query.stride(1), key.stride(0), key.stride(1), cos_cache.stride(0), sin_cache.stride(0),
        HEADS_PAD=next_power_of_two(num_heads), KV_HEADS_PAD=next_power_of_two(num_kv_heads), HALF=half,
        HALF_PAD=next_power_of_two(half), HAS_NORM=head_norms is not None, num_warps=4,
        **pdl_launch_options(query.device),
    )
