"""What the TKV kernels share about a query's exact window (docs/tkv.md): its own block and the E - 1 blocks before
it, E = exact_blocks = the tail's rows per slot / block_size, read exact in the code space. Here: the checks of a
step's exact K/V (write_tkv_cache's result) and tail slots, E, the size of a tile of exact rows, and
the Triton helpers that place a window (its first block's start, a position's row in the tail slot's ring of E
blocks) and load exact rows from the tail pool or the step's exact buffer.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from arbi_kernels.checks import require_dtype, require_shape, require_unit_last_stride
from arbi_kernels.tkv_core import in_code_order
from arbi_kernels.tkv_layout import TkvLayerTensors

__all__ = [
    "exact_window_blocks",
    "load_exact_rows",
    "load_window_tile",
    "tail_ring_rows",
    "tail_tile_size",
    "validate_exact_inputs",
    "window_start",
]


def validate_exact_inputs(key_exact: torch.Tensor, value_exact: torch.Tensor, tail_slots: torch.Tensor, num_rows: int,
                          num_seqs: int, num_kv_heads: int, head_dim: int) -> None:
    """This step's exact code-space K/V (write_tkv_cache's result: fp16 [num_rows, Hkv, D], one stride pattern)
    and each sequence's tail slot ([num_seqs] int32; its range is not checked, which would need a device sync)."""
    for name, tensor in (("key_exact", key_exact), ("value_exact", value_exact)):
        require_dtype(name, tensor, (torch.float16,))
        require_shape(name, tensor, {"num_tokens": num_rows, "num_kv_heads": num_kv_heads, "head_dim": head_dim})
        require_unit_last_stride(name, tensor)
    if key_exact.stride() != value_exact.stride():
        raise ValueError(f"value_exact: strides must equal key_exact's {key_exact.stride()}, got {value_exact.stride()}")
    require_dtype("tail_slots", tail_slots, (torch.int32,))
    require_shape("tail_slots", tail_slots, {"num_seqs": num_seqs})
    require_unit_last_stride("tail_slots", tail_slots)


def exact_window_blocks(layer: TkvLayerTensors) -> int:
    """E, the blocks of the exact window, read from the tail's shape (validate_tkv_layer checks it first)."""
    return layer.key_tail.shape[1] // layer.block_size


def tail_tile_size(window_tokens: int) -> int:
    """Rows of a tile holding `window_tokens` exact positions (a decode tile, or the tail store's whole window;
    tl.dot needs at least 16)."""
    return max(16, triton.next_power_of_2(window_tokens))


@triton.jit
def window_start(last_position, PAGE_SIZE: tl.constexpr, EXACT_BLOCKS: tl.constexpr):
    """Start of the first block of the exact window of a query at last_position (>= 0): its own block's start
    less E - 1 blocks, clamped at 0."""
    return tl.maximum(last_position // PAGE_SIZE - (EXACT_BLOCKS - 1), 0) * PAGE_SIZE


@triton.jit
def tail_ring_rows(tail_slot, positions, PAGE_SIZE: tl.constexpr, EXACT_BLOCKS: tl.constexpr):
    """Rows (int64, of the tail pool viewed as [num_tail_slots * E * block_size, Hkv, D]) holding `positions`
    (>= 0) of a sequence whose tail slot is tail_slot: block b of the ring at (b % E) * block_size."""
    ring_offsets = positions // PAGE_SIZE % EXACT_BLOCKS * PAGE_SIZE + positions % PAGE_SIZE
    return tail_slot.to(tl.int64) * (EXACT_BLOCKS * PAGE_SIZE) + ring_offsets


@triton.jit
def load_exact_rows(tail_ptr, exact_ptr, tail_rows, from_tail, step_rows, from_step, kv_head, num_kv_heads,
                    stride_exact_token, stride_exact_head, HEAD_DIM: tl.constexpr):
    """Exact code-space entries of N positions: fp16 [N, D] as stored, in code_channels order, each from the tail
    pool (row tail_rows, see tail_ring_rows, where from_tail) or from this step's exact buffer (token row
    step_rows, where from_step); 0 elsewhere."""
    dims = tl.arange(0, HEAD_DIM)  # loaded contiguous, then rearranged in registers (in_code_order)
    tail_vectors = tail_rows * num_kv_heads + kv_head
    tail = tl.load(tail_ptr + tail_vectors[:, None] * HEAD_DIM + dims[None, :], mask=from_tail[:, None], other=0.0)
    step_offsets = step_rows[:, None] * stride_exact_token + kv_head * stride_exact_head + dims[None, :]
    step = tl.load(exact_ptr + step_offsets, mask=from_step[:, None], other=0.0)
    return in_code_order(tl.where(from_tail[:, None], tail, step), HEAD_DIM)


@triton.jit
def load_window_tile(seq, seq_len, tile_start, tail_slot, kv_head, num_kv_heads, key_tail_ptr, value_tail_ptr,
                     key_exact_ptr, value_exact_ptr, stride_exact_token, stride_exact_head, SINK_TOKENS: tl.constexpr,
                     WINDOW_ROWS: tl.constexpr, TAIL_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                     PAGE_SIZE: tl.constexpr, EXACT_BLOCKS: tl.constexpr):
    """A decode step's WINDOW_ROWS positions of the exact window from tile_start, as TAIL_PAD rows: (k, v) fp16
    [TAIL_PAD, D] in code_channels order and `exact` [TAIL_PAD], the rows at or after SINK_TOKENS and before
    seq_len: the new token (position seq_len - 1) from row `seq` of the step's exact buffers, the others from the
    tail slot's ring."""
    offsets = tl.arange(0, TAIL_PAD)
    positions = tile_start + offsets
    exact = (offsets < WINDOW_ROWS) & (positions >= SINK_TOKENS) & (positions < seq_len)
    from_step = exact & (positions == seq_len - 1)
    from_tail = exact & (positions < seq_len - 1)
    tail_rows = tail_ring_rows(tail_slot, positions, PAGE_SIZE, EXACT_BLOCKS)
    step_rows = tl.zeros([TAIL_PAD], dtype=tl.int64) + seq
    k = load_exact_rows(key_tail_ptr, key_exact_ptr, tail_rows, from_tail, step_rows, from_step, kv_head,
                        num_kv_heads, stride_exact_token, stride_exact_head, HEAD_DIM)
    v = load_exact_rows(value_tail_ptr, value_exact_ptr, tail_rows, from_tail, step_rows, from_step, kv_head,
                        num_kv_heads, stride_exact_token, stride_exact_head, HEAD_DIM)
    return k, v, exact
