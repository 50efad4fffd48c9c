"""Skinny matmul for decode: out[M, N] = x[M, K] @ weight[N, K]^T (+ bias) for M <= 16 rows, bandwidth-bound.

With so few rows the weight is read exactly once and the work is streaming it: each program reads a
[BLOCK_N, K-range] slab of weight rows (K contiguous, so every load is a wide coalesced row segment), keeps
the few x rows' matching segment in registers (x is tiny and stays in L2), and accumulates in float32.
Two inner products: `use_dot` pads the rows to 16 and uses one tensor-core `tl.dot` per tile (its operand
loads are software-pipelined over `num_stages`); otherwise the CUDA cores multiply and add in float32, for
one row elementwise across tiles with a single sum over K at the end, for 2 to 16 rows one sum per row and
tile (BLOCK_M = the next power of two of M).
When N / BLOCK_N programs cannot fill the GPU, `split_k` programs share a row block's K range; each writes a
float32 partial and a second kernel sums them, adds the bias and rounds once. Tiles come from `TUNED_TILES`
(filled from benchmarks/skinny_matmul.py's sweep on the H200) or a fixed heuristic: never a runtime
autotune, because decode runs inside CUDA graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from arbi_kernels.checks import (
    FLOAT_DTYPES,
    next_power_of_two,
    require_dtype,
    require_num_warps,
    require_same_device,
    require_same_dtype,
    require_shape,
    require_tile_size,
    require_unit_last_stride,
)
from arbi_kernels.device import multiprocessor_count
from arbi_kernels.pdl import pdl_launch_options, wait_for_previous_kernel

MAX_ROWS = 16
ROW_BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16)
DOT_BLOCK_M = 16  # tl.dot's smallest M on tensor cores: rows past M are padding, never stored
PROGRAMS_PER_SM = 4  # the heuristic's target occupancy: enough row blocks or splits to hide DRAM latency
MIN_ITERATIONS_PER_SPLIT = 4  # a split streams at least this many BLOCK_K tiles of each of its rows
MAX_SPLIT_K = 16
REDUCE_BLOCK_N = 1024
CPU_NUM_SMS = 132  # the H200's, so interpreter runs pick the tiles the GPU would


@dataclass(frozen=True)
class SkinnyTiles:
    """One launch configuration. `split_k` is the number of K ranges (1: no partials, one kernel)."""

    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    use_dot: bool = False

    def __post_init__(self) -> None:
        require_tile_size("block_n", self.block_n, minimum=16 if self.use_dot else 1)
        require_tile_size("block_k", self.block_k, minimum=16)
        if not 1 <= self.split_k <= 256:
            raise ValueError(f"split_k: must be in 1..256, got {self.split_k}")
        require_num_warps(self.num_warps)
        if not 1 <= self.num_stages <= 8:
            raise ValueError(f"num_stages: must be in 1..8, got {self.num_stages}")

    @property
    def label(self) -> str:
        kind = "dot" if self.use_dot else "fma"
        return f"{kind} n{self.block_n} k{self.block_k} s{self.split_k} w{self.num_warps} st{self.num_stages}"


# (row bucket, N, K) -> tiles for 16-bit dtypes, from the sweep in benchmarks/skinny_matmul.py on one H200
# (bf16). Shapes not listed, and float32, use `heuristic_tiles`.
# One-row (batch-1 decode) tiles from benchmarks/skinny_matmul.py on an H200, 2026-11-29: each beat
# F.linear (cuBLAS) by 1.02x to 2.7x in CUDA-graph timings. Multi-row buckets lost to cuBLAS for most shapes in
# that sweep and are not listed (the heuristic serves them when called directly).
TUNED_TILES: dict[tuple[int, int, int], SkinnyTiles] = {
    (1, 6144, 4096): SkinnyTiles(block_n=8, block_k=512, num_stages=1),  # llama3-8b qkv
    (1, 4096, 4096): SkinnyTiles(block_n=8, block_k=512, num_stages=1),  # llama3-8b o_proj
    (1, 28672, 4096): SkinnyTiles(block_n=16, block_k=256, num_stages=1),  # llama3-8b gate_up
    (1, 4096, 14336): SkinnyTiles(block_n=8, block_k=1024, num_stages=1),  # llama3-8b down
    (1, 128256, 4096): SkinnyTiles(block_n=16, block_k=256, num_stages=1),  # llama3-8b lm_head
    (1, 4096, 1024): SkinnyTiles(block_n=8, block_k=512, num_stages=1),  # qwen3-0.6b qkv
    (1, 1024, 2048): SkinnyTiles(block_n=8, block_k=1024, num_stages=1),  # qwen3-0.6b o_proj
    (1, 6144, 1024): SkinnyTiles(block_n=8, block_k=512, num_stages=1),  # qwen3-0.6b gate_up
    (1, 1024, 3072): SkinnyTiles(block_n=8, block_k=1024, num_stages=1),  # qwen3-0.6b down
    (1, 151936, 1024): SkinnyTiles(block_n=8, block_k=512, num_stages=1),  # qwen3-0.6b lm_head
}


def has_tuned_tiles(num_rows: int, n: int, k: int, dtype: torch.dtype) -> bool:
    """Whether the sweep measured this (row bucket, N, K) for a 16-bit dtype: callers that must beat cuBLAS
    use the kernel only then."""
    return 1 <= num_rows <= MAX_ROWS and dtype.itemsize == 2 and (row_bucket(num_rows), n, k) in TUNED_TILES


def row_bucket(num_rows: int) -> int:
    """The smallest bucket in ROW_BUCKETS holding `num_rows` (1 <= num_rows <= MAX_ROWS)."""
    return next(bucket for bucket in ROW_BUCKETS if bucket >= num_rows)


def heuristic_tiles(num_rows: int, n: int, k: int, element_size: int, num_sms: int) -> SkinnyTiles:
    """Tiles for an untuned shape: K tiles of 512 bytes per row, the widest row block that still gives
    PROGRAMS_PER_SM programs per SM, then split K (powers of two, each split at least MIN_ITERATIONS_PER_SPLIT
    tiles long) if it does not."""
    use_dot = num_rows > 4
    block_k = 512 // element_size
    target_programs = PROGRAMS_PER_SM * num_sms
    block_n = 16
    for candidate in (64, 32):
        if triton.cdiv(n, candidate) >= target_programs:
            block_n = candidate
            break
    row_blocks = triton.cdiv(n, block_n)
    split_k = 1
    while (
        row_blocks * split_k < target_programs
        and split_k < MAX_SPLIT_K
        and k // (2 * split_k * block_k) >= MIN_ITERATIONS_PER_SPLIT
    ):
        split_k *= 2
    return SkinnyTiles(block_n=block_n, block_k=block_k, split_k=split_k, use_dot=use_dot)


def choose_skinny_tiles(num_rows: int, n: int, k: int, dtype: torch.dtype, device: torch.device) -> SkinnyTiles:
    """The tuned tiles for (row bucket, N, K) if the sweep measured that shape, else the heuristic's."""
    element_size = dtype.itemsize
    tuned = TUNED_TILES.get((row_bucket(num_rows), n, k)) if element_size == 2 else None
    if tuned is not None:
        return tuned
    num_sms = multiprocessor_count(device) if device.type == "cuda" else CPU_NUM_SMS
    return heuristic_tiles(num_rows, n, k, element_size, num_sms)


@triton.jit
def _load_k_tile(ptrs, k_mask, EVEN_K: tl.constexpr):
    """A tile of K-contiguous rows; past the end of K (only without EVEN_K) it reads zeros."""
    if EVEN_K:
        return tl.load(ptrs)
    return tl.load(ptrs, mask=k_mask, other=0.0)


@triton.jit
def _skinny_matmul_kernel(
    x_ptr, weight_ptr, bias_ptr, out_ptr,
    num_rows, n, k, k_per_split,
    stride_x, stride_weight, stride_out, stride_out_split,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr, DOT_PRECISION: tl.constexpr, EVEN_K: tl.constexpr,
    HAS_BIAS: tl.constexpr, WRITE_PARTIAL: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """Program (row block, split): out rows [M, BLOCK_N] over K range [split * k_per_split, + k_per_split).

    With WRITE_PARTIAL the float32 sum goes to out_ptr[split] (bias and rounding left to the reduce kernel).
    """
    wait_for_previous_kernel(USE_PDL)
    block = tl.program_id(0)
    split = tl.program_id(1)
    rows = tl.arange(0, BLOCK_M)
    columns = block * BLOCK_N + tl.arange(0, BLOCK_N)
    offsets_k = tl.arange(0, BLOCK_K)
    k_begin = split * k_per_split
    k_end = tl.minimum(k_begin + k_per_split, k)
    # Rows past M and columns past N re-read the last valid one instead of masking, so with EVEN_K every
    # load is unmasked and fully vectorized; their results are never stored.
    row_offsets = tl.minimum(rows, num_rows - 1) * stride_x
    column_offsets = tl.minimum(columns, n - 1).to(tl.int64) * stride_weight
    x_ptrs = x_ptr + k_begin + offsets_k  # [BLOCK_K], row 0
    weight_ptrs = weight_ptr + column_offsets[:, None] + (k_begin + offsets_k)[None, :]  # [BLOCK_N, BLOCK_K]
    # The accumulator is [BLOCK_N, BLOCK_M] (out transposed): the CUDA-core path then adds each row's sum
    # over K where the weight tile's layout already has it, with no layout conversion inside the loop.
    accumulator = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    # One row (single-stream decode): products are summed elementwise across tiles and over K once at the
    # end, so the loop is loads, conversions and FMAs only (no shuffles or barriers).
    single_row_products = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k_start in range(k_begin, k_end, BLOCK_K):
        k_mask = (k_start + offsets_k) < k_end
        weight = _load_k_tile(weight_ptrs, k_mask, EVEN_K)
        # On the CUDA cores x's row segment is loaded in the weight tile's own [BLOCK_N, BLOCK_K] layout
        # (repeats hit L1): a [BLOCK_K] load would need a conversion through shared memory and a barrier.
        x_row_ptrs = tl.broadcast_to(x_ptrs[None, :], (BLOCK_N, BLOCK_K))
        if USE_DOT:
            x = _load_k_tile(x_ptrs[None, :] + row_offsets[:, None], k_mask, EVEN_K)  # [BLOCK_M, BLOCK_K]
            accumulator = tl.dot(weight, tl.trans(x), accumulator, input_precision=DOT_PRECISION)
        elif BLOCK_M == 1:
            x_row = _load_k_tile(x_row_ptrs, k_mask, EVEN_K)
            single_row_products += weight.to(tl.float32) * x_row.to(tl.float32)
        else:
            weight = weight.to(tl.float32)
            for row in tl.static_range(BLOCK_M):
                x_row = _load_k_tile(x_row_ptrs + tl.minimum(row, num_rows - 1) * stride_x, k_mask, EVEN_K)
                row_sum = tl.sum(weight * x_row.to(tl.float32), axis=1)  # [BLOCK_N]
                accumulator += tl.where(rows[None, :] == row, row_sum[:, None], 0.0)
        x_ptrs += BLOCK_K
        weight_ptrs += BLOCK_K
    if not USE_DOT and BLOCK_M == 1:
        accumulator = tl.sum(single_row_products, axis=1)[:, None]
    column_mask = columns < n
    out_ptrs = out_ptr + split * stride_out_split + rows[None, :] * stride_out + columns[:, None]
    out_mask = (rows < num_rows)[None, :] & column_mask[:, None]
    if WRITE_PARTIAL:
        tl.store(out_ptrs, accumulator, mask=out_mask)
    else:
        if HAS_BIAS:
            accumulator += tl.load(bias_ptr + columns, mask=column_mask, other=0.0).to(tl.float32)[:, None]
        tl.store(out_ptrs, accumulator.to(out_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def _reduce_splits_kernel(
    partial_ptr, bias_ptr, out_ptr, n, num_splits, stride_partial_split, stride_partial, stride_out,
    BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """Program (row, column block): out[row] = sum over splits of the float32 partials (+ bias), rounded once."""
    wait_for_previous_kernel(USE_PDL)
    row = tl.program_id(0)
    columns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = columns < n
    total = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for split in range(num_splits):
        total += tl.load(partial_ptr + split * stride_partial_split + row * stride_partial + columns, mask=mask)
    if HAS_BIAS:
        total += tl.load(bias_ptr + columns, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + columns, total.to(out_ptr.dtype.element_ty), mask=mask)


def _validate(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    require_dtype("x", x, FLOAT_DTYPES)
    require_shape("x", x, {"num_rows": None, "in_features": None})
    require_unit_last_stride("x", x)
    if x.shape[0] > MAX_ROWS:
        raise NotImplementedError(
            f"x: skinny_matmul handles at most {MAX_ROWS} rows, got {x.shape[0]}; larger batches go to F.linear"
        )
    require_shape("weight", weight, {"out_features": None, "in_features": x.shape[1]})
    require_same_dtype("weight", weight, "x", x)
    require_unit_last_stride("weight", weight)
    tensors = {"x": x, "weight": weight}
    if bias is not None:
        require_shape("bias", bias, {"out_features": weight.shape[0]})
        require_dtype("bias", bias, FLOAT_DTYPES)
        require_unit_last_stride("bias", bias)
        tensors["bias"] = bias
    require_same_device(tensors)


def skinny_matmul(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, tiles: SkinnyTiles | None = None
) -> torch.Tensor:
    """x [M, K] @ weight[N, K]^T (+ bias [N]) -> [M, N] in x's dtype, for M <= 16; float32 accumulation.

    The nn.Linear layout: weight rows are output features. `tiles` overrides `choose_skinny_tiles` (for
    the benchmark's sweep). No host synchronization, so calls can be captured in a CUDA graph.
    """
    _validate(x, weight, bias)
    num_rows, k = x.shape
    n = weight.shape[0]
    out = torch.empty((num_rows, n), dtype=x.dtype, device=x.device)
    if num_rows == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_() if bias is None else out.copy_(bias.expand_as(out))
    tiles = tiles or choose_skinny_tiles(num_rows, n, k, x.dtype, x.device)
    k_per_split = triton.cdiv(triton.cdiv(k, tiles.split_k), tiles.block_k) * tiles.block_k
    num_splits = triton.cdiv(k, k_per_split)  # rounding k_per_split up to whole tiles may leave fewer splits
    write_partial = num_splits > 1
    target = torch.empty((num_splits, num_rows, n), dtype=torch.float32, device=x.device) if write_partial else out
    bias_arg = weight if bias is None else bias  # never read without HAS_BIAS
    _skinny_matmul_kernel[(triton.cdiv(n, tiles.block_n), num_splits)](
        x, weight, bias_arg, target,
        num_rows, n, k, k_per_split,
        x.stride(0), weight.stride(0), target.stride(-2), target.stride(0) if write_partial else 0,
        BLOCK_M=DOT_BLOCK_M if tiles.use_dot else next_power_of_two(num_rows),
        BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k,
        USE_DOT=tiles.use_dot, DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
        EVEN_K=k % tiles.block_k == 0, HAS_BIAS=bias is not None, WRITE_PARTIAL=write_partial,
        num_warps=tiles.num_warps, num_stages=tiles.num_stages, **pdl_launch_options(x.device),
    )
    if write_partial:
        _reduce_splits_kernel[(num_rows, triton.cdiv(n, REDUCE_BLOCK_N))](
            target, bias_arg, out, n, num_splits, target.stride(0), target.stride(1), out.stride(0),
            BLOCK_N=REDUCE_BLOCK_N, HAS_BIAS=bias is not None, num_warps=4, **pdl_launch_options(x.device),
        )
    return out
