"""Paged prefill/extend attention: the new tokens of a varlen batch attend causally to their cached prefix
and to each other, reading every key and value through the block tables.

Each program takes BLOCK_M consecutive new queries of one sequence and one query head. Key tiles wholly
before the program's first query need no mask; only the tiles that reach the diagonal are masked.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from arbi_kernels.attention_core import (
    LOG2_E,
    dot_precision,
    online_softmax_step,
    paged_token_offsets,
    validate_paged_attention,
)
from arbi_kernels.checks import (
    require_dtype,
    require_num_warps,
    require_same_device,
    require_shape,
    require_tile_size,
    require_unit_last_stride,
)


@dataclass(frozen=True)
class PrefillTiles:
    """Launch shape of the prefill kernel: query rows and keys per tile, warps, software-pipeline depth."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int = 2

    def __post_init__(self) -> None:
        require_tile_size("block_m", self.block_m)
        require_tile_size("block_n", self.block_n)
        require_num_warps(self.num_warps)
        if self.num_stages < 1:
            raise ValueError(f"num_stages: must be >= 1, got {self.num_stages}")


def default_prefill_tiles(head_dim: int) -> PrefillTiles:
    """The fastest of the shapes timed on an H200 for head_dim 64 and 128 (docs/kernels.md); no spills on sm_90."""
    if head_dim <= 128:
        return PrefillTiles(block_m=64, block_n=64, num_warps=4)
    return PrefillTiles(block_m=64, block_n=32, num_warps=8)


@triton.jit(do_not_specialize=["group_size", "stride_bt_seq"])
def _prefill_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, query_start_loc_ptr, seq_lens_ptr, out_ptr,
    qk_scale, group_size,
    stride_q_token, stride_q_head,
    stride_cache_block, stride_cache_slot, stride_cache_head,
    stride_bt_seq,
    stride_out_token, stride_out_head,
    HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    query_tile = tl.program_id(0)
    seq = tl.program_id(1)
    q_head = tl.program_id(2)
    q_begin = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_begin
    tile_first_row = query_tile * BLOCK_M
    if tile_first_row >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    prefix_len = seq_len - q_len  # cached tokens before this step's queries

    rows = tile_first_row + tl.arange(0, BLOCK_M)
    row_valid = rows < q_len
    q_positions = prefix_len + rows  # [BLOCK_M] absolute positions of the queries
    dims = tl.arange(0, HEAD_DIM)
    token_rows = (q_begin + rows).to(tl.int64)
    q = tl.load(
        q_ptr + token_rows[:, None] * stride_q_token + q_head * stride_q_head + dims[None, :],
        mask=row_valid[:, None], other=0.0,
    )  # q: [BLOCK_M, D]

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    block_table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt_seq
    head_offset = (q_head // group_size) * stride_cache_head
    offsets_n = tl.arange(0, BLOCK_N)

    # Keys before the tile's first query are visible to all its rows: whole tiles of them go unmasked.
    unmasked_end = ((prefix_len + tile_first_row) // BLOCK_N) * BLOCK_N
    for tile_start in range(0, unmasked_end, BLOCK_N):
        keys = tile_start + offsets_n
        key_offsets = paged_token_offsets(
            block_table_row, keys, keys < unmasked_end, stride_cache_block, stride_cache_slot, PAGE_SIZE
        )
        kv_offsets = key_offsets[:, None] + head_offset + dims[None, :]  # [BLOCK_N, D]
        k = tl.load(k_cache_ptr + kv_offsets)
        v = tl.load(v_cache_ptr + kv_offsets)
        m_i, l_i, acc = online_softmax_step(q, k, v, row_valid[:, None], m_i, l_i, acc, qk_scale, False, DOT_PRECISION)

    # The rest up to the tile's last query: the causal mask applies. Key `unmasked_end` is visible to
    # every row (valid or not), so no row sees an all-masked tile.
    causal_end = tl.minimum(seq_len, prefix_len + tile_first_row + BLOCK_M)
    for tile_start in range(unmasked_end, causal_end, BLOCK_N):
        keys = tile_start + offsets_n
        key_valid = keys < seq_len
        key_offsets = paged_token_offsets(
            block_table_row, keys, key_valid, stride_cache_block, stride_cache_slot, PAGE_SIZE
        )
        kv_offsets = key_offsets[:, None] + head_offset + dims[None, :]  # [BLOCK_N, D]
        k = tl.load(k_cache_ptr + kv_offsets, mask=key_valid[:, None], other=0.0)
        v = tl.load(v_cache_ptr + kv_offsets, mask=key_valid[:, None], other=0.0)
        visible = (keys[None, :] <= q_positions[:, None]) & key_valid[None, :]  # [BLOCK_M, BLOCK_N]
        m_i, l_i, acc = online_softmax_step(q, k, v, visible, m_i, l_i, acc, qk_scale, True, DOT_PRECISION)

    output = acc / l_i[:, None]
    out_ptrs = out_ptr + token_rows[:, None] * stride_out_token + q_head * stride_out_head + dims[None, :]
    tl.store(out_ptrs, output.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])


def paged_prefill_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
    max_query_len: int | None = None,
    tiles: PrefillTiles | None = None,
) -> torch.Tensor:
    """Causal attention output [T, Hq, D] for the new tokens query [T, Hq, D] of a varlen batch.

    query_start_loc: [B+1] int32 offsets of each sequence's new tokens in `query`; seq_lens: [B] int32
    context length after this step. The new tokens' K/V must already be in the caches (write_kv_cache).
    max_query_len: an upper bound on the per-sequence new-token count; None reads it (a device sync).
    tiles: the kernel's tile shape; None takes default_prefill_tiles(head_dim).
    """
    validate_paged_attention(query, key_cache, value_cache, block_tables, seq_lens, softmax_scale)
    num_seqs = seq_lens.shape[0]
    require_dtype("query_start_loc", query_start_loc, (torch.int32,))
    require_shape("query_start_loc", query_start_loc, {"num_seqs_plus_one": num_seqs + 1})
    require_unit_last_stride("query_start_loc", query_start_loc)
    require_same_device({"query": query, "query_start_loc": query_start_loc})
    num_tokens, num_heads, head_dim = query.shape
    page_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    output = torch.empty_like(query)
    if num_tokens == 0 or num_seqs == 0:
        return output
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max().item())
    if not 0 <= max_query_len <= num_tokens:
        raise ValueError(f"max_query_len: must be in [0, num_tokens={num_tokens}], got {max_query_len}")
    if max_query_len == 0:
        return output

    tiles = tiles or default_prefill_tiles(head_dim)
    grid = (triton.cdiv(max_query_len, tiles.block_m), num_seqs, num_heads)
    _prefill_kernel[grid](
        query, key_cache, value_cache, block_tables, query_start_loc, seq_lens, output,
        softmax_scale * LOG2_E, num_heads // num_kv_heads,
        query.stride(0), query.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        block_tables.stride(0),
        output.stride(0), output.stride(1),
        HEAD_DIM=head_dim, PAGE_SIZE=page_size, BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n,
        DOT_PRECISION=dot_precision(query.dtype), num_warps=tiles.num_warps, num_stages=tiles.num_stages,
    )
    return output
