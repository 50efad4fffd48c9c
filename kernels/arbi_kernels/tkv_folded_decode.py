"""Paged decode attention over a TKV cache with the group scales and zeros folded into the dot products: a coded
tile enters both tensor-core dots as its bare integer codes, and no value is ever dequantized.

A code decodes as zero + code * scale per (token, group of G channels). Folding it:
- keys: score[r, t] = sum_g scale[t, g] * (q_r restricted to group g) . codes[t] + zero[t, g] * sum(q_r over g).
  The dot runs once against a block-diagonal query, one row per (group g, head r): q_fold [NG * RP, D] holds
  q_r's group-g channels and zeros elsewhere, so codes [N, D] @ q_fold^T gives every per-group dot in one MMA of
  N = NG * RP columns (4 groups x 4 heads = 16 for Llama-3-8B: the width the unfolded kernel pads its 4 heads to).
- values: out[r, d] = sum_t p[r, t] * scale[t, g(d)] * codes[t, d] + sum_t p[r, t] * zero[t, g(d)]. The weights
  enter the value dot once per (g, r), as p[r, t] * scale[t, g]; the dot's row (g, r) is kept only at group g's
  channels when the program ends, and the zero term is a running sum beside it.
Exact tiles (sinks, the exact window) take the same path with scale 1 and zero 0. The coded loop keeps the softmax
sum and the zero term as per-token partial sums (rescaled, never reduced across the tile's warps) and reduces
them once after the loop.

The grid, splits, sink and window rules and the split merge are those of tkv_decode_attention.py, whose wrapper
launches this kernel for TkvDecodeTiles(folded_scales=True).
"""

from __future__ import annotations

import triton
import triton.language as tl

from arbi_kernels.decode_attention import split_range
from arbi_kernels.pdl import wait_for_previous_kernel
from arbi_kernels.tkv_core import (
    INTERPRETED,
    code_channels,
    codes_as_floats,
    load_coded_vectors,
    load_sink_tile,
    nibble_words_as_halves,
    operand_channels,
    operand_order,
    paged_blocks,
    sink_vectors,
    unpack_words,
)
from arbi_kernels.tkv_exact import load_window_tile, window_start


def folded_heads(group_size: int, num_groups: int) -> int:
    """HEADS, the query heads a folded dot holds per channel group: the group's heads padded to a power of two,
    and to 16 // num_groups so that the dots are at least 16 wide."""
    return max(triton.next_power_of_2(group_size), triton.cdiv(16, num_groups))


@triton.jit
def decode_codes(words, BITS: tl.constexpr, HEAD_DIM: tl.constexpr, DTYPE: tl.constexpr, PTX_NIBBLES: tl.constexpr):
    """[N, D] codes c as exact DTYPE floats, channels in code_channels order (4-bit words by inline PTX where
    PTX_NIBBLES and compiled, else by unpack_words): in float16 as 1024 + c, which costs no instruction to make (the
    code OR-ed into the mantissa of 1024; biased_zeros takes the 1024 back out per group); in float32 as c, since
    products with 2**23 + c would round."""
    if BITS == 4 and PTX_NIBBLES and DTYPE == tl.float16 and not INTERPRETED:
        codes = nibble_words_as_halves(words, HEAD_DIM, BIASED=True)
    elif DTYPE == tl.float16:
        codes = (unpack_words(words, BITS, HEAD_DIM).to(tl.int16) | 0x6400).to(tl.float16, bitcast=True)
    else:
        codes = codes_as_floats(unpack_words(words, BITS, HEAD_DIM), DTYPE)
    return codes


@triton.jit
def biased_zeros(scale, zero, BIAS: tl.constexpr):
    """float32 [N, NG]: the zero of codes decoded with a bias: (c + BIAS) * scale + zero - BIAS * scale."""
    return zero.to(tl.float32) - BIAS * scale.to(tl.float32)


@triton.jit
def fold_rows(rows, HEADS: tl.constexpr):
    """[N, NG * HEADS] -> [N, NG, HEADS]: column g * HEADS + r is (group g, head r)."""
    return tl.reshape(rows, [rows.shape[0], rows.shape[1] // HEADS, HEADS])


@triton.jit
def folded_scores(k, q_fold, q_sums, scale, zero, HEADS: tl.constexpr, SCALED: tl.constexpr,
                  DOT_PRECISION: tl.constexpr):
    """Scores [N, HEADS] (log2 units) of key tile k [N, D]: codes (decode_codes) with their scale and float32
    zero [N, NG] (biased_zeros) where SCALED, or exact rows. q_fold [NG * HEADS, D] the block-diagonal query, q_sums [NG * HEADS] its row sums."""
    dots = fold_rows(tl.dot(operand_order(k), tl.trans(q_fold), input_precision=DOT_PRECISION), HEADS)
    if SCALED:
        sums = tl.reshape(q_sums, [1, q_sums.shape[0] // HEADS, HEADS])
        dots = dots * scale.to(tl.float32)[:, :, None] + zero[:, :, None] * sums
    return tl.sum(dots, axis=1)


@triton.jit
def spread_heads(x, NG: tl.constexpr):
    """[HEADS] -> [NG * HEADS]: entry g * HEADS + r holds x[r] for every group g."""
    return tl.reshape(tl.broadcast_to(x[None, :], [NG, x.shape[0]]), [NG * x.shape[0]])


@triton.jit
def spread_head_columns(x, NG: tl.constexpr):
    """[N, HEADS] -> [N, NG * HEADS]: column g * HEADS + r holds x[:, r] for every group g."""
    return tl.reshape(tl.broadcast_to(x[:, None, :], [x.shape[0], NG, x.shape[1]]), [x.shape[0], NG * x.shape[1]])


@triton.jit
def softmax_weights(scores, visible, m_i):
    """Scores [N, HEADS] -> (m_new [HEADS], alpha = exp2(m_i - m_new), p [N, HEADS]), -inf where not visible."""
    scores = tl.where(visible, scores, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(scores, axis=0))
    return m_new, tl.exp2(m_i - m_new), tl.exp2(scores - m_new[None, :])


@triton.jit
def attend_exact_rows(k, v, visible, q_fold, q_sums, m_i, l_i, acc, HEADS: tl.constexpr, NG: tl.constexpr,
                      DOT_PRECISION: tl.constexpr):
    """Fold exact code-space rows k, v [N, D] (where `visible` [N, 1]) into (m_i, l_i [HEADS], acc [D, NG * HEADS])."""
    scores = folded_scores(k.to(q_fold.dtype), q_fold, q_sums, q_sums, q_sums, HEADS, False, DOT_PRECISION)
    m_i, alpha, p = softmax_weights(scores, visible, m_i)
    weights = spread_head_columns(p, NG).to(q_fold.dtype)  # [N, NG * HEADS]
    acc = acc * spread_heads(alpha, NG)[None, :] + tl.dot(tl.trans(v.to(q_fold.dtype)), weights,
                                                           input_precision=DOT_PRECISION)
    return m_i, l_i * alpha + tl.sum(p, axis=0), acc


@triton.jit(do_not_specialize=["group_size", "num_kv_heads", "stride_bt_seq"])
def _tkv_folded_decode_kernel(
    q_ptr, key_codes_ptr, key_metadata_ptr, key_sink_ptr, key_tail_ptr, key_exact_ptr,
    value_codes_ptr, value_metadata_ptr, value_sink_ptr, value_tail_ptr, value_exact_ptr,
    block_tables_ptr, seq_lens_ptr, tail_slots_ptr, out_ptr, partial_out_ptr, partial_lse_ptr,
    qk_scale, group_size, num_kv_heads,
    stride_q_seq, stride_q_head, stride_bt_seq, stride_exact_token, stride_exact_head,
    stride_out_seq, stride_out_head,
    stride_po_seq, stride_po_head, stride_po_split,
    stride_pl_seq, stride_pl_head,
    KEY_BITS: tl.constexpr, VALUE_BITS: tl.constexpr, GROUP: tl.constexpr, SINK_TOKENS: tl.constexpr,
    SINK_PAD: tl.constexpr, WINDOW_ROWS: tl.constexpr, TAIL_PAD: tl.constexpr, HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, EXACT_BLOCKS: tl.constexpr, BLOCK_N: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr, COMPUTE_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, PTX_NIBBLES: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    wait_for_previous_kernel(USE_PDL)
    NG: tl.constexpr = HEAD_DIM // GROUP
    BIAS: tl.constexpr = 1024.0 if COMPUTE_DTYPE == tl.float16 else 0.0  # what decode_codes adds to a code
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    split_start, split_end = split_range(seq_len, BLOCK_N)

    dims = code_channels(HEAD_DIM)  # the output in the decoded value tiles' channel order
    q_dims = operand_channels(HEAD_DIM)  # q' in the key tiles' order (folded_scores)
    folded = tl.arange(0, NG * HEADS)  # column g * HEADS + r: group g of head r
    fold_head = folded % HEADS
    q = tl.load(q_ptr + seq.to(tl.int64) * stride_q_seq + (kv_head * group_size + fold_head)[:, None] * stride_q_head
                + q_dims[None, :], mask=(fold_head < group_size)[:, None], other=0.0).to(tl.float32)
    in_group = (q_dims // GROUP)[None, :] == (folded // HEADS)[:, None]
    q_fold = tl.where(in_group, q * qk_scale, 0.0).to(COMPUTE_DTYPE)  # [NG * HEADS, D], pre-scaled
    q_sums = tl.sum(q_fold.to(tl.float32), axis=1)  # [NG * HEADS]

    m_i = tl.full([HEADS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([HEADS], dtype=tl.float32)
    zeros_i = tl.zeros([NG * HEADS], dtype=tl.float32)  # sum_t p[r, t] * value zero[t, g]
    acc = tl.zeros([HEAD_DIM, NG * HEADS], dtype=tl.float32)  # sum_t codes[t, d] * p[r, t] * value scale[t, g]
    block_table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt_seq
    if SINK_TOKENS > 0:  # noqa: SIM102 (compile-time test around a run-time one)
        if split_start < tl.minimum(split_end, SINK_TOKENS):  # this split holds sink positions
            tokens = tl.arange(0, SINK_PAD)
            in_sink = (tokens >= split_start) & (tokens < split_end) & (tokens < SINK_TOKENS)
            vectors = sink_vectors(block_table_row, tokens, in_sink, kv_head, num_kv_heads, SINK_TOKENS, PAGE_SIZE)
            m_i, l_i, acc = attend_exact_rows(
                load_sink_tile(key_sink_ptr, vectors, in_sink, HEAD_DIM),
                load_sink_tile(value_sink_ptr, vectors, in_sink, HEAD_DIM), in_sink[:, None], q_fold, q_sums,
                m_i, l_i, acc, HEADS, NG, DOT_PRECISION)
    first_block_start = window_start(tl.maximum(seq_len - 1, 0), PAGE_SIZE, EXACT_BLOCKS)  # exact from here on
    first_exact = tl.maximum(first_block_start, SINK_TOKENS)
    if (split_start <= first_exact) & (first_exact < split_end):  # this split holds the window's first exact position
        tail_slot = tl.load(tail_slots_ptr + seq)
        for tile_start in range(first_block_start, seq_len, WINDOW_ROWS):  # the window, WINDOW_ROWS at a time
            k, v, exact = load_window_tile(seq, seq_len, tile_start, tail_slot, kv_head, num_kv_heads, key_tail_ptr,
                                           value_tail_ptr, key_exact_ptr, value_exact_ptr, stride_exact_token,
                                           stride_exact_head, SINK_TOKENS, WINDOW_ROWS, TAIL_PAD, HEAD_DIM,
                                           PAGE_SIZE, EXACT_BLOCKS)
            m_i, l_i, acc = attend_exact_rows(k, v, exact[:, None], q_fold, q_sums, m_i, l_i, acc, HEADS, NG,
                                              DOT_PRECISION)
    coded_end = tl.minimum(split_end, first_block_start)

    m_before = m_i
    l_partial = tl.zeros([BLOCK_N, HEADS], dtype=tl.float32)  # per-token partial sums, reduced after the loop
    zeros_partial = tl.zeros([BLOCK_N, NG * HEADS], dtype=tl.float32)
    for tile_start in range(split_start, coded_end, BLOCK_N):
        tokens = tile_start + tl.arange(0, BLOCK_N)
        coded = (tokens < coded_end) & (tokens >= SINK_TOKENS)
        blocks, offsets = paged_blocks(block_table_row, tokens, coded, PAGE_SIZE), tokens % PAGE_SIZE
        words, scale, zero = load_coded_vectors(key_codes_ptr, key_metadata_ptr, blocks, offsets, kv_head,
                                                num_kv_heads, coded, KEY_BITS, HEAD_DIM, GROUP, PAGE_SIZE, False)
        keys = decode_codes(words, KEY_BITS, HEAD_DIM, COMPUTE_DTYPE, PTX_NIBBLES)
        scores = folded_scores(keys, q_fold, q_sums, scale, biased_zeros(scale, zero, BIAS), HEADS, True,
                               DOT_PRECISION)
        m_i, alpha, p = softmax_weights(scores, coded[:, None], m_i)
        l_partial = l_partial * alpha[None, :] + p
        words, scale, zero = load_coded_vectors(value_codes_ptr, value_metadata_ptr, blocks, offsets, kv_head,
                                                num_kv_heads, coded, VALUE_BITS, HEAD_DIM, GROUP, PAGE_SIZE, False)
        spread_alpha = spread_heads(alpha, NG)[None, :]
        weights = tl.reshape(p[:, None, :] * scale.to(tl.float32)[:, :, None], [BLOCK_N, NG * HEADS])
        weights = weights.to(COMPUTE_DTYPE)  # the bias's share below is taken from these rounded weights
        codes = decode_codes(words, VALUE_BITS, HEAD_DIM, COMPUTE_DTYPE, PTX_NIBBLES)
        acc = acc * spread_alpha + tl.dot(tl.trans(codes), weights, input_precision=DOT_PRECISION)
        zero_share = tl.reshape(p[:, None, :] * zero.to(tl.float32)[:, :, None], [BLOCK_N, NG * HEADS])
        zeros_partial = zeros_partial * spread_alpha + zero_share - BIAS * weights.to(tl.float32)
    shift = tl.where(m_before == float("-inf"), 0.0, tl.exp2(m_before - m_i))  # the loop's rescaling of earlier sums
    l_i = l_i * shift + tl.sum(l_partial, axis=0)
    zeros_i = zeros_i * spread_heads(shift, NG) + tl.sum(zeros_partial, axis=0)

    # row (g, r) of acc counts only at group g's channels: out[r, d] = acc[d, (g(d), r)] + zeros_i[(g(d), r)]
    kept = fold_rows(acc + zeros_i[None, :], HEADS)  # [D, NG, HEADS]
    own_group = (tl.arange(0, HEAD_DIM) // GROUP)[:, None, None] == tl.arange(0, NG)[None, :, None]
    out = tl.trans(tl.sum(tl.where(own_group, kept, 0.0), axis=1))  # [HEADS, D]
    has_tokens = l_i > 0.0  # an empty split (past seq_len) contributes nothing
    normalized = out / tl.where(has_tokens, l_i, 1.0)[:, None]
    heads = tl.arange(0, HEADS)
    head_valid = heads < group_size
    q_heads = kv_head * group_size + heads
    if SINGLE_SPLIT:
        out_ptrs = out_ptr + seq.to(tl.int64) * stride_out_seq + q_heads[:, None] * stride_out_head + dims[None, :]
        tl.store(out_ptrs, normalized, mask=head_valid[:, None])
    else:
        head_base = seq.to(tl.int64) * stride_po_seq + q_heads * stride_po_head + split * stride_po_split
        tl.store(partial_out_ptr + head_base[:, None] + dims[None, :], normalized, mask=head_valid[:, None])
        lse = tl.where(has_tokens, m_i + tl.log2(tl.where(has_tokens, l_i, 1.0)), float("-inf"))
        lse_ptrs = partial_lse_ptr + seq.to(tl.int64) * stride_pl_seq + q_heads * stride_pl_head + split
        tl.store(lse_ptrs, lse, mask=head_valid)
