"""KV write by slot (reshape_and_cache): scatter this step's K and V rows into the paged caches.

One program per token copies all of its kv heads; a negative slot (a padding token) is skipped.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from arbi_kernels.checks import (
    next_power_of_two,
    require_dtype,
    require_paged_cache,
    require_same_device,
    require_same_dtype,
    require_shape,
    require_unit_last_stride,
)
from arbi_kernels.pdl import pdl_launch_options, wait_for_previous_kernel


@triton.jit(do_not_specialize=["num_kv_heads"])
def _write_kv_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, slot_mapping_ptr,
    num_kv_heads,
    stride_key_token, stride_key_head, stride_value_token, stride_value_head,
    stride_cache_block, stride_cache_slot, stride_cache_head,
    HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, HEADS_PAD: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    wait_for_previous_kernel(USE_PDL)
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token)
    if slot < 0:
        return
    heads = tl.arange(0, HEADS_PAD)
    dims = tl.arange(0, HEAD_DIM)
    mask = (heads < num_kv_heads)[:, None]
    cache_offsets = (
        (slot // PAGE_SIZE) * stride_cache_block + (slot % PAGE_SIZE) * stride_cache_slot
        + heads[:, None] * stride_cache_head + dims[None, :]
    )  # [HEADS_PAD, D]
    key = tl.load(key_ptr + token * stride_key_token + heads[:, None] * stride_key_head + dims[None, :], mask=mask)
    tl.store(key_cache_ptr + cache_offsets, key, mask=mask)
    value = tl.load(
        value_ptr + token * stride_value_token + heads[:, None] * stride_value_head + dims[None, :], mask=mask
    )
    tl.store(value_cache_ptr + cache_offsets, value, mask=mask)


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write key/value [T, Hkv, D] into key_cache/value_cache [num_blocks, block_size, Hkv, D] in place.

    slot_mapping: [T] int64 flat slots (block_id * block_size + offset); a negative slot skips the token.
    Slots past the cache are not checked (that would need a device sync): the caller owns their range.
    """
    require_paged_cache(key_cache, value_cache, key_cache.dtype)
    _, page_size, num_kv_heads, head_dim = key_cache.shape
    if head_dim & (head_dim - 1) != 0:
        raise NotImplementedError(f"key_cache: head_dim must be a power of two, got {head_dim}")
    require_shape("key", key, {"num_tokens": None, "num_kv_heads": num_kv_heads, "head_dim": head_dim})
    require_shape("value", value, dict(zip(("num_tokens", "num_kv_heads", "head_dim"), key.shape)))
    require_same_dtype("key", key, "key_cache", key_cache)
    require_same_dtype("value", value, "key_cache", key_cache)
    require_unit_last_stride("key", key)
    require_unit_last_stride("value", value)
    require_dtype("slot_mapping", slot_mapping, (torch.int64,))
    require_shape("slot_mapping", slot_mapping, {"num_tokens": key.shape[0]})
    require_unit_last_stride("slot_mapping", slot_mapping)
    require_same_device(
        {"key": key, "value": value, "key_cache": key_cache, "value_cache": value_cache, "slot_mapping": slot_mapping}
    )
    num_tokens = key.shape[0]
    if num_tokens == 0:
        return
    _write_kv_kernel[(num_tokens,)](
        key, value, key_cache, value_cache, slot_mapping,
        num_kv_heads,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        HEAD_DIM=head_dim, PAGE_SIZE=page_size, HEADS_PAD=next_power_of_two(num_kv_heads), num_warps=4,
        **pdl_launch_options(key.device),
    )
