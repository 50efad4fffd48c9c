"""Random paged batches and dtype tolerances, shared by the kernel tests and the benchmark.

A batch follows the engine's layout: caches [num_blocks, block_size, Hkv, D] filled with noise (so unread
garbage is everywhere), block tables that are random permutations of the blocks (never contiguous), and
varlen metadata (query_start_loc, seq_lens) for the given per-sequence query and context lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PagedBatch:
    """A varlen batch over a paged KV cache; `query` holds the new tokens of all sequences, concatenated."""

    query: torch.Tensor  # [T, Hq, D]
    key_cache: torch.Tensor  # [num_blocks, block_size, Hkv, D]
    value_cache: torch.Tensor
    block_tables: torch.Tensor  # [B, max_blocks] int32
    query_start_loc: torch.Tensor  # [B + 1] int32
    seq_lens: torch.Tensor  # [B] int32, context length including the new tokens
    softmax_scale: float


@dataclass(frozen=True)
class BatchShape:
    """Head layout and paging of a random batch."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    dtype: torch.dtype

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(f"num_heads {self.num_heads} must be a multiple of num_kv_heads {self.num_kv_heads}")


def random_paged_batch(
    shape: BatchShape,
    query_lens: list[int],
    seq_lens: list[int],
    device: torch.device | str,
    generator: torch.Generator,
    spare_blocks: int = 3,
) -> PagedBatch:
    """Each sequence b has seq_lens[b] cached tokens, the last query_lens[b] of which are its new queries."""
    if len(query_lens) != len(seq_lens) or any(q > s for q, s in zip(query_lens, seq_lens)):
        raise ValueError(f"need query_lens <= seq_lens pairwise, got {query_lens} and {seq_lens}")
    blocks_per_seq = [-(-length // shape.page_size) for length in seq_lens]
    max_blocks = max(max(blocks_per_seq, default=1), 1) + 1  # one unused column: tables are wider than needed
    num_blocks = sum(blocks_per_seq) + spare_blocks
    permutation = torch.randperm(num_blocks, generator=generator, device=generator.device).cpu()
    table_rows = []
    taken = 0
    for count in blocks_per_seq:
        used = permutation[taken : taken + count]
        taken += count
        filler = torch.randint(0, num_blocks, (max_blocks - count,), generator=generator, device=generator.device)
        filler = filler.cpu()
        table_rows.append(torch.cat([used, filler]))
    cache_shape = (num_blocks, shape.page_size, shape.num_kv_heads, shape.head_dim)
    starts = torch.tensor([0, *query_lens]).cumsum(0)
    return PagedBatch(
        query=_noise((int(starts[-1]), shape.num_heads, shape.head_dim), shape.dtype, device, generator),
        key_cache=_noise(cache_shape, shape.dtype, device, generator),
        value_cache=_noise(cache_shape, shape.dtype, device, generator),
        block_tables=torch.stack(table_rows).to(device=device, dtype=torch.int32),
        query_start_loc=starts.to(device=device, dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        softmax_scale=shape.head_dim**-0.5,
    )


def _noise(
    size: tuple[int, ...], dtype: torch.dtype, device: torch.device | str, generator: torch.Generator
) -> torch.Tensor:
    """Standard normal values drawn on the generator's device, then moved: one generator serves any device."""
    values = torch.randn(size, generator=generator, dtype=torch.float32, device=generator.device)
    return values.to(device=device, dtype=dtype)


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """atol/rtol for a kernel output against its float32 reference rounded to `dtype` (about 2 ulp)."""
    if dtype == torch.float32:
        return {"atol": 2e-5, "rtol": 2e-5}
    if dtype == torch.float16:
        return {"atol": 2e-3, "rtol": 2e-3}
    return {"atol": 1.6e-2, "rtol": 1.6e-2}
