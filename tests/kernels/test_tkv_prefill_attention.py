"""TKV paged prefill/extend attention against the torch reference, under both rules of what a query reads exact
(the chunk's tokens and its first query's window, or only the query's own window): cached prefixes, sinks inside
and beyond the first tile, GQA, bits, exact windows of E = 1, 2, 3 blocks (chunks from mid-block across block
boundaries, the window's earlier positions from the tail slot's ring), where the two rules agree and differ, and
the write and tail kernels feeding attention as the engine runs them (write, attend, store the tail)."""

from __future__ import annotations

import pytest
import torch

from arbi_kernels import (
    store_tkv_tail,
    tkv_paged_decode_attention,
    tkv_paged_prefill_attention,
    write_tkv_cache,
)
from arbi_kernels.prefill_attention import PrefillTiles
from arbi_kernels.tkv_exact import exact_window_blocks
from arbi_kernels.tkv_prefill_attention import reads_coded_prefix
from tests.kernels.tkv_batches import (
    TkvBatch,
    TkvShape,
    assert_tkv_close,
    random_model_space_kv,
    random_tkv_batch,
    with_decoded_exact,
)
from tests.kernels.tkv_reference import (
    tkv_paged_decode_attention_reference,
    tkv_paged_prefill_attention_reference,
)

SMALL_TILES = PrefillTiles(block_m=16, block_n=16, num_warps=4)


def _arguments(batch: TkvBatch) -> tuple:
    return (batch.query, batch.layer, batch.block_tables, batch.query_start_loc, batch.seq_lens, batch.tail_slots,
            batch.key_exact, batch.value_exact, batch.softmax_scale)


def _check(batch: TkvBatch, compute_dtype: torch.dtype, tiles: PrefillTiles = SMALL_TILES,
           chunk_exact: bool = True) -> torch.Tensor:
    """The kernel against the reference, with the launch's prefixes unknown and, where that compiles the coded
    tiles out (no chunk reaches them), bounded by their longest."""
    expected = tkv_paged_prefill_attention_reference(*_arguments(batch), chunk_exact=chunk_exact)
    query_lens = batch.query_start_loc[1:] - batch.query_start_loc[:-1]
    max_prefix_len = int((batch.seq_lens - query_lens).max())
    bounds = [None]
    if not reads_coded_prefix(chunk_exact, max_prefix_len, batch.layer.block_size,
                              exact_window_blocks(batch.layer)):
        bounds.append(max_prefix_len)
    for bound in bounds:
        assert_tkv_close(tkv_paged_prefill_attention(*_arguments(batch), tiles=tiles, compute_dtype=compute_dtype,
                                                     chunk_exact=chunk_exact, max_prefix_len=bound),
                         expected, compute_dtype)
    return expected


@pytest.mark.parametrize(
    ("page_size", "tiles", "sink_tokens", "compute_dtype"),
    [
        (16, PrefillTiles(block_m=16, block_n=32, num_warps=4), 0, torch.float32),
        (16, PrefillTiles(block_m=32, block_n=64, num_warps=4), 1, torch.float32),
        (32, PrefillTiles(block_m=16, block_n=16, num_warps=4), 4, torch.float32),  # key tiles inside a block
        (32, PrefillTiles(block_m=32, block_n=32, num_warps=4), 1, torch.float32),
        (32, PrefillTiles(block_m=16, block_n=64, num_warps=4), 0, torch.float16),
    ],
)
@pytest.mark.parametrize("chunk_exact", [True, False])
def test_own_block_exact_for_chunks_from_mid_block(page_size, tiles, sink_tokens, compute_dtype, chunk_exact, device,
                                                   generator):
    """Chunks that start mid-block (their first block's earlier positions come from the tail slot) and cross one
    or two block boundaries, a chunk from a block's start, a prompt; the result must tell exact from decoded."""
    offset = int(torch.randint(1, page_size, (1,), generator=generator))
    prefixes = [offset, page_size + offset, 2 * page_size, 0]
    query_lens = [page_size + 3, 2 * page_size, page_size - 1, page_size + 5]
    seq_lens = [q + p for q, p in zip(query_lens, prefixes)]
    shape = TkvShape(4, 2, 64, page_size, 4, 4, 32, sink_tokens)
    batch = random_tkv_batch(shape, query_lens, seq_lens, device, generator)
    expected = _check(batch, compute_dtype, tiles, chunk_exact)
    coded = tkv_paged_prefill_attention_reference(*_arguments(with_decoded_exact(batch)), chunk_exact=chunk_exact)
    with pytest.raises(AssertionError):
        assert_tkv_close(coded, expected, compute_dtype)


@pytest.mark.parametrize(
    ("page_size", "exact_blocks", "tiles", "sink_tokens", "compute_dtype"),
    [
        (4, 3, PrefillTiles(block_m=16, block_n=16, num_warps=4), 1, torch.float32),  # tiles span several blocks
        (8, 2, PrefillTiles(block_m=16, block_n=32, num_warps=4), 0, torch.float32),
        (16, 3, PrefillTiles(block_m=16, block_n=16, num_warps=4), 1, torch.float16),  # windows span several tiles
    ],
)
@pytest.mark.parametrize("chunk_exact", [True, False])
def test_exact_window_for_chunks_from_mid_block(page_size, exact_blocks, tiles, sink_tokens, compute_dtype, chunk_exact,
                                                device, generator):
    """Chunks that start mid-block or at a block's start after a longer prefix (their first window's earlier
    positions come from the tail ring) and span several blocks, a prompt shorter than the window, a longer one;
    the result must differ from the one with the ring's rows decoded from codes."""
    window = exact_blocks * page_size
    offset = int(torch.randint(1, page_size, (1,), generator=generator))
    prefixes = [offset, window + page_size + offset, 2 * window, 0, 0]
    query_lens = [2 * page_size + 3, window + 5, page_size + 1, window - 1, 2 * window + 3]
    seq_lens = [q + p for q, p in zip(query_lens, prefixes)]
    shape = TkvShape(2, 1, 32, page_size, 4, 4, 16, sink_tokens, exact_blocks=exact_blocks)
    batch = random_tkv_batch(shape, query_lens, seq_lens, device, generator)
    expected = _check(batch, compute_dtype, tiles, chunk_exact)
    coded = tkv_paged_prefill_attention_reference(*_arguments(with_decoded_exact(batch, tail_only=True)),
                                                  chunk_exact=chunk_exact)
    with pytest.raises(AssertionError):
        assert_tkv_close(coded[: sum(query_lens[:3])], expected[: sum(query_lens[:3])], compute_dtype)


@pytest.mark.parametrize(
    ("key_bits", "value_bits", "group_size", "sink_tokens", "compute_dtype"),
    [(4, 4, 1, 1, torch.float32), (3, 6, 4, 0, torch.float32), (2, 5, 2, 3, torch.float16)],
)
@pytest.mark.parametrize("chunk_exact", [True, False])
def test_ragged_batch_with_cached_prefixes(key_bits, value_bits, group_size, sink_tokens, compute_dtype, chunk_exact,
                                           device, generator):
    query_lens = [1, *torch.randint(2, 40, (2,), generator=generator).tolist()]
    prefixes = [0, 0, int(torch.randint(1, 60, (1,), generator=generator))]
    seq_lens = [q + p for q, p in zip(query_lens, prefixes)]
    shape = TkvShape(2 * group_size, 2, 64, 16, key_bits, value_bits, 16, sink_tokens)
    _check(random_tkv_batch(shape, query_lens, seq_lens, device, generator), compute_dtype, chunk_exact=chunk_exact)


@pytest.mark.parametrize("chunk_exact", [True, False])
def test_sink_prefix_longer_than_a_tile(chunk_exact, device, generator):
    """20 sink positions against 16-key tiles: queries inside the sink prefix, and a chunk just after it."""
    shape = TkvShape(2, 1, 32, 32, 4, 4, 16, sink_tokens=20)
    _check(random_tkv_batch(shape, [30, 6], [30, 26], device, generator), torch.float32, chunk_exact=chunk_exact)


def test_the_rules_agree_on_one_block_chunks_and_differ_on_longer_ones(device, generator):
    """A chunk of exactly one block from a block's start reads the same keys exact under both rules; a chunk of
    three blocks reads its first blocks exact only under chunk_exact (its later queries' windows exclude them)."""
    page_size = 8
    shape = TkvShape(2, 1, 32, page_size, 4, 4, 16, sink_tokens=1)
    batch = random_tkv_batch(shape, [page_size, 3 * page_size], [3 * page_size, 3 * page_size], device, generator)
    chunk = _check(batch, torch.float32, chunk_exact=True)
    window = _check(batch, torch.float32, chunk_exact=False)
    assert_tkv_close(chunk[:page_size], window[:page_size], torch.float32)
    last_block = slice(page_size + 2 * page_size, 4 * page_size)  # the prompt's third block: windows differ
    with pytest.raises(AssertionError):
        assert_tkv_close(chunk[last_block], window[last_block], torch.float32)


@pytest.mark.parametrize(("page_size", "exact_blocks", "chunk_exact"), [(16, 1, True), (4, 3, True), (4, 3, False)])
def test_write_then_attend_as_the_engine_does(page_size, exact_blocks, chunk_exact, device, generator):
    """A prompt chunk is written by the kernel, attended by prefill, then decode steps follow; the tail kernel
    keeps the window's ring between steps."""
    shape = TkvShape(4, 2, 64, page_size, 4, 3, 32, sink_tokens=1, exact_blocks=exact_blocks)
    prompt_len = 37
    batch = random_tkv_batch(shape, [1], [prompt_len + 3], device, generator)  # a block table; pools are rewritten
    layer, table, tail_slots = batch.layer, batch.block_tables, batch.tail_slots
    for start, end in ((0, 13), (13, prompt_len), (prompt_len, prompt_len + 1), (prompt_len + 1, prompt_len + 3)):
        positions = torch.arange(start, end, device=device)
        slots = table[0].long()[positions // shape.page_size] * shape.page_size + positions % shape.page_size
        key, value = random_model_space_kv(positions, 2, 64, device, generator)
        exact = write_tkv_cache(key, value, positions, slots, layer)
        query = torch.randn((end - start, 4, 64), generator=generator).to(device)
        seq_lens = torch.tensor([end], dtype=torch.int32, device=device)
        starts = torch.tensor([0, end - start], dtype=torch.int32, device=device)
        if end - start > 1:
            arguments = (query, layer, table, starts, seq_lens, tail_slots, *exact, batch.softmax_scale)
            actual = tkv_paged_prefill_attention(*arguments, tiles=SMALL_TILES, compute_dtype=torch.float32,
                                                 chunk_exact=chunk_exact, max_prefix_len=start)
            expected = tkv_paged_prefill_attention_reference(*arguments, chunk_exact=chunk_exact)
        else:
            arguments = (query, layer, table, seq_lens, tail_slots, *exact, batch.softmax_scale)
            actual = tkv_paged_decode_attention(*arguments, num_splits=2, compute_dtype=torch.float32)
            expected = tkv_paged_decode_attention_reference(*arguments)
        assert_tkv_close(actual, expected, torch.float32)
        store_tkv_tail(*exact, layer, starts, seq_lens, tail_slots)


def test_rejects_bad_arguments(device, generator):
    shape = TkvShape(4, 2, 64, 16, 4, 4)
    batch = random_tkv_batch(shape, [2, 1], [3, 5], device, generator)
    arguments = {
        "query": batch.query, "layer": batch.layer, "block_tables": batch.block_tables,
        "query_start_loc": batch.query_start_loc, "seq_lens": batch.seq_lens, "tail_slots": batch.tail_slots,
        "key_exact": batch.key_exact, "value_exact": batch.value_exact, "softmax_scale": batch.softmax_scale,
    }
    cases = [
        ({"query_start_loc": batch.query_start_loc[:2]}, "query_start_loc: expected shape"),
        ({"query_start_loc": batch.query_start_loc.long()}, "query_start_loc: dtype"),
        ({"query": batch.query[:, :, :32]}, "query: expected shape"),
        ({"max_query_len": 7}, "max_query_len"),
        ({"max_prefix_len": -1}, "max_prefix_len: must be >= 0"),
        ({"compute_dtype": torch.int8}, "compute_dtype"),
        ({"key_exact": batch.key_exact[:2]}, r"key_exact: expected shape \[num_tokens=3"),
        ({"value_exact": batch.value_exact.transpose(0, 1).contiguous().transpose(0, 1)}, "value_exact: strides"),
        ({"tail_slots": batch.tail_slots[:1]}, "tail_slots: expected shape"),
        ({"tiles": PrefillTiles(64, 32, 4)}, "block_n 32 is narrower than block_m 64"),
        ({"tiles": PrefillTiles(64, 16, 8)}, "miscompiles on sm_90"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            tkv_paged_prefill_attention(**(arguments | change))


def test_the_coded_tiles_are_compiled_out_only_where_no_chunk_reaches_them():
    """Under the chunk rule a prefix below E blocks keeps every key exact; E blocks or more, the per-query rule, or
    an unknown prefix may read codes."""
    assert not reads_coded_prefix(True, 0, 16, 4)
    assert not reads_coded_prefix(True, 63, 16, 4)
    assert reads_coded_prefix(True, 64, 16, 4)
    assert reads_coded_prefix(True, None, 16, 4)
    assert reads_coded_prefix(False, 0, 16, 4)
