"""The torch references themselves, checked against torch's own attention on dense (unpaged) tensors."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.kernels.paged_batches import BatchShape, random_paged_batch
from tests.kernels.reference import paged_decode_attention_reference, paged_prefill_attention_reference


def _dense_context(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """Token by token through the block table, independently of the reference's gather."""
    block_size = cache.shape[1]
    return torch.stack([cache[int(block_table[t // block_size]), t % block_size] for t in range(length)])


def test_prefill_reference_matches_sdpa_with_prefix_mask(generator):
    shape = BatchShape(num_heads=6, num_kv_heads=2, head_dim=32, page_size=8, dtype=torch.float32)
    query_lens, seq_lens = [5, 9], [12, 9]
    batch = random_paged_batch(shape, query_lens, seq_lens, "cpu", generator)
    output = paged_prefill_attention_reference(
        batch.query, batch.key_cache, batch.value_cache, batch.block_tables, batch.query_start_loc,
        batch.seq_lens, batch.softmax_scale,
    )
    for seq, (q_len, seq_len) in enumerate(zip(query_lens, seq_lens)):
        begin = int(batch.query_start_loc[seq])
        key = _dense_context(batch.key_cache, batch.block_tables[seq], seq_len).repeat_interleave(3, dim=1)
        value = _dense_context(batch.value_cache, batch.block_tables[seq], seq_len).repeat_interleave(3, dim=1)
        # query i sits at position seq_len - q_len + i: it sees keys 0 .. seq_len - q_len + i
        mask = torch.ones(q_len, seq_len, dtype=torch.bool).tril(diagonal=seq_len - q_len)
        expected = F.scaled_dot_product_attention(
            batch.query[begin : begin + q_len].transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1),
            attn_mask=mask, scale=batch.softmax_scale,
        ).transpose(0, 1)
        torch.testing.assert_close(output[begin : begin + q_len], expected, atol=1e-5, rtol=1e-5)


def test_decode_reference_is_the_last_row_of_prefill(generator):
    shape = BatchShape(num_heads=4, num_kv_heads=4, head_dim=16, page_size=4, dtype=torch.float32)
    seq_lens = [7, 1, 13]
    batch = random_paged_batch(shape, [1, 1, 1], seq_lens, "cpu", generator)
    decode = paged_decode_attention_reference(
        batch.query, batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens, batch.softmax_scale
    )
    prefill = paged_prefill_attention_reference(
        batch.query, batch.key_cache, batch.value_cache, batch.block_tables, batch.query_start_loc,
        batch.seq_lens, batch.softmax_scale,
    )
    torch.testing.assert_close(decode, prefill)
    # a one-token context returns its value row exactly
    only_value = batch.value_cache[int(batch.block_tables[1, 0]), 0]
    torch.testing.assert_close(decode[1], only_value)
