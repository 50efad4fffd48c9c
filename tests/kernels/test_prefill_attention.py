"""Paged prefill/extend attention against the torch reference: cached prefixes, ragged batches, GQA, tiles."""

from __future__ import annotations

import pytest
import torch

from arbi_kernels import paged_prefill_attention
from arbi_kernels.prefill_attention import PrefillTiles
from tests.kernels.paged_batches import BatchShape, random_paged_batch, tolerance
from tests.kernels.reference import paged_prefill_attention_reference

SMALL_TILES = PrefillTiles(block_m=16, block_n=16, num_warps=4)


def _check(batch, **kwargs) -> None:
    arguments = (
        batch.query, batch.key_cache, batch.value_cache, batch.block_tables, batch.query_start_loc,
        batch.seq_lens, batch.softmax_scale,
    )
    actual = paged_prefill_attention(*arguments, **kwargs)
    expected = paged_prefill_attention_reference(*arguments)
    torch.testing.assert_close(actual, expected, **tolerance(batch.query.dtype))


def _ragged_lengths(generator: torch.Generator, count: int, max_query: int, max_prefix: int):
    query_lens = torch.randint(1, max_query + 1, (count,), generator=generator).tolist()
    prefixes = torch.randint(0, max_prefix + 1, (count,), generator=generator).tolist()
    return query_lens, [q + p for q, p in zip(query_lens, prefixes)]


@pytest.mark.parametrize(
    ("group_size", "page_size", "tiles"),
    [(1, 16, None), (3, 32, SMALL_TILES), (4, 16, None), (8, 32, SMALL_TILES)],
    ids=["g1-p16-default", "g3-p32-16x16", "g4-p16-default", "g8-p32-16x16"],
)
def test_matches_reference_with_cached_prefixes(group_size, page_size, tiles, device, generator):
    query_lens, seq_lens = _ragged_lengths(generator, count=3, max_query=36, max_prefix=60)
    shape = BatchShape(num_heads=group_size, num_kv_heads=1, head_dim=64, page_size=page_size, dtype=torch.float16)
    _check(random_paged_batch(shape, query_lens, seq_lens, device, generator), tiles=tiles)


def test_mixed_batch_of_prefill_decode_and_idle_sequences(device, generator):
    """Chunked prefill mixes a fresh prompt, a decode step and a sequence with no new tokens this step."""
    prompt = int(torch.randint(20, 40, (1,), generator=generator))
    query_lens, seq_lens = [prompt, 1, 0, 5], [prompt, 37, 12, 50]
    shape = BatchShape(num_heads=4, num_kv_heads=2, head_dim=64, page_size=16, dtype=torch.float32)
    _check(random_paged_batch(shape, query_lens, seq_lens, device, generator))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_dtypes_and_head_dims(dtype, head_dim, device, generator, interpreting):
    if dtype == torch.bfloat16 and interpreting:
        pytest.skip("Triton's interpreter multiplies bfloat16 bit patterns in tl.dot (triton-lang/triton#11584)")
    query_lens, seq_lens = _ragged_lengths(generator, count=2, max_query=24, max_prefix=40)
    shape = BatchShape(num_heads=4, num_kv_heads=2, head_dim=head_dim, page_size=16, dtype=dtype)
    _check(random_paged_batch(shape, query_lens, seq_lens, device, generator), tiles=SMALL_TILES)


def test_max_query_len_bound_may_exceed_the_true_maximum(device, generator):
    query_lens, seq_lens = _ragged_lengths(generator, count=2, max_query=20, max_prefix=20)
    shape = BatchShape(num_heads=2, num_kv_heads=1, head_dim=64, page_size=16, dtype=torch.float16)
    batch = random_paged_batch(shape, query_lens, seq_lens, device, generator)
    _check(batch, max_query_len=int(batch.query.shape[0]), tiles=SMALL_TILES)


def _valid_inputs():
    cache = torch.zeros(8, 16, 2, 64, dtype=torch.float16)
    return {
        "query": torch.zeros(5, 4, 64, dtype=torch.float16), "key_cache": cache, "value_cache": cache.clone(),
        "block_tables": torch.zeros(2, 4, dtype=torch.int32),
        "query_start_loc": torch.tensor([0, 2, 5], dtype=torch.int32),
        "seq_lens": torch.tensor([2, 9], dtype=torch.int32), "softmax_scale": 0.125,
    }


@pytest.mark.parametrize(
    ("field", "bad_value", "message"),
    [
        ("query_start_loc", torch.tensor([0, 2, 5], dtype=torch.int64), "query_start_loc: dtype"),
        ("query_start_loc", torch.tensor([0, 5], dtype=torch.int32), "query_start_loc: expected shape"),
        ("seq_lens", torch.tensor([2, 9], dtype=torch.int64), "seq_lens: dtype"),
        ("block_tables", torch.zeros(3, 4, dtype=torch.int32), "block_tables: expected shape"),
        ("query", torch.zeros(5, 4, 32, dtype=torch.float16), "key_cache: head_dim must equal query's 32"),
        ("max_query_len", 6, "max_query_len: must be in"),
    ],
)
def test_rejects_bad_arguments(field, bad_value, message):
    with pytest.raises(ValueError, match=message):
        paged_prefill_attention(**(_valid_inputs() | {field: bad_value}))


def test_rejects_bad_tiles():
    with pytest.raises(ValueError, match="block_m: must be a power of two >= 16"):
        PrefillTiles(block_m=8, block_n=16, num_warps=4)
    with pytest.raises(ValueError, match="num_stages"):
        PrefillTiles(block_m=16, block_n=16, num_warps=4, num_stages=0)
