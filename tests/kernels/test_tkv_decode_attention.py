"""TKV paged decode attention against the torch reference: bits, GQA groups, pages, splits, sinks, ragged contexts,
and the query's exact window (its own block and the E - 1 before it: the tail slot's ring + the new token's exact
row) read exact wherever the new token sits, for E = 1, 2 and 3, windows across splits and contexts shorter than
the window."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from arbi_kernels import tkv_paged_decode_attention
from arbi_kernels.tkv_decode_attention import TkvDecodeTiles, choose_tkv_num_splits
from tests.kernels.tkv_batches import (
    TKV_POOLS,
    TkvBatch,
    TkvShape,
    assert_tkv_close,
    poison_exact_window_metadata,
    random_tkv_batch,
    with_decoded_exact,
)
from tests.kernels.tkv_reference import tkv_paged_decode_attention_reference


def _arguments(batch: TkvBatch, query: torch.Tensor) -> tuple:
    return (query, batch.layer, batch.block_tables, batch.seq_lens, batch.tail_slots, batch.key_exact,
            batch.value_exact, batch.softmax_scale)


def _check(batch: TkvBatch, query: torch.Tensor, compute_dtype: torch.dtype, **kwargs) -> torch.Tensor:
    actual = tkv_paged_decode_attention(*_arguments(batch, query), compute_dtype=compute_dtype, **kwargs)
    assert_tkv_close(actual, tkv_paged_decode_attention_reference(*_arguments(batch, query)), compute_dtype)
    return actual


@pytest.mark.parametrize(
    ("page_size", "sink_tokens", "num_splits", "block_n", "prefetch", "compute_dtype"),
    [
        (16, 0, 3, 16, False, torch.float32),
        (16, 1, 1, 64, False, torch.float32),
        (32, 4, 4, 16, False, torch.float32),  # 16-token splits: a 32-token block spans two
        (32, 1, 2, 32, True, torch.float32),
        (16, 4, 3, 16, True, torch.float16),
    ],
)
def test_last_block_is_read_exact_at_every_offset(page_size, sink_tokens, num_splits, block_n, prefetch,
                                                  compute_dtype, device, generator):
    """New tokens at offsets 0, 1 and page_size - 1 of a first and of a later block: the block's earlier positions
    come from the tail slot, the new token from its exact row, never from their codes (the unread-code check:
    the last blocks' scales and zeros are NaN), and the result tells exact from decoded values apart."""
    shape = TkvShape(4, 2, 64, page_size, 4, 3, 32, sink_tokens)
    blocks = int(torch.randint(1, 3, (1,), generator=generator))
    seq_lens = [1, 2, page_size, blocks * page_size + 1, blocks * page_size + 2, (blocks + 1) * page_size]
    batch = random_tkv_batch(shape, [1] * len(seq_lens), seq_lens, device, generator)
    assert not torch.equal(batch.tail_slots.cpu(), torch.arange(len(seq_lens), dtype=torch.int32))
    tiles = TkvDecodeTiles(block_n=block_n, num_stages=1 if prefetch else 2, prefetch=prefetch)
    expected = tkv_paged_decode_attention_reference(*_arguments(batch, batch.query))
    coded = tkv_paged_decode_attention_reference(*_arguments(with_decoded_exact(batch), batch.query))
    rows = [row for row, seq_len in enumerate(seq_lens) if seq_len > max(sink_tokens, 1)]  # rows with exact keys
    with pytest.raises(AssertionError):
        assert_tkv_close(coded[rows], expected[rows], compute_dtype)
    last_blocks = batch.block_tables[torch.arange(len(seq_lens)), (batch.seq_lens - 1).long() // page_size].long()
    for pool in (batch.layer.key_metadata, batch.layer.value_metadata):
        pool[last_blocks] = float("nan")
    actual = tkv_paged_decode_attention(*_arguments(batch, batch.query), num_splits=num_splits, tiles=tiles,
                                        compute_dtype=compute_dtype)
    assert_tkv_close(actual, expected, compute_dtype)


@pytest.mark.parametrize(
    ("page_size", "exact_blocks", "sink_tokens", "num_splits", "block_n", "compute_dtype", "window_blocks"),
    [
        (4, 3, 1, 3, 16, torch.float32, 1),  # 12-token windows, 16-token splits: windows cross splits
        (8, 2, 0, 4, 16, torch.float32, 1),
        (8, 3, 1, 2, 32, torch.float16, 3),  # 24 positions in one 32-row tile
        (4, 3, 0, 3, 16, torch.float32, 2),  # tiles of 2 blocks over a 3-block window: the second one half empty
        (16, 2, 0, 1, 64, torch.float32, 1),
    ],
)
def test_exact_window_is_read_exact_at_every_offset(page_size, exact_blocks, sink_tokens, num_splits, block_n,
                                                    compute_dtype, window_blocks, device, generator):
    """New tokens at offsets 0, 1 and page_size - 1 of a first block, of a block inside the first window (a context
    shorter than the window) and of later blocks: the window's positions come from the tail ring and the new
    token's exact row, never from their codes (NaN scales and zeros in every window block)."""
    shape = TkvShape(4, 2, 64, page_size, 4, 3, 32, sink_tokens, exact_blocks=exact_blocks)
    window = exact_blocks * page_size
    seq_lens = [1, 2, page_size, page_size + 1, window - 1, window + 1, window + 2 * page_size,
                3 * window + page_size // 2 + 1]
    batch = random_tkv_batch(shape, [1] * len(seq_lens), seq_lens, device, generator)
    expected = tkv_paged_decode_attention_reference(*_arguments(batch, batch.query))
    poison_exact_window_metadata(batch)
    tiles = TkvDecodeTiles(block_n=block_n, num_stages=1, window_blocks=window_blocks)
    actual = tkv_paged_decode_attention(*_arguments(batch, batch.query), num_splits=num_splits, tiles=tiles,
                                        compute_dtype=compute_dtype)
    assert_tkv_close(actual, expected, compute_dtype)


@pytest.mark.parametrize("exact_blocks", [1, 2])
def test_previous_block_is_read_exact(exact_blocks, device, generator):
    """New tokens at a block's first offset: with E = 2 the previous block comes from the tail ring, so decoding it
    from its codes instead gives another result, which the kernel must not match; with E = 1 the tail is not read
    at all, so both references agree bit for bit."""
    page_size = 8
    shape = TkvShape(4, 2, 64, page_size, 3, 3, 32, 1, exact_blocks=exact_blocks)
    seq_lens = [page_size + 1, 4 * page_size + 1, 7 * page_size + 1]
    batch = random_tkv_batch(shape, [1] * len(seq_lens), seq_lens, device, generator)
    _check(batch, batch.query, torch.float32, num_splits=2)
    expected = tkv_paged_decode_attention_reference(*_arguments(batch, batch.query))
    coded = tkv_paged_decode_attention_reference(*_arguments(with_decoded_exact(batch, tail_only=True), batch.query))
    if exact_blocks == 1:
        assert torch.equal(coded, expected)
    else:
        with pytest.raises(AssertionError):
            assert_tkv_close(coded, expected, torch.float32)


@pytest.mark.parametrize(
    ("key_bits", "value_bits", "group_size", "page_size", "num_splits", "sink_tokens", "compute_dtype"),
    [
        (4, 4, 1, 16, 1, 1, torch.float32),
        (3, 5, 4, 32, 3, 2, torch.float32),
        (2, 8, 8, 16, 2, 0, torch.float16),
        (6, 6, 3, 32, 4, 1, torch.float16),
        (8, 3, 4, 16, 2, 4, torch.float32),
    ],
)
def test_matches_reference_on_ragged_batch(
    key_bits, value_bits, group_size, page_size, num_splits, sink_tokens, compute_dtype, device, generator
):
    seq_lens = [1, *torch.randint(2, 160, (2,), generator=generator).tolist()]
    shape = TkvShape(2 * group_size, 2, 64, page_size, key_bits, value_bits, 16, sink_tokens)
    batch = random_tkv_batch(shape, [1] * 3, seq_lens, device, generator)
    _check(batch, batch.query, compute_dtype, num_splits=num_splits)


def test_sink_prefix_spans_splits_and_tiles(device, generator):
    """20 sink positions with 16-token splits: splits 0 and 1 both read sinks, split 1 also codes."""
    shape = TkvShape(4, 1, 64, 32, 4, 4, 32, sink_tokens=20)
    seq_lens = [5, 20, int(torch.randint(21, 100, (1,), generator=generator))]
    batch = random_tkv_batch(shape, [1] * 3, seq_lens, device, generator)
    _check(batch, batch.query, torch.float32, num_splits=7, tiles=TkvDecodeTiles(block_n=16))


@pytest.mark.parametrize(("key_bits", "value_bits", "num_splits", "sink_tokens"), [(4, 4, 3, 20), (3, 8, 1, 0)])
def test_register_prefetch(key_bits, value_bits, num_splits, sink_tokens, device, generator):
    """The kernel's own one-tile-ahead loads: splits of several tiles, a sink prefix across tiles, an empty split."""
    shape = TkvShape(4, 2, 64, 32, key_bits, value_bits, 16, sink_tokens)
    seq_lens = [1, 20, int(torch.randint(50, 120, (1,), generator=generator))]
    batch = random_tkv_batch(shape, [1] * 3, seq_lens, device, generator)
    tiles = TkvDecodeTiles(block_n=16, num_stages=1, prefetch=True, max_registers=128)
    for compute_dtype in (torch.float32, torch.float16):
        _check(batch, batch.query, compute_dtype, num_splits=num_splits, tiles=tiles)


def test_head_dim_128_and_16bit_queries(device, generator):
    shape = TkvShape(8, 2, 128, 16, 4, 2, 32, 1)
    batch = random_tkv_batch(shape, [1] * 2, torch.randint(1, 100, (2,), generator=generator).tolist(), device,
                             generator)
    for dtype in (torch.float16, torch.bfloat16):
        _check(batch, batch.query.to(dtype), torch.float16, num_splits=2)


@pytest.mark.parametrize(("key_bits", "value_bits"), [(3, 5), (5, 6)])
def test_head_dim_16_odd_widths(key_bits, value_bits, device, generator):
    """A 16-channel head vector of 3 or 5 bits is 6 or 10 bytes, no whole number of int32 units: the kernel
    reads those pools byte by byte (the 6-bit one, 12 bytes, as int32)."""
    shape = TkvShape(4, 2, 16, 16, key_bits, value_bits, 8, 1)
    batch = random_tkv_batch(shape, [1] * 2, [37, 70], device, generator)
    for compute_dtype in (torch.float32, torch.float16):
        _check(batch, batch.query, compute_dtype, num_splits=2, tiles=TkvDecodeTiles(block_n=16, num_stages=1))


def test_tiles_reject_bad_shapes():
    for tiles, message in (({"block_n": 24}, "block_n"), ({"num_warps": 3}, "num_warps"),
                           ({"num_stages": 0}, "num_stages"), ({"max_registers": 300}, "max_registers"),
                           ({"window_blocks": 0}, "window_blocks")):
        with pytest.raises(ValueError, match=message):
            TkvDecodeTiles(**tiles)


def test_zero_length_sequence_gives_zeros(device, generator):
    shape = TkvShape(4, 2, 64, 16, 4, 4)
    batch = random_tkv_batch(shape, [1, 0], [40, 0], device, generator)
    query = torch.randn((2, 4, 64), generator=generator).to(device)
    padding = torch.full((1, 2, 64), float("nan"), dtype=torch.float16, device=device)  # a padding row reads nothing
    batch = dataclasses.replace(batch, key_exact=torch.cat([batch.key_exact, padding]),
                                value_exact=torch.cat([batch.value_exact, padding]))
    for num_splits in (1, 2):
        output = _check(batch, query, torch.float32, num_splits=num_splits)
        assert torch.count_nonzero(output[1]) == 0
        assert torch.count_nonzero(output[0]) > 0


def test_strided_query_view(device, generator):
    shape = TkvShape(6, 2, 64, 16, 5, 3)
    batch = random_tkv_batch(shape, [1, 1], torch.randint(1, 100, (2,), generator=generator).tolist(), device,
                             generator)
    fused = torch.randn((2, 10 * 64), generator=generator).to(device)
    _check(batch, fused[:, : 6 * 64].view(2, 6, 64), torch.float32, num_splits=2)


def test_rejects_bad_arguments(device, generator):
    shape = TkvShape(4, 2, 64, 16, 4, 4)
    batch = random_tkv_batch(shape, [1, 1], [3, 5], device, generator)
    arguments = {
        "query": batch.query, "layer": batch.layer, "block_tables": batch.block_tables, "seq_lens": batch.seq_lens,
        "tail_slots": batch.tail_slots, "key_exact": batch.key_exact, "value_exact": batch.value_exact,
        "softmax_scale": batch.softmax_scale,
    }
    cases = [
        ({"query": batch.query[:, :3]}, "num_heads 3 must be a multiple of num_kv_heads 2"),
        ({"query": batch.query[:1]}, r"query: expected shape \[num_seqs=2"),
        ({"query": batch.query.int()}, "query: dtype"),
        ({"block_tables": batch.block_tables.long()}, "block_tables: dtype"),
        ({"seq_lens": batch.seq_lens.long()}, "seq_lens: dtype"),
        ({"softmax_scale": -1.0}, "softmax_scale"),
        ({"layer": dataclasses.replace(batch.layer, value_bits=8)}, "value_codes: expected shape"),
        ({"num_splits": 0}, "num_splits"),
        ({"compute_dtype": torch.bfloat16}, "compute_dtype"),
        ({"key_exact": batch.key_exact.float()}, "key_exact: dtype"),
        ({"value_exact": batch.value_exact[:1]}, r"value_exact: expected shape \[num_tokens=2"),
        ({"tail_slots": batch.tail_slots.long()}, "tail_slots: dtype"),
        ({"tail_slots": batch.tail_slots[:1]}, r"tail_slots: expected shape \[num_seqs=2"),
        ({"layer": dataclasses.replace(batch.layer, value_tail=batch.layer.value_tail[:, :8])},
         "value_tail: expected shape"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            tkv_paged_decode_attention(**(arguments | change))


def _poison_unread_metadata(batch: TkvBatch) -> None:
    """NaN in the scales and zeros of every block no sequence reads, block 0 (where the kernel sends positions
    outside a split) among them: a kernel that let such a position's metadata into its sums would return NaN."""
    layer, tables = batch.layer, batch.block_tables
    read = torch.zeros(layer.key_metadata.shape[0], dtype=torch.bool, device=tables.device)
    for row, length in zip(tables, batch.seq_lens.tolist()):
        read[row[: -(-length // layer.block_size)].long()] = True
    if read[0]:  # move block 0's contents to an unread block and point the tables there
        spare = int(torch.nonzero(~read)[0])
        for name in TKV_POOLS:
            pool = getattr(layer, name)
            pool[[0, spare]] = pool[[spare, 0]]
        tables.copy_(torch.where(tables == 0, spare, torch.where(tables == spare, 0, tables)))
        read[[0, spare]] = read[[spare, 0]]
    for pool in (layer.key_metadata, layer.value_metadata):
        pool[~read] = float("nan")


@pytest.mark.parametrize(
    ("head_dim", "key_bits", "value_bits", "sink_tokens"),
    [(128, 2, 3, 1), (128, 4, 5, 0), (128, 6, 8, 3), (64, 3, 4, 1), (64, 5, 6, 2), (64, 8, 2, 0)],
)
def test_unmasked_word_loads_match_masked_ones(head_dim, key_bits, value_bits, sink_tokens, device, generator):
    """The default tiles load packed words unpredicated (positions outside a split read block 0's words and
    decode to 0 through their masked scale and zero): the same output, bit for bit, as predicated word loads,
    with NaN metadata in every unread block, over ragged lengths, several splits and a sink prefix."""
    shape = TkvShape(8, 2, head_dim, 16, key_bits, value_bits, 32, sink_tokens)
    seq_lens = [1, 17, int(torch.randint(40, 90, (1,), generator=generator))]
    batch = random_tkv_batch(shape, [1] * 3, seq_lens, device, generator)
    _poison_unread_metadata(batch)
    outputs = [
        _check(batch, batch.query, torch.float32, num_splits=3, tiles=TkvDecodeTiles(block_n=16, mask_words=masked))
        for masked in (True, False)
    ]
    assert torch.equal(outputs[0], outputs[1])
    assert not TkvDecodeTiles().mask_words


def test_ptx_nibbles_fall_back_where_ptx_cannot_run(device, generator):
    """Inline PTX needs a compiled CUDA kernel: elsewhere (the interpreter) and with float32 tiles the flag keeps
    Triton's unpacking, with the same output. tests/gpu times and checks the PTX path itself."""
    shape = TkvShape(8, 2, 128, 16, 4, 4, 32, 1)
    batch = random_tkv_batch(shape, [1] * 2, [5, 70], device, generator)
    for compute_dtype in (torch.float32, torch.float16):
        outputs = [_check(batch, batch.query, compute_dtype, num_splits=2,
                          tiles=TkvDecodeTiles(block_n=32, num_stages=2, ptx_nibbles=ptx)) for ptx in (True, False)]
        assert torch.equal(outputs[0], outputs[1])


@pytest.mark.parametrize(("head_dim", "key_bits", "value_bits", "sink_tokens", "prefetch"),
                         [(128, 4, 4, 1, False), (64, 3, 8, 3, False), (128, 2, 5, 0, True)])
def test_transposed_dots(head_dim, key_bits, value_bits, sink_tokens, prefetch, device, generator):
    """Scores as (k @ q^T)^T and the value sum as (v^T @ p^T)^T, for the sink tile and the coded ones, with and
    without register prefetch."""
    shape = TkvShape(8, 2, head_dim, 16, key_bits, value_bits, 32, sink_tokens)
    batch = random_tkv_batch(shape, [1] * 3, [1, 19, int(torch.randint(60, 130, (1,), generator=generator))],
                             device, generator)
    tiles = TkvDecodeTiles(block_n=64, num_stages=1 if prefetch else 2, prefetch=prefetch, transposed_dots=True)
    for compute_dtype in (torch.float32, torch.float16):
        _check(batch, batch.query, compute_dtype, num_splits=2, tiles=tiles)


def test_split_count_takes_the_fewest_waves_of_whole_programs():
    """H200: 132 SMs, 4 programs each a wave, Llama's 8 kv heads; none under 256 tokens."""
    assert choose_tkv_num_splits(32, 8, 32768, 132) == 2  # 512 programs of 528 slots; 3 would start a second wave
    assert choose_tkv_num_splits(8, 8, 32768, 132) == 8  # one wave of 512 programs
    assert choose_tkv_num_splits(1, 8, 32768, 132) == 64  # 8 tiles a split; 66 would fill the wave, 8 tiles the longest
    assert choose_tkv_num_splits(1, 8, 1000, 132) == 4  # every split 256 tokens
    assert choose_tkv_num_splits(64, 8, 2560, 132) == 1  # 512 programs in one wave: splitting only adds waves
    assert choose_tkv_num_splits(91, 8, 2560, 132) == 2  # not 1: its 728 programs would leave a second wave of 200


@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads", "key_bits", "value_bits", "group_size", "page_size", "sink_tokens", "exact_blocks",
     "block_n", "num_splits", "compute_dtype"),
    [
        (8, 2, 4, 4, 32, 16, 1, 2, 16, 2, torch.float32),
        (8, 2, 4, 4, 16, 16, 1, 2, 32, 3, torch.float16),  # 4 groups x 4 heads: the Llama-3-8B fold
        (6, 2, 3, 2, 16, 8, 4, 3, 16, 2, torch.float16),  # 3 heads padded to 4, 3-bit keys, 2-bit values
        (4, 4, 4, 3, 32, 16, 0, 1, 16, 1, torch.float32),  # MHA: 2 groups x 8 padded heads
        (16, 2, 8, 5, 32, 16, 2, 2, 16, 4, torch.float16),  # 8 heads x 2 groups, the widest codes
    ],
)
def test_folded_scales_match_reference(num_heads, num_kv_heads, key_bits, value_bits, group_size, page_size,
                                       sink_tokens, exact_blocks, block_n, num_splits, compute_dtype, device,
                                       generator):
    """The folded-scale kernel (codes bare in both dots, float16 codes biased by 1024) over sinks, exact windows
    across splits and ragged contexts, at the plain kernel's bound."""
    shape = TkvShape(num_heads, num_kv_heads, 64, page_size, key_bits, value_bits, group_size, sink_tokens,
                     exact_blocks=exact_blocks)
    seq_lens = [1, 2, page_size + 1, *torch.randint(40, 160, (2,), generator=generator).tolist()]
    batch = random_tkv_batch(shape, [1] * len(seq_lens), seq_lens, device, generator)
    _check(batch, batch.query, compute_dtype, num_splits=num_splits,
           tiles=TkvDecodeTiles(block_n=block_n, num_stages=1, folded_scales=True))
