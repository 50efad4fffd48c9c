"""Paged decode attention over a TKV cache: one q' per sequence against its whole context, codes decoded in
registers tile by tile (flash-decoding, split-K over long contexts).

The launch mirrors the bf16 kernel (decode_attention.py): a program takes one (sequence, kv head, split), the
GQA group's query heads are the rows of one tile, and partial results (normalized output + log-sum-exp) of
several splits are combined by the bf16 path's merge kernel. What differs is what a tile reads: K and V codes
(bits/8 bytes per channel) plus fp16 group scales and zeros, decoded as zero + code * scale into the compute
dtype right before the dot; positions below sink_tokens are one extra tile read from the fp16 sink pool by
whichever split holds them, and the query's exact window (its own block and the E - 1 before it, at or after
sink_tokens; E from the tail's shape) one more fp16 tile per block, exact (docs/tkv.md): its earlier positions from the
sequence's tail slot (a ring of E blocks), the new token from this step's exact buffer, read by the split holding
the window's first such position; the coded tiles stop at the window's first block start.
q' arrives pre-rotated and divided by s_k, the output stays in the value code space.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from arbi_kernels.attention_core import LOG2_E
from arbi_kernels.checks import (
    float32_output,
    next_power_of_two,
    require_dtype,
    require_num_warps,
    require_positive_scale,
    require_same_device,
    require_shape,
    require_tile_size,
    require_unit_last_stride,
)
from arbi_kernels.decode_attention import (
    MAX_SPLITS,
    MIN_TOKENS_PER_SPLIT,
    _decode_merge_kernel,
    launch_splits,
    split_range,
)
from arbi_kernels.device import multiprocessor_count
from arbi_kernels.pdl import pdl_launch_options, wait_for_previous_kernel
from arbi_kernels.tkv_core import (
    accumulate_tile_values,
    attend_decoded_tile,
    attend_sink_tile,
    attend_tile,
    code_channels,
    decode_vectors,
    load_coded_vectors,
    operand_channels,
    operand_order,
    paged_blocks,
)
from arbi_kernels.tkv_layout import (
    TkvLayerTensors,
    compute_precision,
    metadata_pair_view,
    packed_code_view,
    require_compute_dtype,
    sink_tile_size,
    triton_dtype,
    validate_tkv_layer,
)
from arbi_kernels.tkv_folded_decode import _tkv_folded_decode_kernel, folded_heads
from arbi_kernels.tkv_exact import (
    exact_window_blocks,
    load_window_tile,
    tail_tile_size,
    validate_exact_inputs,
    window_start,
)

RESIDENT_PROGRAMS_PER_SM = 4  # default tiles on sm_90: 128 registers x 128 threads, four to the 64K register file
SPLIT_OVERHEAD_TILES = 3  # what a program costs beside its tiles (query, exact window, partial out), in tiles


def choose_tkv_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int, num_sms: int) -> int:
    """The splits (none shorter than MIN_TOKENS_PER_SPLIT tokens) of least modelled time: waves of
    RESIDENT_PROGRAMS_PER_SM programs per SM, each as long as the longest program (the most tiles of
    DEFAULT_TKV_DECODE_TILES a split gets, plus SPLIT_OVERHEAD_TILES), a last partial wave as long as a full one;
    the fewest splits among equals.

    Checked on the H200 (K4V4, Llama's 8 kv heads, 132 SMs, split sweeps at 32k, 2026-12-04): batch 32 takes 2
    splits (512 programs, one wave; 0.623 ms, 4 to 8 splits 0.620-0.627, 3 0.747), batch 8 takes 8 (one wave;
    0.172 ms against 0.175 at 16 and 0.239 at 4), batch 1 takes 64 (eight tiles each; 0.0375 ms, where 66 splits,
    whose longest programs still read eight tiles, took 0.0415)."""
    tiles = triton.cdiv(max(max_seq_len, 1), DEFAULT_TKV_DECODE_TILES.block_n)
    wave = RESIDENT_PROGRAMS_PER_SM * num_sms
    programs = num_seqs * num_kv_heads
    most = max(1, min(triton.cdiv(max(max_seq_len, 1), MIN_TOKENS_PER_SPLIT), MAX_SPLITS))

    def modelled_time(splits: int) -> int:
        return triton.cdiv(programs * splits, wave) * (triton.cdiv(tiles, splits) + SPLIT_OVERHEAD_TILES)

    return min(range(1, most + 1), key=modelled_time)


@dataclass(frozen=True)
class TkvDecodeTiles:
    """Launch shape of the TKV decode kernel: context tokens per loop step, warps, Triton's software-pipeline
    depth (num_stages: its pipeliner stages the block-id, code and metadata loads through shared memory), and
    `prefetch`: the kernel itself loads the next tile's codes, scales and zeros into registers before decoding this
    one (meant with num_stages=1). max_registers caps registers per thread (ptxas spills the rest) so that more
    programs fit an SM: None lets the compiler choose. mask_words predicates every packed-word load on its position
    being a coded one, as the kernel first did; by default only the block ids, scales and zeros are masked (a
    position outside the split reads block 0's words, which decode to 0 with a scale and zero of 0): on sm_90 that
    takes the default tile from 149 to 128 registers, 3 to 4 programs per SM (benchmarks/tkv_kernels.py --decode-only).
    ptx_nibbles: 4-bit words made float16 by inline PTX (tkv_core.nibble_words_as_halves) in compiled kernels with
    float16 compute (elsewhere, and for other widths, the flag changes nothing). transposed_dots: scores as
    (k @ q^T)^T and the value sum as (v^T @ p^T)^T (tkv_core.attend_tile), Hopper warpgroup MMAs at block_n 64 and
    4 warps. window_blocks: blocks of the exact window read per fp16 tile (at most the window's; one tile per block
    by default: a whole 4-block window in one 64-row tile of float32 rows took the kernel from 1.04 to 1.32 ms at
    batch 32, 32k, on the H200). The field defaults are the plain kernel; the wrapper's default is
    DEFAULT_TKV_DECODE_TILES. folded_scales: the kernel of tkv_folded_decode.py instead (codes enter both dots bare,
    the group scales and zeros are folded into them; block_n, warps, stages, max_registers and ptx_nibbles apply, the
    other options do not)."""

    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 3
    prefetch: bool = False
    max_registers: int | None = None
    mask_words: bool = False
    ptx_nibbles: bool = False
    transposed_dots: bool = False
    window_blocks: int = 1
    folded_scales: bool = False

    def __post_init__(self) -> None:
        require_tile_size("block_n", self.block_n)
        if self.window_blocks < 1:
            raise ValueError(f"window_blocks: must be >= 1, got {self.window_blocks}")
        require_num_warps(self.num_warps)
        if self.num_stages < 1:
            raise ValueError(f"num_stages: must be >= 1, got {self.num_stages}")
        if self.max_registers is not None and not 24 <= self.max_registers <= 255:
            raise ValueError(f"max_registers: must be in [24, 255] or None, got {self.max_registers}")


DEFAULT_TKV_DECODE_TILES = TkvDecodeTiles(64, 4, 2, ptx_nibbles=True, transposed_dots=True, max_registers=128)
"""What tkv_paged_decode_attention launches without `tiles`: both options, 2 stages, registers capped at 128 (no
spills, four programs to an SM). H200, K4V4, batch 32, 32k context (benchmarks/tkv_kernels.py --decode-only,
2026-12-04): 0.622 ms at 2 splits against bf16's 0.967; 96 registers (five programs, 64 bytes spilled) took 0.666
ms at 5 splits, 3 stages (four programs) 0.69."""


@triton.jit
def _attend_window_tile(q, seq, seq_len, tile_start, tail_slots_ptr, kv_head, num_kv_heads, m_i, l_i, acc,
                        key_tail_ptr, value_tail_ptr, key_exact_ptr, value_exact_ptr,
                        stride_exact_token, stride_exact_head, SINK_TOKENS: tl.constexpr, WINDOW_ROWS: tl.constexpr,
                        TAIL_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
                        EXACT_BLOCKS: tl.constexpr, DOT_PRECISION: tl.constexpr, TRANSPOSED_DOTS: tl.constexpr):
    """Fold WINDOW_ROWS positions of the exact window from tile_start (load_window_tile), exact, into
    (m_i, l_i, acc)."""
    k, v, exact = load_window_tile(seq, seq_len, tile_start, tl.load(tail_slots_ptr + seq), kv_head, num_kv_heads,
                                   key_tail_ptr, value_tail_ptr, key_exact_ptr, value_exact_ptr, stride_exact_token,
                                   stride_exact_head, SINK_TOKENS, WINDOW_ROWS, TAIL_PAD, HEAD_DIM, PAGE_SIZE,
                                   EXACT_BLOCKS)
    m_i, l_i, acc, p = attend_tile(q, k.to(q.dtype), exact[None, :], m_i, l_i, acc, True, DOT_PRECISION,
                                   TRANSPOSED_DOTS)
    return m_i, l_i, accumulate_tile_values(acc, p, v.to(q.dtype), DOT_PRECISION, TRANSPOSED_DOTS)


@triton.jit
def _attend_coded_tile(q, tokens, coded, block_table_row, kv_head, num_kv_heads, m_i, l_tile, acc,
                       key_codes_ptr, key_metadata_ptr, value_codes_ptr, value_metadata_ptr, KEY_BITS: tl.constexpr,
                       VALUE_BITS: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
                       DOT_PRECISION: tl.constexpr, MASK_WORDS: tl.constexpr, TRANSPOSED_DOTS: tl.constexpr,
                       PTX_NIBBLES: tl.constexpr):
    """tkv_core.attend_coded_tile with the softmax sum kept per (head, tile column) in l_tile [M, N], rescaled but
    not reduced: the caller sums it once after the loop, so a tile makes one reduction across its warps (the max)
    where it made two (H200, K4V4, batch 32, 32k: 0.84 ms against 0.88)."""
    blocks, offsets = paged_blocks(block_table_row, tokens, coded, PAGE_SIZE), tokens % PAGE_SIZE
    words, scale, zero = load_coded_vectors(key_codes_ptr, key_metadata_ptr, blocks, offsets, kv_head, num_kv_heads,
                                            coded, KEY_BITS, HEAD_DIM, GROUP, PAGE_SIZE, MASK_WORDS)
    k = decode_vectors(words, scale, zero, KEY_BITS, HEAD_DIM, GROUP, q.dtype, PTX_NIBBLES)
    if TRANSPOSED_DOTS:  # q in operand_order, as attend_tile
        scores = tl.trans(tl.dot(operand_order(k), tl.trans(q), input_precision=DOT_PRECISION))  # [M, N], log2
    else:
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
    scores = tl.where(coded[None, :], scores, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(scores - m_new[:, None])
    l_tile = l_tile * alpha[:, None] + p
    words, scale, zero = load_coded_vectors(value_codes_ptr, value_metadata_ptr, blocks, offsets, kv_head,
                                            num_kv_heads, coded, VALUE_BITS, HEAD_DIM, GROUP, PAGE_SIZE, MASK_WORDS)
    v = decode_vectors(words, scale, zero, VALUE_BITS, HEAD_DIM, GROUP, q.dtype, PTX_NIBBLES)
    return m_new, l_tile, accumulate_tile_values(acc * alpha[:, None], p, v, DOT_PRECISION, TRANSPOSED_DOTS)


@triton.jit(do_not_specialize=["group_size", "num_kv_heads", "stride_bt_seq"])
def _tkv_decode_partition_kernel(
    q_ptr, key_codes_ptr, key_metadata_ptr, key_sink_ptr, key_tail_ptr, key_exact_ptr,
    value_codes_ptr, value_metadata_ptr, value_sink_ptr, value_tail_ptr, value_exact_ptr,
    block_tables_ptr, seq_lens_ptr, tail_slots_ptr, out_ptr, partial_out_ptr, partial_lse_ptr,
    qk_scale, group_size, num_kv_heads,
    stride_q_seq, stride_q_head, stride_bt_seq, stride_exact_token, stride_exact_head,
    stride_out_seq, stride_out_head,
    stride_po_seq, stride_po_head, stride_po_split,
    stride_pl_seq, stride_pl_head,
    KEY_BITS: tl.constexpr, VALUE_BITS: tl.constexpr, GROUP: tl.constexpr, SINK_TOKENS: tl.constexpr,
    SINK_PAD: tl.constexpr, WINDOW_ROWS: tl.constexpr, TAIL_PAD: tl.constexpr, GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr, EXACT_BLOCKS: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_SPLIT: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, PREFETCH: tl.constexpr, MASK_WORDS: tl.constexpr,
    TRANSPOSED_DOTS: tl.constexpr, PTX_NIBBLES: tl.constexpr, USE_PDL: tl.constexpr,
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
    # q' in and acc out in the decoded tiles' channel order (tkv_core.attend_tile)
    dims = operand_channels(HEAD_DIM) if TRANSPOSED_DOTS else code_channels(HEAD_DIM)
    q = tl.load(
        q_ptr + seq.to(tl.int64) * stride_q_seq + q_heads[:, None] * stride_q_head + dims[None, :],
        mask=row_valid[:, None], other=0.0,
    ).to(tl.float32)
    q = (q * qk_scale).to(COMPUTE_DTYPE)  # q: [GROUP_PAD, D], pre-scaled so fp16 keeps its range

    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    block_table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt_seq
    if SINK_TOKENS > 0:  # noqa: SIM102 (compile-time test around a run-time one)
        if split_start < tl.minimum(split_end, SINK_TOKENS):  # this split holds sink positions
            tokens = tl.arange(0, SINK_PAD)
            in_sink = (tokens >= split_start) & (tokens < split_end) & (tokens < SINK_TOKENS)
            m_i, l_i, acc = attend_sink_tile(
                q, tokens, in_sink[None, :], in_sink, block_table_row, kv_head, num_kv_heads, m_i, l_i, acc,
                key_sink_ptr, value_sink_ptr, SINK_TOKENS, HEAD_DIM, PAGE_SIZE, DOT_PRECISION, TRANSPOSED_DOTS,
            )
    first_block_start = window_start(tl.maximum(seq_len - 1, 0), PAGE_SIZE, EXACT_BLOCKS)  # exact from here on
    first_exact = tl.maximum(first_block_start, SINK_TOKENS)
    if (split_start <= first_exact) & (first_exact < split_end):  # this split holds the window's first exact position
        for tile_start in range(first_block_start, seq_len, WINDOW_ROWS):  # the window, WINDOW_ROWS at a time
            m_i, l_i, acc = _attend_window_tile(
                q, seq, seq_len, tile_start, tail_slots_ptr, kv_head, num_kv_heads, m_i, l_i, acc, key_tail_ptr,
                value_tail_ptr, key_exact_ptr, value_exact_ptr, stride_exact_token, stride_exact_head, SINK_TOKENS,
                WINDOW_ROWS, TAIL_PAD, HEAD_DIM, PAGE_SIZE, EXACT_BLOCKS, DOT_PRECISION, TRANSPOSED_DOTS,
            )
    coded_end = tl.minimum(split_end, first_block_start)

    if PREFETCH:  # tile t+1's codes, scales and zeros load while tile t decodes; block ids two tiles ahead
        tokens = split_start + tl.arange(0, BLOCK_N)
        coded = (tokens < coded_end) & (tokens >= SINK_TOKENS)
        blocks = paged_blocks(block_table_row, tokens, coded, PAGE_SIZE)
        key_words, key_scale, key_zero = load_coded_vectors(
            key_codes_ptr, key_metadata_ptr, blocks, tokens % PAGE_SIZE, kv_head, num_kv_heads, coded, KEY_BITS,
            HEAD_DIM, GROUP, PAGE_SIZE, MASK_WORDS)
        value_words, value_scale, value_zero = load_coded_vectors(
            value_codes_ptr, value_metadata_ptr, blocks, tokens % PAGE_SIZE, kv_head, num_kv_heads, coded,
            VALUE_BITS, HEAD_DIM, GROUP, PAGE_SIZE, MASK_WORDS)
        next_blocks = paged_blocks(block_table_row, tokens + BLOCK_N, tokens + BLOCK_N < coded_end, PAGE_SIZE)
        for _ in range(split_start, coded_end, BLOCK_N):
            next_tokens = tokens + BLOCK_N
            next_coded = (next_tokens < coded_end) & (next_tokens >= SINK_TOKENS)
            next_key_words, next_key_scale, next_key_zero = load_coded_vectors(
                key_codes_ptr, key_metadata_ptr, next_blocks, next_tokens % PAGE_SIZE, kv_head, num_kv_heads,
                next_coded, KEY_BITS, HEAD_DIM, GROUP, PAGE_SIZE, MASK_WORDS)
            next_value_words, next_value_scale, next_value_zero = load_coded_vectors(
                value_codes_ptr, value_metadata_ptr, next_blocks, next_tokens % PAGE_SIZE, kv_head, num_kv_heads,
                next_coded, VALUE_BITS, HEAD_DIM, GROUP, PAGE_SIZE, MASK_WORDS)
            next_blocks = paged_blocks(block_table_row, next_tokens + BLOCK_N, next_tokens + BLOCK_N < coded_end,
                                       PAGE_SIZE)
            m_i, l_i, acc = attend_decoded_tile(
                q, coded[None, :], key_words, key_scale, key_zero, value_words, value_scale, value_zero,
                m_i, l_i, acc, KEY_BITS, VALUE_BITS, GROUP, HEAD_DIM, DOT_PRECISION, TRANSPOSED_DOTS, PTX_NIBBLES,
            )
            tokens, coded = next_tokens, next_coded
            key_words, key_scale, key_zero = next_key_words, next_key_scale, next_key_zero
            value_words, value_scale, value_zero = next_value_words, next_value_scale, next_value_zero
    else:
        m_before = m_i
        l_tile = tl.zeros([GROUP_PAD, BLOCK_N], dtype=tl.float32)  # per-column sums, reduced after the loop
        for tile_start in range(split_start, coded_end, BLOCK_N):
            tokens = tile_start + tl.arange(0, BLOCK_N)
            coded = (tokens < coded_end) & (tokens >= SINK_TOKENS)
            m_i, l_tile, acc = _attend_coded_tile(
                q, tokens, coded, block_table_row, kv_head, num_kv_heads, m_i, l_tile, acc,
                key_codes_ptr, key_metadata_ptr, value_codes_ptr, value_metadata_ptr, KEY_BITS, VALUE_BITS,
                GROUP, HEAD_DIM, PAGE_SIZE, DOT_PRECISION, MASK_WORDS, TRANSPOSED_DOTS, PTX_NIBBLES,
            )
        shift = tl.where(m_before == float("-inf"), 0.0, tl.exp2(m_before - m_i))  # the loop's rescaling of l_i
        l_i = l_i * shift + tl.sum(l_tile, axis=1)

    has_tokens = l_i > 0.0  # an empty split (past seq_len) contributes nothing
    normalized = acc / tl.where(has_tokens, l_i, 1.0)[:, None]  # [GROUP_PAD, D]
    if SINGLE_SPLIT:
        out_ptrs = out_ptr + seq.to(tl.int64) * stride_out_seq + q_heads[:, None] * stride_out_head + dims[None, :]
        tl.store(out_ptrs, normalized, mask=row_valid[:, None])
    else:
        head_base = seq.to(tl.int64) * stride_po_seq + q_heads * stride_po_head + split * stride_po_split
        tl.store(partial_out_ptr + head_base[:, None] + dims[None, :], normalized, mask=row_valid[:, None])
        lse = tl.where(has_tokens, m_i + tl.log2(tl.where(has_tokens, l_i, 1.0)), float("-inf"))
        lse_ptrs = partial_lse_ptr + seq.to(tl.int64) * stride_pl_seq + q_heads * stride_pl_head + split
        tl.store(lse_ptrs, lse, mask=row_valid)


def tkv_paged_decode_attention(
    query: torch.Tensor,
    layer: TkvLayerTensors,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    tail_slots: torch.Tensor,
    key_exact: torch.Tensor,
    value_exact: torch.Tensor,
    softmax_scale: float,
    max_seq_len: int | None = None,
    num_splits: int | None = None,
    tiles: TkvDecodeTiles = DEFAULT_TKV_DECODE_TILES,
    compute_dtype: torch.dtype = torch.float16,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention acc [B, Hq, D] (float32, value code space) of q' [B, Hq, D] over each sequence's first
    seq_lens[b] positions of `layer`'s TKV pools (the new token already written by write_tkv_cache), the
    query's exact window (its own block and the E - 1 before it, E = exact_window_blocks(layer)) read exact
    (docs/tkv.md): tail_slots [B] int32 names each sequence's tail slot, key_exact / value_exact fp16 [B, Hkv, D]
    (write_tkv_cache's result) hold row b's new token.

    query: q' = (H q) / s_k in float32, float16 or bfloat16; block_tables [B, max_blocks] int32; seq_lens [B]
    int32 (0 gives a zero row and reads nothing). max_seq_len / num_splits: as paged_decode_attention (pass either
    to make no host sync, e.g. under a CUDA graph), except that num_splits=None picks choose_tkv_num_splits.
    tiles: the launch shape (TkvDecodeTiles; benchmarks/tkv_kernels.py --sweep and --decode-only time others).
    compute_dtype: the dtype decoded tiles and q' enter the dots in (float16: tensor cores, float32: exact
    products, slow). out: where to write acc (float32 [B, Hq, D], e.g. the decode rows' slice of a mixed step's
    output), else a new tensor.
    """
    _, page_size, num_kv_heads, head_dim = validate_tkv_layer(layer)
    exact_blocks = exact_window_blocks(layer)
    window_rows = min(tiles.window_blocks, exact_blocks) * page_size
    require_compute_dtype(compute_dtype)
    require_dtype("query", query, (torch.float32, torch.float16, torch.bfloat16))
    require_shape("query", query, {"num_seqs": seq_lens.shape[0], "num_heads": None, "head_dim": head_dim})
    require_unit_last_stride("query", query)
    num_seqs, num_heads, _ = query.shape
    if num_heads % num_kv_heads:
        raise ValueError(f"query: num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")
    require_dtype("seq_lens", seq_lens, (torch.int32,))
    require_unit_last_stride("seq_lens", seq_lens)
    require_dtype("block_tables", block_tables, (torch.int32,))
    require_shape("block_tables", block_tables, {"num_seqs": num_seqs, "max_blocks_per_seq": None})
    require_unit_last_stride("block_tables", block_tables)
    require_positive_scale("softmax_scale", softmax_scale)
    validate_exact_inputs(key_exact, value_exact, tail_slots, num_seqs, num_seqs, num_kv_heads, head_dim)
    require_same_device({"query": query, "layer": layer.key_codes, "block_tables": block_tables, "seq_lens": seq_lens,
                         "tail_slots": tail_slots, "key_exact": key_exact, "value_exact": value_exact})
    output = float32_output("out", out, tuple(query.shape), query.device)
    if num_seqs == 0:
        return output
    num_splits = launch_splits(num_splits, max_seq_len, seq_lens, lambda bound: choose_tkv_num_splits(
        num_seqs, num_kv_heads, bound, multiprocessor_count(query.device)))

    single_split = num_splits == 1
    partial_out = torch.empty(
        (num_seqs, num_heads, num_splits, head_dim) if not single_split else (1, 1, 1, 1),
        dtype=torch.float32, device=query.device,
    )
    partial_lse = torch.empty(
        (num_seqs, num_heads, num_splits) if not single_split else (1, 1, 1), dtype=torch.float32,
        device=query.device,
    )
    pools = (query, packed_code_view(layer.key_codes, layer.key_bits), metadata_pair_view(layer.key_metadata),
             layer.key_sink, layer.key_tail, key_exact,
             packed_code_view(layer.value_codes, layer.value_bits), metadata_pair_view(layer.value_metadata),
             layer.value_sink, layer.value_tail, value_exact,
             block_tables, seq_lens, tail_slots, output, partial_out, partial_lse,
             softmax_scale * LOG2_E, num_heads // num_kv_heads, num_kv_heads,
             query.stride(0), query.stride(1), block_tables.stride(0), key_exact.stride(0), key_exact.stride(1),
             output.stride(0), output.stride(1),
             partial_out.stride(0), partial_out.stride(1), partial_out.stride(2),
             partial_lse.stride(0), partial_lse.stride(1))
    shared = dict(KEY_BITS=layer.key_bits, VALUE_BITS=layer.value_bits, GROUP=layer.group_size,
                  SINK_TOKENS=layer.sink_tokens, SINK_PAD=sink_tile_size(layer.sink_tokens),
                  WINDOW_ROWS=window_rows, TAIL_PAD=tail_tile_size(window_rows), HEAD_DIM=head_dim,
                  PAGE_SIZE=page_size, EXACT_BLOCKS=exact_blocks, BLOCK_N=tiles.block_n, SINGLE_SPLIT=single_split,
                  COMPUTE_DTYPE=triton_dtype(compute_dtype), DOT_PRECISION=compute_precision(compute_dtype),
                  PTX_NIBBLES=tiles.ptx_nibbles,
                  num_warps=tiles.num_warps, num_stages=tiles.num_stages, maxnreg=tiles.max_registers,
                  **pdl_launch_options(query.device))
    grid = (num_seqs, num_kv_heads, num_splits)
    if tiles.folded_scales:
        _tkv_folded_decode_kernel[grid](*pools, HEADS=folded_heads(num_heads // num_kv_heads, head_dim // layer.group_size),
                                        **shared)
    else:
        _tkv_decode_partition_kernel[grid](
            *pools, GROUP_PAD=max(16, next_power_of_two(num_heads // num_kv_heads)), PREFETCH=tiles.prefetch,
            MASK_WORDS=tiles.mask_words, TRANSPOSED_DOTS=tiles.transposed_dots, **shared)
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
