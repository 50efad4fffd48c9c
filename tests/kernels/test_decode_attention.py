"""Paged decode attention against the torch reference: GQA groups, page sizes, splits, ragged contexts."""

from __future__ import annotations

import pytest
import torch

from arbi_kernels import paged_decode_attention
from arbi_kernels.decode_attention import MERGE_SPLITS, DecodeTiles, choose_num_splits
from tests.kernels.paged_batches import BatchShape, random_paged_batch, tolerance
from tests.kernels.reference import paged_decode_attention_reference


def _check(batch, **kwargs) -> None:
    query = batch.query
    actual = paged_decode_attention(
        query, batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens, batch.softmax_scale, **kwargs
    )
    expected = paged_decode_attention_reference(
        query, batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens, batch.softmax_scale
    )
    torch.testing.assert_close(actual, expected, **tolerance(query.dtype))


@pytest.mark.parametrize(
    ("group_size", "page_size", "num_splits"), [(1, 16, 1), (3, 32, 3), (4, 16, 2), (8, 32, 1), (8, 16, 4)]
)
def test_matches_reference_on_ragged_batch(group_size, page_size, num_splits, device, generator):
    seq_lens = [1, *torch.randint(2, 200, (2,), generator=generator).tolist()]
    shape = BatchShape(num_heads=2 * group_size, num_kv_heads=2, head_dim=64, page_size=page_size, dtype=torch.float16)
    batch = random_paged_batch(shape, [1] * len(seq_lens), seq_lens, device, generator)
    _check(batch, num_splits=num_splits)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_dtypes_and_head_dims(dtype, head_dim, device, generator, interpreting):
    if dtype == torch.bfloat16 and interpreting:
        pytest.skip("Triton's interpreter multiplies bfloat16 bit patterns in tl.dot (triton-lang/triton#11584)")
    seq_lens = torch.randint(1, 150, (3,), generator=generator).tolist()
    shape = BatchShape(num_heads=4, num_kv_heads=1, head_dim=head_dim, page_size=16, dtype=dtype)
    _check(random_paged_batch(shape, [1] * 3, seq_lens, device, generator), num_splits=2)


def test_more_splits_than_tokens_and_small_tiles(device, generator):
    """Splits past a short sequence are empty and must not disturb the merge; 16-token tiles cross pages."""
    seq_lens = [3, int(torch.randint(100, 300, (1,), generator=generator))]
    shape = BatchShape(num_heads=6, num_kv_heads=2, head_dim=64, page_size=32, dtype=torch.float32)
    batch = random_paged_batch(shape, [1, 1], seq_lens, device, generator)
    _check(batch, num_splits=7, tiles=DecodeTiles(block_n=16, num_warps=4))


def test_a_launch_sized_for_a_longer_bound(device, generator):
    """As a CUDA graph captured at max_model_len launches it: splits chosen for a bound far above the sequences,
    each sequence cut into them by its own length (some splits of the shortest one empty)."""
    seq_lens = [5, int(torch.randint(100, 200, (1,), generator=generator)), 64]
    shape = BatchShape(num_heads=4, num_kv_heads=2, head_dim=64, page_size=16, dtype=torch.float32)
    batch = random_paged_batch(shape, [1] * 3, seq_lens, device, generator)
    _check(batch, num_splits=12, max_seq_len=8192, tiles=DecodeTiles(block_n=16, num_warps=4))


def test_merge_over_several_loop_steps(device, generator):
    """More splits than the merge kernel folds in one loop step (MERGE_SPLITS), the last step partly past
    num_splits, and the short sequence's splits mostly empty."""
    seq_lens = [20, int(torch.randint(600, 700, (1,), generator=generator))]
    shape = BatchShape(num_heads=4, num_kv_heads=2, head_dim=64, page_size=16, dtype=torch.float32)
    batch = random_paged_batch(shape, [1, 1], seq_lens, device, generator)
    _check(batch, num_splits=2 * MERGE_SPLITS.value + 5, tiles=DecodeTiles(block_n=16, num_warps=4))


def test_zero_length_sequence_gives_zeros(device, generator):
    shape = BatchShape(num_heads=4, num_kv_heads=2, head_dim=64, page_size=16, dtype=torch.float16)
    batch = random_paged_batch(shape, [1, 0], [40, 0], device, generator)
    query = torch.randn((2, 4, 64), generator=generator).to(device=device, dtype=torch.float16)
    for num_splits in (1, 2):
        output = paged_decode_attention(
            query, batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens, batch.softmax_scale,
            num_splits=num_splits,
        )
        assert torch.count_nonzero(output[1]) == 0
        assert torch.count_nonzero(output[0]) > 0


def test_strided_query_view(device, generator):
    """A query sliced out of a fused QKV projection (row stride > Hq * D) is read through its strides."""
    shape = BatchShape(num_heads=6, num_kv_heads=2, head_dim=64, page_size=16, dtype=torch.float16)
    seq_lens = torch.randint(1, 100, (2,), generator=generator).tolist()
    batch = random_paged_batch(shape, [1, 1], seq_lens, device, generator)
    fused = torch.randn((2, 10 * 64), generator=generator).to(device=device, dtype=torch.float16)
    query = fused[:, : 6 * 64].view(2, 6, 64)
    actual = paged_decode_attention(
        query, batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens, batch.softmax_scale,
        num_splits=2,
    )
    expected = paged_decode_attention_reference(
        query, batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens, batch.softmax_scale
    )
    torch.testing.assert_close(actual, expected, **tolerance(torch.float16))


def test_num_splits_heuristic_fills_the_gpu_without_tiny_splits():
    assert choose_num_splits(num_seqs=1, num_kv_heads=8, max_seq_len=32768, num_sms=132) == 128
    assert choose_num_splits(num_seqs=32, num_kv_heads=8, max_seq_len=4096, num_sms=132) == 4
    assert choose_num_splits(num_seqs=128, num_kv_heads=8, max_seq_len=512, num_sms=132) == 1
    assert choose_num_splits(num_seqs=256, num_kv_heads=8, max_seq_len=32768, num_sms=132) == 1
    assert choose_num_splits(num_seqs=1, num_kv_heads=1, max_seq_len=300, num_sms=132) == 2
    assert choose_num_splits(num_seqs=4, num_kv_heads=2, max_seq_len=0, num_sms=132) == 1


def _valid_inputs():
    query = torch.zeros(2, 4, 64, dtype=torch.float16)
    cache = torch.zeros(8, 16, 2, 64, dtype=torch.float16)
    return {
        "query": query, "key_cache": cache, "value_cache": cache.clone(),
        "block_tables": torch.zeros(2, 4, dtype=torch.int32), "seq_lens": torch.ones(2, dtype=torch.int32),
        "softmax_scale": 0.125,
    }


@pytest.mark.parametrize(
    ("field", "bad_value", "message"),
    [
        ("query", torch.zeros(2, 4, 64, dtype=torch.int32), "query: dtype"),
        ("query", torch.zeros(3, 4, 64, dtype=torch.float16), "query: expected shape [num_seqs=2"),
        ("query", torch.zeros(2, 3, 64, dtype=torch.float16), "num_heads 3 must be a multiple of num_kv_heads 2"),
        ("value_cache", torch.zeros(8, 32, 2, 64, dtype=torch.float16), "value_cache: expected shape"),
        ("key_cache", torch.zeros(8, 16, 2, 64, dtype=torch.float32), "key_cache/value_cache: dtype"),
        ("block_tables", torch.zeros(2, 4, dtype=torch.int64), "block_tables: dtype"),
        ("block_tables", torch.zeros(3, 4, dtype=torch.int32), "block_tables: expected shape [num_seqs=2"),
        ("seq_lens", torch.ones(2, 1, dtype=torch.int32), "seq_lens: expected shape"),
        ("softmax_scale", 0.0, "softmax_scale: must be a finite positive number"),
        ("query", torch.zeros(2, 8, 128, dtype=torch.float16)[:, :, ::2], "query: last dimension must be contiguous"),
    ],
)
def test_rejects_bad_arguments(field, bad_value, message):
    arguments = _valid_inputs() | {field: bad_value}
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        paged_decode_attention(**arguments)


def test_rejects_unsupported_head_dim():
    arguments = _valid_inputs()
    arguments["query"] = torch.zeros(2, 4, 80, dtype=torch.float16)
    arguments["key_cache"] = torch.zeros(8, 16, 2, 80, dtype=torch.float16)
    arguments["value_cache"] = torch.zeros(8, 16, 2, 80, dtype=torch.float16)
    with pytest.raises(NotImplementedError, match="head_dim 80"):
        paged_decode_attention(**arguments)


def test_rejects_bad_tiles_and_splits():
    with pytest.raises(ValueError, match="block_n: must be a power of two"):
        DecodeTiles(block_n=24)
    with pytest.raises(ValueError, match="num_warps"):
        DecodeTiles(num_warps=3)
    with pytest.raises(ValueError, match="num_splits"):
        paged_decode_attention(**_valid_inputs(), num_splits=0)
