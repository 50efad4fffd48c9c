"""The kernels composed as the engine uses them: write K/V by slot, prefill a prompt, then decode a token."""

from __future__ import annotations

import torch

from arbi_kernels import paged_decode_attention, paged_prefill_attention, write_kv_cache
from tests.kernels.paged_batches import tolerance


def test_decode_step_equals_last_row_of_prefilling_the_whole_sequence(device, generator):
    num_heads, num_kv_heads, head_dim, page_size, num_blocks = 6, 2, 64, 16, 12
    dtype = torch.float16
    prompt_lens = torch.randint(5, 40, (2,), generator=generator).tolist()
    block_tables = torch.randperm(num_blocks, generator=generator)[:8].view(2, 4).to(device=device, dtype=torch.int32)

    def noise(*size: int) -> torch.Tensor:
        return torch.randn(size, generator=generator).to(device=device, dtype=dtype)

    def slots_of(seq: int, positions: range) -> list[int]:
        return [int(block_tables[seq, p // page_size]) * page_size + p % page_size for p in positions]

    total = [length + 1 for length in prompt_lens]  # prompt, then one decoded token
    keys = [noise(length, num_kv_heads, head_dim) for length in total]
    values = [noise(length, num_kv_heads, head_dim) for length in total]
    queries = [noise(length, num_heads, head_dim) for length in total]
    key_cache = torch.zeros((num_blocks, page_size, num_kv_heads, head_dim), dtype=dtype, device=device)
    value_cache = torch.zeros_like(key_cache)
    scale = head_dim**-0.5

    # step 1: prefill both prompts
    prompt_slots = slots_of(0, range(prompt_lens[0])) + slots_of(1, range(prompt_lens[1]))
    write_kv_cache(
        torch.cat([k[:-1] for k in keys]), torch.cat([v[:-1] for v in values]), key_cache, value_cache,
        torch.tensor(prompt_slots, dtype=torch.int64, device=device),
    )
    query_start_loc = torch.tensor([0, prompt_lens[0], sum(prompt_lens)], dtype=torch.int32, device=device)
    paged_prefill_attention(
        torch.cat([q[:-1] for q in queries]), key_cache, value_cache, block_tables, query_start_loc,
        torch.tensor(prompt_lens, dtype=torch.int32, device=device), scale,
    )

    # step 2: one decode token each (plus a padding token with slot -1 that must write nothing)
    decode_slots = slots_of(0, range(prompt_lens[0], total[0])) + slots_of(1, range(prompt_lens[1], total[1])) + [-1]
    write_kv_cache(
        torch.stack([keys[0][-1], keys[1][-1], noise(num_kv_heads, head_dim)]),
        torch.stack([values[0][-1], values[1][-1], noise(num_kv_heads, head_dim)]),
        key_cache, value_cache, torch.tensor(decode_slots, dtype=torch.int64, device=device),
    )
    seq_lens = torch.tensor(total, dtype=torch.int32, device=device)
    decoded = paged_decode_attention(
        torch.stack([queries[0][-1], queries[1][-1]]), key_cache, value_cache, block_tables, seq_lens, scale,
        num_splits=2,
    )

    # the same positions computed as one prefill of the full sequences
    full_start_loc = torch.tensor([0, total[0], sum(total)], dtype=torch.int32, device=device)
    full = paged_prefill_attention(
        torch.cat(queries), key_cache, value_cache, block_tables, full_start_loc, seq_lens, scale
    )
    last_rows = torch.stack([full[total[0] - 1], full[sum(total) - 1]])
    torch.testing.assert_close(decoded, last_rows, **tolerance(dtype))
