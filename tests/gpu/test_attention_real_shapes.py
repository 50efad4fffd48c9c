"""Paged decode and prefill attention, compiled, at serving shapes: head dims 64/128, GQA 1/3/4/8, pages 16/32,
ragged batches, contexts up to 32k, and decode captured in a CUDA graph."""

from __future__ import annotations

import pytest
import torch

from arbi_kernels import paged_decode_attention, paged_prefill_attention
from tests.kernels.paged_batches import BatchShape, PagedBatch, random_paged_batch, tolerance
from tests.kernels.reference import paged_decode_attention_reference, paged_prefill_attention_reference

GROUP_SIZES = [1, 3, 4, 8]
NUM_KV_HEADS = 2


def _decode_both(batch: PagedBatch, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    arguments = (
        batch.query, batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens, batch.softmax_scale
    )
    return paged_decode_attention(*arguments, **kwargs), paged_decode_attention_reference(*arguments)


def _prefill_both(batch: PagedBatch) -> tuple[torch.Tensor, torch.Tensor]:
    arguments = (
        batch.query, batch.key_cache, batch.value_cache, batch.block_tables, batch.query_start_loc,
        batch.seq_lens, batch.softmax_scale,
    )
    return paged_prefill_attention(*arguments), paged_prefill_attention_reference(*arguments)


@pytest.mark.parametrize("page_size", [16, 32])
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_decode_ragged_batch(head_dim, group_size, page_size, device, generator):
    seq_lens = [1, *torch.randint(2, 4097, (7,), generator=generator, device=device).tolist()]
    shape = BatchShape(group_size * NUM_KV_HEADS, NUM_KV_HEADS, head_dim, page_size, torch.bfloat16)
    actual, expected = _decode_both(random_paged_batch(shape, [1] * len(seq_lens), seq_lens, device, generator))
    torch.testing.assert_close(actual, expected, **tolerance(torch.bfloat16))


@pytest.mark.parametrize(
    ("head_dim", "page_size", "dtype"),
    [(64, 16, torch.bfloat16), (64, 32, torch.float16), (128, 16, torch.float16), (128, 32, torch.bfloat16)],
)
def test_decode_long_contexts_up_to_32k(head_dim, page_size, dtype, device, generator):
    seq_lens = [32768, int(torch.randint(8192, 32768, (1,), generator=generator, device=device)), 1]
    shape = BatchShape(4 * NUM_KV_HEADS, NUM_KV_HEADS, head_dim, page_size, dtype)
    actual, expected = _decode_both(random_paged_batch(shape, [1] * 3, seq_lens, device, generator))
    torch.testing.assert_close(actual, expected, **tolerance(dtype))


@pytest.mark.parametrize("head_dim", [64, 128])
def test_decode_single_split_and_float32(head_dim, device, generator):
    seq_lens = torch.randint(1, 2049, (5,), generator=generator, device=device).tolist()
    for dtype in (torch.bfloat16, torch.float32):
        shape = BatchShape(3 * NUM_KV_HEADS, NUM_KV_HEADS, head_dim, 16, dtype)
        actual, expected = _decode_both(random_paged_batch(shape, [1] * 5, seq_lens, device, generator), num_splits=1)
        torch.testing.assert_close(actual, expected, **tolerance(dtype))


def test_decode_replays_in_a_cuda_graph(device, generator):
    """With max_seq_len and num_splits given, decode makes no host sync and can be captured once and replayed."""
    shape = BatchShape(8, 2, 128, 16, torch.bfloat16)
    batch = random_paged_batch(shape, [1] * 4, [4096] * 4, device, generator)
    seq_lens = batch.seq_lens.clone()
    arguments = (batch.query, batch.key_cache, batch.value_cache, batch.block_tables, seq_lens, batch.softmax_scale)
    paged_decode_attention(*arguments, max_seq_len=4096, num_splits=8)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = paged_decode_attention(*arguments, max_seq_len=4096, num_splits=8)
    for _ in range(2):
        seq_lens.copy_(torch.randint(1, 4097, (4,), generator=generator, device=device, dtype=torch.int32))
        graph.replay()
        expected = paged_decode_attention_reference(*arguments)
        torch.testing.assert_close(output, expected, **tolerance(torch.bfloat16))


@pytest.mark.parametrize("page_size", [16, 32])
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_prefill_ragged_batch_with_cached_prefixes(head_dim, group_size, page_size, device, generator):
    query_lens = [1, *torch.randint(2, 1025, (3,), generator=generator, device=device).tolist()]
    prefixes = [0, *torch.randint(0, 3001, (3,), generator=generator, device=device).tolist()]
    seq_lens = [q + p for q, p in zip(query_lens, prefixes)]
    shape = BatchShape(group_size * NUM_KV_HEADS, NUM_KV_HEADS, head_dim, page_size, torch.bfloat16)
    actual, expected = _prefill_both(random_paged_batch(shape, query_lens, seq_lens, device, generator))
    torch.testing.assert_close(actual, expected, **tolerance(torch.bfloat16))


@pytest.mark.parametrize(("head_dim", "dtype"), [(64, torch.float16), (128, torch.bfloat16)])
def test_prefill_long_prompt_and_long_prefix(head_dim, dtype, device, generator):
    """A 4k-token prompt from scratch next to a 1k-token chunk extending a 31k-token cached prefix."""
    query_lens, seq_lens = [4096, 1024], [4096, 32768]
    shape = BatchShape(4 * NUM_KV_HEADS, NUM_KV_HEADS, head_dim, 16, dtype)
    actual, expected = _prefill_both(random_paged_batch(shape, query_lens, seq_lens, device, generator))
    torch.testing.assert_close(actual, expected, **tolerance(dtype))
