"""Paged prefill/extend attention over a TKV cache: the new tokens of a varlen batch attend causally to their
cached prefix and to each other, keys and values decoded from their codes in registers where the rule of the
call reads them coded (docs/tkv.md, "Exact window"), exact in the code space elsewhere: this step's tokens from the
exact buffers write_tkv_cache returns, earlier ones from the sequence's tail slot (a ring of E blocks; E from the
tail's shape). Two rules:

- `chunk_exact=True` (the engine's default): every query of a chunk reads the chunk's own tokens and the exact
  window of its first query (the block holding the chunk's first token and the E - 1 before it) exact, only the
  cached prefix before that window from codes, the sinks from their pool only when that window starts after
  position 0. A fresh prompt's chunk is then a plain flash-attention over fp16 tiles, with no decoding, on the bf16
  kernel's tiles; a prompt's numbers depend on where its chunks start. The program moves q' and its
  accumulator from the decoder's channel order to the natural one once, after its coded tiles, so that exact
  rows load straight into the dots.
- `chunk_exact=False`: each query reads exact only its own window (its own block and the E - 1 before it), as a
  decode step does, so a prompt's numbers do not depend on its chunking or prefix-cache hits (a prefill re-scores
  generated tokens exactly). Keys are then scored and summed both decoded and exact where the windows of the
  program's rows differ.

The launch mirrors the bf16 kernel (prefill_attention.py): a program takes BLOCK_M consecutive new q' rows of
one sequence and one query head. Its tiles come in three runs: the sink prefix (positions below sink_tokens,
from the fp16 sink pool, causally masked), the coded tiles wholly before the program's exact region (no causal
mask, so no row's exact key among them; masked where they overlap the sink prefix), and the tiles from there up
to the diagonal (causal mask). Rows never see an all-masked first tile: the sink tile shows every row position 0,
and without sinks the first masked tile starts at a key every row may see. The new tokens must already be
written.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from arbi_kernels.attention_core import LOG2_E, accumulate_values, online_softmax_update
from arbi_kernels.checks import (
    float32_output,
    require_dtype,
    require_positive_scale,
    require_same_device,
    require_shape,
    require_unit_last_stride,
)
from arbi_kernels.prefill_attention import PrefillTiles
from arbi_kernels.tkv_core import (
    attend_coded_tile,
    attend_sink_tile,
    code_channels,
    decode_vectors,
    in_natural_order,
    load_coded_vectors,
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
from arbi_kernels.tkv_exact import (
    exact_window_blocks,
    load_exact_rows,
    tail_ring_rows,
    validate_exact_inputs,
    window_start,
)


def default_tkv_prefill_tiles(head_dim: int) -> PrefillTiles:
    """64 x 64 tiles over 4 warps up to head_dim 128: on the H200 (2026-11-29, Llama GQA 4, K4V4) they took 1.08 ms
    for four 2,048-token prompts where 8 warps took 1.66 ms and 128-row tiles 1.14 ms. Wider heads take 32 x 32
    tiles to keep decoded K and V tiles in registers (not yet run on a GPU at head_dim 256)."""
    if head_dim <= 128:
        return PrefillTiles(block_m=64, block_n=64, num_warps=4)
    return PrefillTiles(block_m=32, block_n=32, num_warps=4)


def require_supported_prefill_tiles(tiles: PrefillTiles) -> None:
    """Refuse key tiles narrower than both the query tile and 64 keys. With the exact-window tiles, Triton 3.6
    on sm_90 miscompiled them (H200, 2026-11-29, one process per shape against the reference): (64, 32) and
    (64, 16) tiles gave wrong outputs or illegal addresses at head_dim 64 and 128, pages 16 and 32, where
    (32, 32), (64, 64) and (128, 64) tiles were right in every case. The interpreter computes them right."""
    if tiles.block_n < min(tiles.block_m, 64):
        raise ValueError(
            f"tiles: block_n {tiles.block_n} is narrower than block_m {tiles.block_m} and than 64 keys, a shape the "
            f"TKV prefill kernel miscompiles on sm_90; use block_n >= min(block_m, 64)"
        )


def reads_coded_prefix(chunk_exact: bool, max_prefix_len: int | None, page_size: int, exact_blocks: int) -> bool:
    """Whether a program of the launch may read coded keys (or the sink pool): always under the per-query rule and
    for unknown prefixes; under the chunk rule only once a prefix reaches E blocks (a chunk's window starts at 0
    before that, and every key it sees is exact)."""
    return not chunk_exact or max_prefix_len is None or max_prefix_len >= exact_blocks * page_size


def prefill_sink_tile_size(sink_tokens: int, tiles: PrefillTiles) -> int:
    """Keys in the sink tile: at least a whole key tile. On sm_90 (Triton 3.6) a [64, 16] score tile over 8 warps
    (two warpgroups splitting 16 columns) miscompiled: wrong outputs at head_dim 128, an illegal address at 64,
    while the same kernel with a full-width sink tile or 4 warps was exact (H200, 2026-11-29)."""
    return max(sink_tile_size(sink_tokens), tiles.block_n)


@triton.jit
def _attend_causal_tile(
    q, keys, visible, coded, q_positions, exact_start, prefix_len, q_begin, tail_slot, block_table_row, kv_head,
    num_kv_heads, m_i, l_i, acc,
    key_codes_ptr, key_metadata_ptr, key_tail_ptr, key_exact_ptr,
    value_codes_ptr, value_metadata_ptr, value_tail_ptr, value_exact_ptr,
    stride_exact_token, stride_exact_head,
    KEY_BITS: tl.constexpr, VALUE_BITS: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr, EXACT_BLOCKS: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Fold the positions `keys` (where `coded`: at or after sink_tokens and before seq_len) into (m_i, l_i, acc),
    where `visible` [M, N]: a key in a row's exact window at or after exact_start is scored and summed with its
    exact K and V (from this step's buffers at or after prefix_len, from the tail ring before), any other decoded."""
    blocks, offsets = paged_blocks(block_table_row, keys, coded, PAGE_SIZE), keys % PAGE_SIZE
    exact = coded & (keys >= exact_start)  # keys some row of the program reads exact
    from_tail = exact & (keys < prefix_len)
    from_step = exact & (keys >= prefix_len)
    tail_rows = tail_ring_rows(tail_slot, keys, PAGE_SIZE, EXACT_BLOCKS)
    step_rows = (q_begin + keys - prefix_len).to(tl.int64)
    in_window = keys[None, :] // PAGE_SIZE >= q_positions[:, None] // PAGE_SIZE - (EXACT_BLOCKS - 1)  # [M, N]
    own = exact[None, :] & in_window  # where visible, the key is in the row's window: exact for that row

    words, scale, zero = load_coded_vectors(key_codes_ptr, key_metadata_ptr, blocks, offsets, kv_head, num_kv_heads,
                                            coded, KEY_BITS, HEAD_DIM, GROUP, PAGE_SIZE)
    k = decode_vectors(words, scale, zero, KEY_BITS, HEAD_DIM, GROUP, q.dtype)
    coded_scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
    k = load_exact_rows(key_tail_ptr, key_exact_ptr, tail_rows, from_tail, step_rows, from_step, kv_head,
                        num_kv_heads, stride_exact_token, stride_exact_head, HEAD_DIM).to(q.dtype)
    exact_scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
    m_i, l_i, acc, p = online_softmax_update(tl.where(own, exact_scores, coded_scores), visible, m_i, l_i, acc,
                                             True)

    words, scale, zero = load_coded_vectors(value_codes_ptr, value_metadata_ptr, blocks, offsets, kv_head,
                                            num_kv_heads, coded, VALUE_BITS, HEAD_DIM, GROUP, PAGE_SIZE)
    v = decode_vectors(words, scale, zero, VALUE_BITS, HEAD_DIM, GROUP, q.dtype)
    acc = accumulate_values(acc, tl.where(own, 0.0, p), v, DOT_PRECISION)
    v = load_exact_rows(value_tail_ptr, value_exact_ptr, tail_rows, from_tail, step_rows, from_step, kv_head,
                        num_kv_heads, stride_exact_token, stride_exact_head, HEAD_DIM).to(q.dtype)
    return m_i, l_i, accumulate_values(acc, tl.where(own, p, 0.0), v, DOT_PRECISION)


@triton.jit
def _attend_exact_rows(q, key_ptr, value_ptr, row_offsets, valid, visible, m_i, l_i, acc, HEAD_DIM: tl.constexpr,
                       DOT_PRECISION: tl.constexpr, APPLY_MASK: tl.constexpr = True):
    """Fold N exact positions into (m_i, l_i, acc): fp16 head vectors at key_ptr / value_ptr + row_offsets [N]
    (where `valid`) in the natural channel order, loaded straight into the dots as the bf16 kernel loads its cache
    (q and acc in the natural order too). APPLY_MASK=False: every position valid and visible to every row (no
    masked loads, no score mask)."""
    offsets = row_offsets[:, None] + tl.arange(0, HEAD_DIM)[None, :]
    if APPLY_MASK:
        k = tl.load(key_ptr + offsets, mask=valid[:, None], other=0.0)
    else:
        k = tl.load(key_ptr + offsets)
    m_i, l_i, acc, p = online_softmax_update(tl.dot(q, tl.trans(k.to(q.dtype)), input_precision=DOT_PRECISION),
                                             visible, m_i, l_i, acc, APPLY_MASK)
    if APPLY_MASK:
        v = tl.load(value_ptr + offsets, mask=valid[:, None], other=0.0)
    else:
        v = tl.load(value_ptr + offsets)
    return m_i, l_i, accumulate_values(acc, p, v.to(q.dtype), DOT_PRECISION)


@triton.jit
def _load_scaled_queries(q_ptr, token_rows, row_valid, q_head, stride_q_token, stride_q_head, dims, qk_scale,
                         COMPUTE_DTYPE: tl.constexpr):
    """q' rows [BLOCK_M, D] of one head, channels `dims`, pre-scaled by qk_scale so fp16 keeps its range."""
    q = tl.load(
        q_ptr + token_rows[:, None] * stride_q_token + q_head * stride_q_head + dims[None, :],
        mask=row_valid[:, None], other=0.0,
    ).to(tl.float32)
    return (q * qk_scale).to(COMPUTE_DTYPE)


@triton.jit(do_not_specialize=["group_size", "num_kv_heads", "stride_bt_seq"])
def _tkv_prefill_kernel(
    q_ptr, key_codes_ptr, key_metadata_ptr, key_sink_ptr, key_tail_ptr, key_exact_ptr,
    value_codes_ptr, value_metadata_ptr, value_sink_ptr, value_tail_ptr, value_exact_ptr,
    block_tables_ptr, query_start_loc_ptr, seq_lens_ptr, tail_slots_ptr, out_ptr,
    qk_scale, group_size, num_kv_heads,
    stride_q_token, stride_q_head, stride_bt_seq, stride_out_token, stride_out_head, stride_exact_token,
    stride_exact_head,
    KEY_BITS: tl.constexpr, VALUE_BITS: tl.constexpr, GROUP: tl.constexpr, SINK_TOKENS: tl.constexpr,
    SINK_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, EXACT_BLOCKS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, COMPUTE_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    CHUNK_EXACT: tl.constexpr, CODED_PREFIX: tl.constexpr,
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
    prefix_len = seq_len - q_len  # cached positions before this step's queries

    rows = tile_first_row + tl.arange(0, BLOCK_M)
    row_valid = rows < q_len
    q_positions = prefix_len + rows  # [BLOCK_M] absolute positions of the queries
    if CHUNK_EXACT and not CODED_PREFIX:
        dims = tl.arange(0, HEAD_DIM)  # every key exact: q' in and acc out in the natural channel order
    else:
        dims = code_channels(HEAD_DIM)  # q' in and acc out in the decoded tiles' channel order
    token_rows = (q_begin + rows).to(tl.int64)
    q = _load_scaled_queries(q_ptr, token_rows, row_valid, q_head, stride_q_token, stride_q_head, dims, qk_scale,
                             COMPUTE_DTYPE)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    block_table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt_seq
    kv_head = q_head // group_size
    offsets_n = tl.arange(0, BLOCK_N)

    first_query = prefix_len + tile_first_row
    # No row reads a key before first_block_start exact: the chunk's first query's window (CHUNK_EXACT: every
    # row reads exact from there on), else the program's first query's.
    first_block_start = window_start(prefix_len if CHUNK_EXACT else first_query, PAGE_SIZE, EXACT_BLOCKS)
    tail_slot = tl.load(tail_slots_ptr + seq)
    causal_end = tl.minimum(seq_len, first_query + BLOCK_M)  # keys past the program's last query are unseen
    if CHUNK_EXACT:
        # Every key from the window's start on is exact, the sinks too when the window starts at 0 (a fresh prompt:
        # its tiles then fall where the bf16 kernel's do). CODED_PREFIX=False: the caller knows no sequence's
        # window starts later, so the sink tile and the coded tiles are compiled out.
        exact_start = first_block_start
        if CODED_PREFIX:
            if first_block_start > 0:
                if SINK_TOKENS > 0:
                    tokens = tl.arange(0, SINK_PAD)
                    in_sink = tokens < SINK_TOKENS  # all before the window, so before every query
                    m_i, l_i, acc = attend_sink_tile(
                        q, tokens, in_sink[None, :] & row_valid[:, None], in_sink, block_table_row, kv_head,
                        num_kv_heads, m_i, l_i, acc, key_sink_ptr, value_sink_ptr, SINK_TOKENS, HEAD_DIM, PAGE_SIZE,
                        DOT_PRECISION,
                    )
                # The cached prefix between the sinks and the window, coded and visible to every row.
                for tile_start in range(SINK_TOKENS // BLOCK_N * BLOCK_N, exact_start, BLOCK_N):
                    keys = tile_start + offsets_n
                    coded = (keys >= SINK_TOKENS) & (keys < exact_start)
                    m_i, l_i, acc = attend_coded_tile(
                        q, keys, coded[None, :], coded, block_table_row, kv_head, num_kv_heads, m_i, l_i, acc,
                        key_codes_ptr, key_metadata_ptr, value_codes_ptr, value_metadata_ptr,
                        True, KEY_BITS, VALUE_BITS, GROUP, HEAD_DIM, PAGE_SIZE, DOT_PRECISION,
                    )
            # From here on every key is exact, stored in the natural channel order: q' and acc move to that order
            # once, so that exact rows load straight into the dots.
            dims = tl.arange(0, HEAD_DIM)
            q = _load_scaled_queries(q_ptr, token_rows, row_valid, q_head, stride_q_token, stride_q_head, dims,
                                     qk_scale, COMPUTE_DTYPE)
            acc = in_natural_order(acc, HEAD_DIM)
        # The window's positions before the chunk (visible to every row), from the tail ring. (Names unused
        # before the loops: a Triton loop carries any name assigned before it.)
        for tile_start in range(exact_start, prefix_len, BLOCK_N):
            keys = tile_start + offsets_n
            in_tail = keys < prefix_len
            tail_vectors = tail_ring_rows(tail_slot, keys, PAGE_SIZE, EXACT_BLOCKS) * num_kv_heads + kv_head
            m_i, l_i, acc = _attend_exact_rows(q, key_tail_ptr, value_tail_ptr, tail_vectors * HEAD_DIM, in_tail,
                                               in_tail[None, :], m_i, l_i, acc, HEAD_DIM, DOT_PRECISION)
        # The chunk's own tokens, from this step's exact buffers: whole tiles before the program's first query
        # (visible to every row) unmasked, then up to the diagonal under the causal mask.
        step_start = tl.maximum(exact_start, prefix_len)
        step_unmasked_end = step_start + tl.maximum(first_query - step_start, 0) // BLOCK_N * BLOCK_N
        for tile_start in range(step_start, step_unmasked_end, BLOCK_N):
            keys = tile_start + offsets_n
            step_rows = (q_begin + keys - prefix_len).to(tl.int64)
            step_offsets = step_rows * stride_exact_token + kv_head * stride_exact_head
            m_i, l_i, acc = _attend_exact_rows(q, key_exact_ptr, value_exact_ptr, step_offsets, row_valid,
                                               row_valid[:, None], m_i, l_i, acc, HEAD_DIM, DOT_PRECISION, False)
        for tile_start in range(step_unmasked_end, causal_end, BLOCK_N):
            keys = tile_start + offsets_n
            in_step = keys < seq_len
            visible = in_step[None, :] & (keys[None, :] <= q_positions[:, None])
            step_rows = (q_begin + keys - prefix_len).to(tl.int64)
            step_offsets = step_rows * stride_exact_token + kv_head * stride_exact_head
            m_i, l_i, acc = _attend_exact_rows(q, key_exact_ptr, value_exact_ptr, step_offsets, in_step, visible,
                                               m_i, l_i, acc, HEAD_DIM, DOT_PRECISION)
    else:
        exact_start = tl.maximum(first_block_start, SINK_TOKENS)
        if SINK_TOKENS > 0:
            tokens = tl.arange(0, SINK_PAD)
            in_sink = (tokens < SINK_TOKENS) & (tokens < seq_len)
            sink_visible = in_sink[None, :] & (tokens[None, :] <= q_positions[:, None])  # [BLOCK_M, SINK_PAD]
            m_i, l_i, acc = attend_sink_tile(
                q, tokens, sink_visible, in_sink, block_table_row, kv_head, num_kv_heads, m_i, l_i, acc,
                key_sink_ptr, value_sink_ptr, SINK_TOKENS, HEAD_DIM, PAGE_SIZE, DOT_PRECISION,
            )
        coded_start = 0
        if SINK_TOKENS > 0:
            # Tiles overlapping the sink prefix: mask the sink positions out (and the causal part, if any).
            coded_start = tl.minimum((SINK_TOKENS + BLOCK_N - 1) // BLOCK_N * BLOCK_N, seq_len)
            for tile_start in range(0, coded_start, BLOCK_N):
                keys = tile_start + offsets_n
                coded = (keys >= SINK_TOKENS) & (keys < seq_len)
                visible = coded[None, :] & (keys[None, :] <= q_positions[:, None])
                m_i, l_i, acc = _attend_causal_tile(
                    q, keys, visible, coded, q_positions, exact_start, prefix_len, q_begin, tail_slot,
                    block_table_row, kv_head, num_kv_heads, m_i, l_i, acc, key_codes_ptr, key_metadata_ptr,
                    key_tail_ptr, key_exact_ptr, value_codes_ptr, value_metadata_ptr,
                    value_tail_ptr, value_exact_ptr, stride_exact_token, stride_exact_head, KEY_BITS, VALUE_BITS,
                    GROUP, HEAD_DIM, PAGE_SIZE, EXACT_BLOCKS, DOT_PRECISION,
                )
        # Whole tiles before the first query's exact window: visible to every row, coded for every row, no mask.
        unmasked_end = tl.maximum((first_block_start // BLOCK_N) * BLOCK_N, coded_start)
        for tile_start in range(coded_start, unmasked_end, BLOCK_N):
            keys = tile_start + offsets_n
            m_i, l_i, acc = attend_coded_tile(
                q, keys, row_valid[:, None], keys < unmasked_end, block_table_row, kv_head, num_kv_heads, m_i, l_i,
                acc, key_codes_ptr, key_metadata_ptr, value_codes_ptr, value_metadata_ptr,
                False, KEY_BITS, VALUE_BITS, GROUP, HEAD_DIM, PAGE_SIZE, DOT_PRECISION,
            )
        # Up to the tile's last query: the causal mask applies.
        for tile_start in range(unmasked_end, causal_end, BLOCK_N):
            keys = tile_start + offsets_n
            coded = keys < seq_len
            visible = (keys[None, :] <= q_positions[:, None]) & coded[None, :]  # [BLOCK_M, BLOCK_N]
            m_i, l_i, acc = _attend_causal_tile(
                q, keys, visible, coded, q_positions, exact_start, prefix_len, q_begin, tail_slot, block_table_row,
                kv_head, num_kv_heads, m_i, l_i, acc, key_codes_ptr, key_metadata_ptr, key_tail_ptr,
                key_exact_ptr, value_codes_ptr, value_metadata_ptr, value_tail_ptr, value_exact_ptr,
                stride_exact_token, stride_exact_head, KEY_BITS, VALUE_BITS, GROUP, HEAD_DIM, PAGE_SIZE,
                EXACT_BLOCKS, DOT_PRECISION,
            )

    output = acc / l_i[:, None]
    out_ptrs = out_ptr + token_rows[:, None] * stride_out_token + q_head * stride_out_head + dims[None, :]
    tl.store(out_ptrs, output, mask=row_valid[:, None])


def tkv_paged_prefill_attention(
    query: torch.Tensor,
    layer: TkvLayerTensors,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    tail_slots: torch.Tensor,
    key_exact: torch.Tensor,
    value_exact: torch.Tensor,
    softmax_scale: float,
    max_query_len: int | None = None,
    tiles: PrefillTiles | None = None,
    compute_dtype: torch.dtype = torch.float16,
    chunk_exact: bool = True,
    out: torch.Tensor | None = None,
    max_prefix_len: int | None = None,
) -> torch.Tensor:
    """Causal attention acc [T, Hq, D] (float32, value code space) of the new tokens' q' [T, Hq, D].

    query_start_loc: [B+1] int32 offsets of each sequence's new tokens; seq_lens: [B] int32 context length
    after this step; block_tables [B, max_blocks] int32. The new tokens' K/V must already be written
    (write_tkv_cache), its result key_exact / value_exact fp16 [T, Hkv, D] holding their exact code-space values;
    tail_slots [B] int32: each sequence's tail slot, a ring holding its earlier positions of the last E blocks
    before the step (store_tkv_tail, run after this kernel; E = exact_window_blocks(layer)), which the step's
    exact windows read. max_query_len: an upper bound on new tokens per sequence (None reads it: a device sync).
    tiles: None takes default_tkv_prefill_tiles(head_dim). compute_dtype: as tkv_paged_decode_attention.
    chunk_exact: which keys a query reads exact (the module's docstring): the chunk's own tokens and its first
    query's window (True), or only the query's own window, as decode does (False). out: where to write acc
    (float32 [T, Hq, D], e.g. the prefill rows' slice of a mixed step's output), else a new tensor.
    max_prefix_len: an upper bound on any sequence's cached positions before this step (seq_len - query_len), read
    with chunk_exact only: below E blocks no chunk reads a code, so the launch compiles the coded tiles out (None:
    unknown, they stay in).
    """
    _, page_size, num_kv_heads, head_dim = validate_tkv_layer(layer)
    exact_blocks = exact_window_blocks(layer)
    require_compute_dtype(compute_dtype)
    num_seqs = seq_lens.shape[0]
    require_dtype("query", query, (torch.float32, torch.float16, torch.bfloat16))
    require_shape("query", query, {"num_tokens": None, "num_heads": None, "head_dim": head_dim})
    num_tokens, num_heads, _ = query.shape
    if num_heads % num_kv_heads:
        raise ValueError(f"query: num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")
    for name, tensor in (("seq_lens", seq_lens), ("query_start_loc", query_start_loc), ("block_tables", block_tables)):
        require_dtype(name, tensor, (torch.int32,))
    require_shape("seq_lens", seq_lens, {"num_seqs": None})
    require_shape("query_start_loc", query_start_loc, {"num_seqs_plus_one": num_seqs + 1})
    require_shape("block_tables", block_tables, {"num_seqs": num_seqs, "max_blocks_per_seq": None})
    for name, tensor in (("query", query), ("seq_lens", seq_lens), ("query_start_loc", query_start_loc),
                         ("block_tables", block_tables)):
        require_unit_last_stride(name, tensor)
    require_positive_scale("softmax_scale", softmax_scale)
    validate_exact_inputs(key_exact, value_exact, tail_slots, num_tokens, num_seqs, num_kv_heads, head_dim)
    require_same_device({"query": query, "layer": layer.key_codes, "block_tables": block_tables,
                         "query_start_loc": query_start_loc, "seq_lens": seq_lens, "tail_slots": tail_slots,
                         "key_exact": key_exact, "value_exact": value_exact})
    output = float32_output("out", out, tuple(query.shape), query.device)
    if num_tokens == 0 or num_seqs == 0:
        return output
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max().item())
    if not 0 <= max_query_len <= num_tokens:
        raise ValueError(f"max_query_len: must be in [0, num_tokens={num_tokens}], got {max_query_len}")
    if max_query_len == 0:
        return output
    if max_prefix_len is not None and max_prefix_len < 0:
        raise ValueError(f"max_prefix_len: must be >= 0, got {max_prefix_len}")

    tiles = tiles or default_tkv_prefill_tiles(head_dim)
    require_supported_prefill_tiles(tiles)
    grid = (triton.cdiv(max_query_len, tiles.block_m), num_seqs, num_heads)
    _tkv_prefill_kernel[grid](
        query, packed_code_view(layer.key_codes, layer.key_bits), metadata_pair_view(layer.key_metadata), layer.key_sink,
        layer.key_tail, key_exact,
        packed_code_view(layer.value_codes, layer.value_bits), metadata_pair_view(layer.value_metadata), layer.value_sink,
        layer.value_tail, value_exact,
        block_tables, query_start_loc, seq_lens, tail_slots, output,
        softmax_scale * LOG2_E, num_heads // num_kv_heads, num_kv_heads,
        query.stride(0), query.stride(1), block_tables.stride(0), output.stride(0), output.stride(1),
        key_exact.stride(0), key_exact.stride(1),
        KEY_BITS=layer.key_bits, VALUE_BITS=layer.value_bits, GROUP=layer.group_size,
        SINK_TOKENS=layer.sink_tokens, SINK_PAD=prefill_sink_tile_size(layer.sink_tokens, tiles), HEAD_DIM=head_dim,
        PAGE_SIZE=page_size, EXACT_BLOCKS=exact_blocks, BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n,
        COMPUTE_DTYPE=triton_dtype(compute_dtype), DOT_PRECISION=compute_precision(compute_dtype),
        CHUNK_EXACT=chunk_exact, CODED_PREFIX=reads_coded_prefix(chunk_exact, max_prefix_len, page_size, exact_blocks),
        num_warps=tiles.num_warps, num_stages=tiles.num_stages,
    )
    return output
