"""TKV tail store: keep each sequence's exact window (its last E blocks) exact for the steps after this one.

A query reads its exact window, its own block and the E - 1 blocks before it, in the code space (docs/tkv.md): this
step's tokens from the exact buffers that write_tkv_cache returns, earlier ones from the sequence's tail slot, a
ring of E blocks (E = the tail's rows / block_size). After attention, this kernel copies every token of this step
that lies in its sequence's last E blocks into that slot, at ring row (position // block_size) % E * block_size +
position % block_size, so the next step finds them there. It runs after attention because a prefill chunk that
ends in a later block still needs the ring rows of the blocks it started in. No host sync (CUDA graphs); a
sequence with seq_len 0 (graph padding) copies nothing.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from arbi_kernels.checks import (
    require_dtype,
    require_same_device,
    require_shape,
    require_unit_last_stride,
)
from arbi_kernels.pdl import pdl_launch_options, wait_for_previous_kernel
from arbi_kernels.tkv_layout import TkvLayerTensors, validate_tkv_layer
from arbi_kernels.tkv_exact import (
    exact_window_blocks,
    tail_ring_rows,
    tail_tile_size,
    validate_exact_inputs,
    window_start,
)


@triton.jit(do_not_specialize=["num_kv_heads"])
def _store_tkv_tail_kernel(
    key_exact_ptr, value_exact_ptr, key_tail_ptr, value_tail_ptr, query_start_loc_ptr, seq_lens_ptr,
    tail_slots_ptr, num_kv_heads, stride_exact_token, stride_exact_head,
    HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, EXACT_BLOCKS: tl.constexpr, TAIL_PAD: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """Program (sequence, kv head): keys and values of the sequence's step tokens in its last E blocks."""
    wait_for_previous_kernel(USE_PDL)
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    q_begin = tl.load(query_start_loc_ptr + seq)
    prefix_len = seq_len - (tl.load(query_start_loc_ptr + seq + 1) - q_begin)
    offsets = tl.arange(0, TAIL_PAD)
    positions = window_start(tl.maximum(seq_len - 1, 0), PAGE_SIZE, EXACT_BLOCKS) + offsets
    copied = (offsets < EXACT_BLOCKS * PAGE_SIZE) & (positions >= prefix_len) & (positions < seq_len)
    dims = tl.arange(0, HEAD_DIM)
    step_rows = (q_begin + positions - prefix_len).to(tl.int64)
    source = step_rows[:, None] * stride_exact_token + kv_head * stride_exact_head + dims[None, :]
    tail_slot = tl.load(tail_slots_ptr + seq, mask=seq_len > 0, other=0)
    tail_vectors = tail_ring_rows(tail_slot, positions, PAGE_SIZE, EXACT_BLOCKS)
    target = (tail_vectors * num_kv_heads + kv_head)[:, None] * HEAD_DIM + dims[None, :]
    tl.store(key_tail_ptr + target, tl.load(key_exact_ptr + source, mask=copied[:, None]), mask=copied[:, None])
    tl.store(value_tail_ptr + target, tl.load(value_exact_ptr + source, mask=copied[:, None]), mask=copied[:, None])


def store_tkv_tail(
    key_exact: torch.Tensor,
    value_exact: torch.Tensor,
    layer: TkvLayerTensors,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    tail_slots: torch.Tensor,
) -> None:
    """Copy, for every sequence b, each of this step's tokens at a position p of b's last E blocks (p // block_size
    >= (seq_len - 1) // block_size - (E - 1) and p >= seq_len - query_len) from key_exact / value_exact [T, Hkv, D]
    fp16 (write_tkv_cache's result) to layer.key_tail / value_tail[tail_slots[b], (p // block_size) % E *
    block_size + p % block_size], E = exact_window_blocks(layer).

    query_start_loc: [B+1] int32 offsets of each sequence's tokens; seq_lens: [B] int32 context length after this
    step (0: nothing copied); tail_slots: [B] int32 (distinct among the sequences; the range is not checked).
    """
    _, page_size, num_kv_heads, head_dim = validate_tkv_layer(layer)
    exact_blocks = exact_window_blocks(layer)
    num_seqs = seq_lens.shape[0]
    for name, tensor in (("query_start_loc", query_start_loc), ("seq_lens", seq_lens)):
        require_dtype(name, tensor, (torch.int32,))
        require_unit_last_stride(name, tensor)
    require_shape("seq_lens", seq_lens, {"num_seqs": None})
    require_shape("query_start_loc", query_start_loc, {"num_seqs_plus_one": num_seqs + 1})
    validate_exact_inputs(key_exact, value_exact, tail_slots, key_exact.shape[0], num_seqs, num_kv_heads, head_dim)
    require_same_device({"key_exact": key_exact, "value_exact": value_exact, "layer": layer.key_tail,
                         "query_start_loc": query_start_loc, "seq_lens": seq_lens, "tail_slots": tail_slots})
    if num_seqs == 0 or key_exact.shape[0] == 0:
        return
    _store_tkv_tail_kernel[(num_seqs, num_kv_heads)](
        key_exact, value_exact, layer.key_tail, layer.value_tail, query_start_loc, seq_lens, tail_slots,
        num_kv_heads, key_exact.stride(0), key_exact.stride(1),
        HEAD_DIM=head_dim, PAGE_SIZE=page_size, EXACT_BLOCKS=exact_blocks,
        TAIL_PAD=tail_tile_size(exact_blocks * page_size), num_warps=1, **pdl_launch_options(key_exact.device),
    )
