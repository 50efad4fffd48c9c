"""What the paged decode and prefill attention kernels share: their argument validation and two Triton
building blocks.

`paged_token_offsets` turns context positions into element offsets through a block table; `online_softmax_step`
folds one K/V tile into a running (max, sum, accumulator) triple, as its two halves `online_softmax_update`
(scores) and `accumulate_values` (values), which the TKV kernels call apart. Scores live in the log2 domain:
callers pass `qk_scale = softmax_scale * log2(e)` and use exp2, which is cheaper than exp.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from arbi_kernels.checks import (
    FLOAT_DTYPES,
    require_dtype,
    require_head_dim,
    require_paged_cache,
    require_positive_scale,
    require_same_device,
    require_shape,
    require_unit_last_stride,
)

LOG2_E = math.log2(math.e)


def dot_precision(dtype: torch.dtype) -> str:
    """float32 inputs get exact products (TF32 would lose ~3 digits); 16-bit inputs ignore the setting."""
    return "ieee" if dtype == torch.float32 else "tf32"


def validate_paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
) -> None:
    """Checks shared by decode and prefill: query [rows, Hq, D] against caches, block tables and seq_lens."""
    require_dtype("query", query, FLOAT_DTYPES)
    require_shape("query", query, {"num_rows": None, "num_heads": None, "head_dim": None})
    require_unit_last_stride("query", query)
    require_paged_cache(key_cache, value_cache, query.dtype)
    num_heads, head_dim = query.shape[1], query.shape[2]
    num_kv_heads = key_cache.shape[2]
    if key_cache.shape[3] != head_dim:
        raise ValueError(f"key_cache: head_dim must equal query's {head_dim}, got {key_cache.shape[3]}")
    if num_heads % num_kv_heads != 0:
        raise ValueError(f"query: num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")
    require_head_dim("query", head_dim)
    require_dtype("seq_lens", seq_lens, (torch.int32,))
    require_shape("seq_lens", seq_lens, {"num_seqs": None})
    require_unit_last_stride("seq_lens", seq_lens)
    require_dtype("block_tables", block_tables, (torch.int32,))
    require_shape("block_tables", block_tables, {"num_seqs": seq_lens.shape[0], "max_blocks_per_seq": None})
    require_unit_last_stride("block_tables", block_tables)
    require_positive_scale("softmax_scale", softmax_scale)
    require_same_device(
        {"query": query, "key_cache": key_cache, "value_cache": value_cache, "block_tables": block_tables,
         "seq_lens": seq_lens}
    )


@triton.jit
def paged_token_offsets(block_table_ptr, tokens, token_valid, stride_block, stride_slot, PAGE_SIZE: tl.constexpr):
    """Element offset of each token's row in a [num_blocks, PAGE_SIZE, Hkv, D] cache (head 0, dim 0)."""
    # tokens: [N] positions within one sequence; block_table_ptr points at that sequence's row
    block_ids = tl.load(block_table_ptr + tokens // PAGE_SIZE, mask=token_valid, other=0).to(tl.int64)
    return block_ids * stride_block + (tokens % PAGE_SIZE) * stride_slot  # [N] int64


@triton.jit
def online_softmax_step(
    q, k, v, visible, m_i, l_i, acc, qk_scale, APPLY_MASK: tl.constexpr, DOT_PRECISION: tl.constexpr
):
    """One flash-attention update. q: [M, D], k/v: [N, D], visible: [M, N] or broadcastable (read only
    when APPLY_MASK). Every row must see at least one key of the tile, or of an earlier tile."""
    scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # [M, N], log2 units
    m_i, l_i, acc, p = online_softmax_update(scores, visible, m_i, l_i, acc, APPLY_MASK)
    return m_i, l_i, accumulate_values(acc, p, v, DOT_PRECISION)  # acc: [M, D]


@triton.jit
def online_softmax_update(scores, visible, m_i, l_i, acc, APPLY_MASK: tl.constexpr):
    """The score half of an update: fold scores [M, N] (log2 units; -inf where not `visible` if APPLY_MASK) into
    the running max and sum: returns the new (m_i, l_i), acc rescaled, and the weights p [M, N]."""
    if APPLY_MASK:
        scores = tl.where(visible, scores, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))  # [M]
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(scores - m_new[:, None])  # [M, N]
    return m_new, l_i * alpha + tl.sum(p, axis=1), acc * alpha[:, None], p


@triton.jit
def accumulate_values(acc, p, v, DOT_PRECISION: tl.constexpr, TRANSPOSED_DOTS: tl.constexpr = False):
    """The value half: acc + p @ v, p taken in v's dtype. TRANSPOSED_DOTS computes it as (v^T @ p^T)^T
    (tkv_core.attend_tile says when that is faster)."""
    if TRANSPOSED_DOTS:
        return tl.trans(tl.dot(tl.trans(v), tl.trans(p.to(v.dtype)), tl.trans(acc), input_precision=DOT_PRECISION))
    return acc + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
