"""What the TKV kernels share about a query's own block, read exact (docs/tkv.md, "Exact own block"): the checks
of a step's exact code-space K/V (write_tkv_cache's result) and tail slots, the size of the one tile that holds a
block, and the Triton helper that loads exact rows from the tail pool or the step's exact buffer.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from arbi_kernels.checks import require_dtype, require_shape, require_unit_last_stride
from arbi_kernels.tkv_core import code_channels


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


def tail_tile_size(block_size: int) -> int:
    """Rows of the one tile holding a block's exact positions (tl.dot needs at least 16)."""
    return max(16, triton.next_power_of_2(block_size))


@triton.jit
def load_exact_rows(tail_ptr, exact_ptr, tail_rows, from_tail, step_rows, from_step, kv_head, num_kv_heads,
                    stride_exact_token, stride_exact_head, HEAD_DIM: tl.constexpr):
    """Exact code-space entries (fp16) of N positions: float32 [N, D] in code_channels order, each from the tail
    pool (row tail_rows = tail_slot * block_size + offset, where from_tail) or from this step's exact buffer
    (token row step_rows, where from_step); 0 elsewhere."""
    dims = code_channels(HEAD_DIM)
    tail_vectors = tail_rows * num_kv_heads + kv_head
    tail = tl.load(tail_ptr + tail_vectors[:, None] * HEAD_DIM + dims[None, :], mask=from_tail[:, None], other=0.0)
    step_offsets = step_rows[:, None] * stride_exact_token + kv_head * stride_exact_head + dims[None, :]
    step = tl.load(exact_ptr + step_offsets, mask=from_step[:, None], other=0.0)
    return tl.where(from_tail[:, None], tail, step).to(tl.float32)
