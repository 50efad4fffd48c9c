"""Paged decode attention: one new query per sequence against its whole cached context (flash-decoding).

Each program takes one (sequence, kv head, split): the query heads of that kv head's GQA group form the rows
of one tile, so K/V are read once per group. Long contexts are cut into `num_splits` partitions (each sequence by
its own length: `split_range`) whose partial results (normalized output + log-sum-exp) a second kernel merges; with
one split the first kernel writes the final output directly.
"""

from __future__ import annotations

from collections.abc import Callable
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
    next_power_of_two,
    require_num_warps,
    require_shape,
    require_tile_size,
)
from arbi_kernels.device import multiprocessor_count
from arbi_kernels.pdl import pdl_launch_options, wait_for_previous_kernel

MIN_TOKENS_PER_SPLIT = 256
MAX_SPLITS = 256
MERGE_SPLITS = tl.constexpr(16)  # partial outputs the merge kernel folds a loop step
PROGRAMS_PER_SM = 8  # from split-count sweeps on an H200, see docs/kernels.md


@dataclass(frozen=True)
class DecodeTiles:
    """Launch shape of the decode kernel: context tokens per loop step and warps per program."""

    block_n: int = 64
    num_warps: int = 4

    def __post_init__(self) -> None:
        require_tile_size("block_n", self.block_n)
        require_num_warps(self.num_warps)


@triton.jit
def split_range(seq_len, BLOCK_N: tl.constexpr):
    """[start, end) of this program's split (axis 2 of the grid, tl.num_programs(2) splits) of a sequence of
    seq_len positions: whole BLOCK_N tiles, as equal as they go. Cut by the sequence's own length, not the launch's
    bound, so that a short sequence in a launch sized for long ones (a CUDA graph captured at max_model_len) still
    spreads over every split."""
    per_split = tl.cdiv(tl.cdiv(seq_len, tl.num_programs(2)), BLOCK_N) * BLOCK_N
    start = tl.program_id(2) * per_split
    return start, tl.minimum(start + per_split, seq_len)


@triton.jit(do_not_specialize=["group_size", "stride_bt_seq"])
def _decode_partition_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr,
    out_ptr, partial_out_ptr, partial_lse_ptr,
    qk_scale, group_size,
    stride_q_seq, stride_q_head,
    stride_cache_block, stride_cache_slot, stride_cache_head,
    stride_bt_seq,
    stride_out_seq, stride_out_head,
    stride_po_seq, stride_po_head, stride_po_split,
    stride_pl_seq, stride_pl_head,
    GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr, DOT_PRECISION: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    wait_for_previous_kernel(USE_PDL)
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    split_start, split_end = split_range(seq_len, BLOCK_N)

    rows = tl.arange(0, GROUP_PAD)
    row_valid = rows < group_size
    q_heads = kv_head * group_size + rows  # [GROUP_PAD] query heads of this kv head's group
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(
        q_ptr + seq.to(tl.int64) * stride_q_seq + q_heads[:, None] * stride_q_head + dims[None, :],
        mask=row_valid[:, None], other=0.0,
    )  # q: [GROUP_PAD, D]

    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    block_table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt_seq
    head_offset = kv_head * stride_cache_head
    for tile_start in range(split_start, split_end, BLOCK_N):
        tokens = tile_start + tl.arange(0, BLOCK_N)
        token_valid = tokens < split_end
        rows_offsets = paged_token_offsets(
            block_table_row, tokens, token_valid, stride_cache_block, stride_cache_slot, PAGE_SIZE
        )
        kv_offsets = rows_offsets[:, None] + head_offset + dims[None, :]  # [BLOCK_N, D]
        k = tl.load(k_cache_ptr + kv_offsets, mask=token_valid[:, None], other=0.0)
        v = tl.load(v_cache_ptr + kv_offsets, mask=token_valid[:, None], other=0.0)
        m_i, l_i, acc = online_softmax_step(
            q, k, v, token_valid[None, :], m_i, l_i, acc, qk_scale, True, DOT_PRECISION
        )

    has_tokens = l_i > 0.0  # an empty split (past seq_len) contributes nothing
    normalized = acc / tl.where(has_tokens, l_i, 1.0)[:, None]  # [GROUP_PAD, D]
    if SINGLE_SPLIT:
        out_ptrs = out_ptr + seq.to(tl.int64) * stride_out_seq + q_heads[:, None] * stride_out_head + dims[None, :]
        tl.store(out_ptrs, normalized.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])
    else:
        head_base = seq.to(tl.int64) * stride_po_seq + q_heads * stride_po_head + split * stride_po_split
        tl.store(partial_out_ptr + head_base[:, None] + dims[None, :], normalized, mask=row_valid[:, None])
        lse = tl.where(has_tokens, m_i + tl.log2(tl.where(has_tokens, l_i, 1.0)), float("-inf"))
        lse_ptrs = partial_lse_ptr + seq.to(tl.int64) * stride_pl_seq + q_heads * stride_pl_head + split
        tl.store(lse_ptrs, lse, mask=row_valid)


@triton.jit(do_not_specialize=["num_splits"])
def _decode_merge_kernel(
    partial_out_ptr, partial_lse_ptr, out_ptr, num_splits,
    stride_po_seq, stride_po_head, stride_po_split,
    stride_pl_seq, stride_pl_head,
    stride_out_seq, stride_out_head,
    HEAD_DIM: tl.constexpr, USE_PDL: tl.constexpr,
):
    """out = the splits' partial outputs weighted by their softmax mass, MERGE_SPLITS splits a loop step (so one
    compiled kernel serves every split count): the largest log-sum-exp first, then the weighted sums."""
    wait_for_previous_kernel(USE_PDL)
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    lse_row = partial_lse_ptr + seq * stride_pl_seq + head * stride_pl_head
    out_row = partial_out_ptr + seq * stride_po_seq + head * stride_po_head
    dims = tl.arange(0, HEAD_DIM)
    lse_max = float("-inf")
    for first in range(0, num_splits, MERGE_SPLITS):
        splits = first + tl.arange(0, MERGE_SPLITS)
        lse = tl.load(lse_row + splits, mask=splits < num_splits, other=float("-inf"))  # log2 units
        lse_max = tl.maximum(lse_max, tl.max(lse, axis=0))
    lse_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)  # every split empty: a zero row
    total = 0.0
    merged = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for first in range(0, num_splits, MERGE_SPLITS):
        splits = first + tl.arange(0, MERGE_SPLITS)
        split_valid = splits < num_splits
        weights = tl.exp2(tl.load(lse_row + splits, mask=split_valid, other=float("-inf")) - lse_max)
        partial = tl.load(out_row + splits[:, None] * stride_po_split + dims[None, :], mask=split_valid[:, None],
                          other=0.0)  # [MERGE_SPLITS, D]
        total += tl.sum(weights, axis=0)
        merged += tl.sum(partial * weights[:, None], axis=0)
    merged = merged / tl.where(total > 0.0, total, 1.0)
    tl.store(out_ptr + seq * stride_out_seq + head * stride_out_head + dims, merged.to(out_ptr.dtype.element_ty))


def launch_splits(num_splits: int | None, max_seq_len: int | None, seq_lens: torch.Tensor,
                  choose: Callable[[int], int]) -> int:
    """A decode launch's split count: num_splits when given, else `choose(max_seq_len)`, reading the bound from
    seq_lens (a device sync) only then; refuses a negative bound and a count outside [1, MAX_SPLITS]."""
    if max_seq_len is not None and max_seq_len < 0:
        raise ValueError(f"max_seq_len: must be >= 0, got {max_seq_len}")
    if num_splits is None:
        num_splits = choose(int(seq_lens.max().item()) if max_seq_len is None else max_seq_len)
    if not 1 <= num_splits <= MAX_SPLITS:
        raise ValueError(f"num_splits: must be in [1, {MAX_SPLITS}], got {num_splits}")
    return num_splits


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int, num_sms: int) -> int:
    """The most partitions that keep every SM at no more than PROGRAMS_PER_SM programs, none shorter than 256
    tokens. Rounded down: a batch that already has nearly that many (sequence, kv head) programs runs best
    unsplit (batch 128 at 512 tokens, 8 kv heads: 0.079 ms unsplit against 0.091 ms in 2 splits on an H200)."""
    useful = triton.cdiv(max(max_seq_len, 1), MIN_TOKENS_PER_SPLIT)
    wanted = PROGRAMS_PER_SM * num_sms // (num_seqs * num_kv_heads)
    return max(1, min(useful, wanted, MAX_SPLITS))


def paged_decode_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
    max_seq_len: int | None = None,
    num_splits: int | None = None,
    tiles: DecodeTiles = DecodeTiles(),
) -> torch.Tensor:
    """Attention output [B, Hq, D] for query [B, Hq, D] over each sequence's first seq_lens[b] cached tokens.

    key_cache/value_cache: [num_blocks, block_size, Hkv, D] (the new token's K/V already written);
    block_tables: [B, max_blocks] int32; seq_lens: [B] int32 (0 gives a zero output row).
    max_seq_len: an upper bound on seq_lens, from which num_splits=None chooses the split count (each sequence's
    splits are cut from its own length); None reads it from seq_lens, a device sync, when num_splits is None too.
    num_splits: None picks one from the GPU's size; pass it to pin the launch shape (CUDA graphs).
    tiles: the kernel's tile shape (a tuning knob; the default suits head_dim 64 and 128).
    """
    validate_paged_attention(query, key_cache, value_cache, block_tables, seq_lens, softmax_scale)
    require_shape("query", query, {"num_seqs": seq_lens.shape[0], "num_heads": None, "head_dim": None})
    num_seqs, num_heads, head_dim = query.shape
    page_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    output = torch.empty_like(query)
    if num_seqs == 0:
        return output
    num_splits = launch_splits(num_splits, max_seq_len, seq_lens, lambda bound: choose_num_splits(
        num_seqs, num_kv_heads, bound, multiprocessor_count(query.device)))

    group_size = num_heads // num_kv_heads
    single_split = num_splits == 1
    partial_out = torch.empty(
        (num_seqs, num_heads, num_splits, head_dim) if not single_split else (1, 1, 1, 1),
        dtype=torch.float32, device=query.device,
    )
    partial_lse = torch.empty(
        (num_seqs, num_heads, num_splits) if not single_split else (1, 1, 1), dtype=torch.float32,
        device=query.device,
    )
    _decode_partition_kernel[(num_seqs, num_kv_heads, num_splits)](
        query, key_cache, value_cache, block_tables, seq_lens,
        output, partial_out, partial_lse,
        softmax_scale * LOG2_E, group_size,
        query.stride(0), query.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        block_tables.stride(0),
        output.stride(0), output.stride(1),
        partial_out.stride(0), partial_out.stride(1), partial_out.stride(2),
        partial_lse.stride(0), partial_lse.stride(1),
        GROUP_PAD=max(16, next_power_of_two(group_size)), HEAD_DIM=head_dim, PAGE_SIZE=page_size,
        BLOCK_N=tiles.block_n, SINGLE_SPLIT=single_split, DOT_PRECISION=dot_precision(query.dtype),
        num_warps=tiles.num_warps, **pdl_launch_options(query.device),
    )
    if not single_split:
        _decode_merge_kernel[(num_seqs, num_heads)](
            partial_out, partial_lse, output, num_splits,
            partial_out.stride(0), partial_out.stride(1), partial_out.stride(2),
            partial_lse.stride(0), partial_lse.stride(1),
            output.stride(0), output.stride(1),
            HEAD_DIM=head_dim, num_warps=4,
            **pdl_launch_options(query.device),
        )
    return output
