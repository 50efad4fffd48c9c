"""TKV kernels compiled, at serving shapes: the write against the codec on the GPU (tkv_batches.assert_same_encoding)
and its exact outputs bit for bit, the query/output transforms bit for bit, decode and prefill against the torch
reference with head dims 64/128, GQA 1/4/8, pages 16/32, every bit width (K and V different), contexts up to 32k,
each query's own block exact (decode at a block's offsets 0/1/last, prefill chunks from mid-block across
boundaries), exact windows of E = 2 and 4 blocks (decode, prefill from mid-block, the tail store's ring),
store_tkv_tail, decode replayed in a CUDA graph, and the TKV Triton backend against the torch TKV backend."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from arbi_grpc.attention.metadata import AttentionMetadata
from arbi_grpc.kv_codec import TkvCalibration
from arbi_grpc.kv_codec.attention_transforms import transform_output, transform_queries
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache
from arbi_grpc.kv_codec.torch_attention import TkvTorchPagedAttention
from arbi_grpc.kv_codec.triton_attention import TkvTritonPagedAttention
from arbi_kernels import (
    store_tkv_tail,
    tkv_paged_decode_attention,
    tkv_paged_prefill_attention,
    tkv_transform_output,
    tkv_transform_queries,
    write_tkv_cache,
)
from arbi_kernels.prefill_attention import PrefillTiles
from arbi_kernels.tkv_decode_attention import TkvDecodeTiles
from benchmarks.tkv_kernel_cases import DEFAULT_DECODE_TILES, PLAIN_DECODE_TILES
from benchmarks.tkv_kernels import DECODE_ONLY_VARIANTS, SWEEP_DECODE_TILES
from tests.kernels.tkv_batches import (
    TkvBatch,
    TkvShape,
    assert_same_encoding,
    assert_tkv_close,
    copy_pools,
    poison_exact_window_metadata,
    positions_of_slots,
    random_model_space_kv,
    random_tkv_batch,
    random_tkv_layer,
    with_decoded_exact,
)
from tests.kernels.tkv_reference import (
    store_tkv_tail_reference,
    tkv_paged_decode_attention_reference,
    tkv_paged_prefill_attention_reference,
    write_tkv_cache_reference,
)

NUM_KV_HEADS = 2
BIT_PAIRS = [(4, 4), (2, 3), (3, 5), (5, 6), (6, 8), (8, 2)]
# (head_dim, GQA group, page size, key bits, value bits): every head dim, group, page and width appears.
LAYOUTS = [(64, 1, 16, 4, 4), (64, 4, 32, 2, 3), (64, 8, 16, 3, 5), (128, 1, 32, 5, 6), (128, 4, 16, 6, 8),
           (128, 8, 32, 8, 2), (128, 4, 16, 4, 4)]


def _decode_arguments(batch: TkvBatch) -> tuple:
    return (batch.query, batch.layer, batch.block_tables, batch.seq_lens, batch.tail_slots, batch.key_exact,
            batch.value_exact, batch.softmax_scale)


def _prefill_arguments(batch: TkvBatch) -> tuple:
    return (batch.query, batch.layer, batch.block_tables, batch.query_start_loc, batch.seq_lens, batch.tail_slots,
            batch.key_exact, batch.value_exact, batch.softmax_scale)


def _decode(batch: TkvBatch, **kwargs) -> torch.Tensor:
    expected = tkv_paged_decode_attention_reference(*_decode_arguments(batch))
    assert_tkv_close(tkv_paged_decode_attention(*_decode_arguments(batch), **kwargs), expected, torch.float16)
    return expected


def _prefill(batch: TkvBatch, chunk_exact: bool = True, **kwargs) -> torch.Tensor:
    expected = tkv_paged_prefill_attention_reference(*_prefill_arguments(batch), chunk_exact=chunk_exact)
    assert_tkv_close(tkv_paged_prefill_attention(*_prefill_arguments(batch), chunk_exact=chunk_exact, **kwargs),
                     expected, torch.float16)
    return expected


@pytest.mark.parametrize(
    ("key_bits", "value_bits", "head_dim", "page_size"),
    [(*bits, 64 if index % 2 else 128, 16 if index % 3 else 32) for index, bits in enumerate(BIT_PAIRS)],
)
def test_write_matches_the_codec(key_bits, value_bits, head_dim, page_size, device, generator):
    num_tokens = 4096
    shape = TkvShape(NUM_KV_HEADS, NUM_KV_HEADS, head_dim, page_size, key_bits, value_bits, 32, sink_tokens=4)
    num_blocks = num_tokens // page_size + 8
    layer = random_tkv_layer(shape, num_blocks, device, generator)
    expected = copy_pools(layer)
    slots = torch.randperm(num_blocks * page_size, generator=generator, device=device)[:num_tokens]
    slots[:7] = -1
    positions = positions_of_slots(slots, page_size, generator)
    key, value = random_model_space_kv(positions, NUM_KV_HEADS, head_dim, device, generator)
    key, value = key.to(torch.bfloat16), value.to(torch.bfloat16)
    exact = write_tkv_cache(key, value, positions, slots, layer)
    expected_exact = write_tkv_cache_reference(key, value, positions, slots, expected)
    assert_same_encoding(layer, expected)
    for actual_rows, expected_rows in zip(exact, expected_exact):
        assert torch.equal(actual_rows[slots >= 0], expected_rows[slots >= 0])


@pytest.mark.parametrize("num_tokens", [1, 3, 8, 32])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_decode_sized_writes_match_the_codec(num_tokens, head_dim, device, generator):
    """A decode step's few tokens, compiled (DEFAULT_WRITE_TILES: one token a program)."""
    shape = TkvShape(NUM_KV_HEADS * 4, NUM_KV_HEADS * 4, head_dim, 16, 4, 3, 32, sink_tokens=1)
    layer = random_tkv_layer(shape, 64, device, generator)
    expected = copy_pools(layer)
    slots = torch.randperm(64 * 16, generator=generator, device=device)[:num_tokens]
    positions = positions_of_slots(slots, 16, generator)
    key, value = random_model_space_kv(positions, shape.num_kv_heads, head_dim, device, generator)
    key, value = key.to(torch.bfloat16), value.to(torch.bfloat16)
    exact = write_tkv_cache(key, value, positions, slots, layer)
    expected_exact = write_tkv_cache_reference(key, value, positions, slots, expected)
    assert_same_encoding(layer, expected)
    for actual_rows, expected_rows in zip(exact, expected_exact):
        assert torch.equal(actual_rows[slots >= 0], expected_rows[slots >= 0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_transforms_match_torch_bit_for_bit(head_dim, dtype, device, generator):
    shape = TkvShape(32, 8, head_dim, 16, 4, 4)
    layer = random_tkv_layer(shape, 1, device, generator)
    query = torch.randn((300, 32, head_dim), generator=generator, device=device).to(dtype)
    assert torch.equal(tkv_transform_queries(query, layer), transform_queries(query, layer))
    accumulated = torch.randn((300, 32, head_dim), generator=generator, device=device)
    assert torch.equal(tkv_transform_output(accumulated, layer, dtype), transform_output(accumulated, layer, dtype))


@pytest.mark.parametrize("tiles", [PLAIN_DECODE_TILES, DEFAULT_DECODE_TILES], ids=["plain", "default"])
@pytest.mark.parametrize(("head_dim", "group_size", "page_size", "key_bits", "value_bits"), LAYOUTS)
def test_decode_ragged_batch(head_dim, group_size, page_size, key_bits, value_bits, tiles, device, generator):
    """Every layout with the default tiles (PTX unpack, transposed dots) and with the plain kernel's."""
    seq_lens = [1, 2, *torch.randint(3, 4097, (6,), generator=generator, device=device).tolist()]
    shape = TkvShape(group_size * NUM_KV_HEADS, NUM_KV_HEADS, head_dim, page_size, key_bits, value_bits)
    _decode(random_tkv_batch(shape, [1] * len(seq_lens), seq_lens, device, generator), tiles=tiles)


@pytest.mark.parametrize(
    ("head_dim", "page_size", "key_bits", "value_bits"), [(64, 16, 4, 4), (128, 32, 3, 5), (128, 16, 4, 4)]
)
def test_decode_long_contexts_up_to_32k(head_dim, page_size, key_bits, value_bits, device, generator):
    seq_lens = [32768, int(torch.randint(8192, 32768, (1,), generator=generator, device=device)), 1]
    shape = TkvShape(4 * NUM_KV_HEADS, NUM_KV_HEADS, head_dim, page_size, key_bits, value_bits)
    batch = random_tkv_batch(shape, [1] * 3, seq_lens, device, generator)
    for tiles in (PLAIN_DECODE_TILES, DEFAULT_DECODE_TILES):
        _decode(batch, tiles=tiles)


BENCHMARKED_DECODE_TILES = tuple(dict.fromkeys(
    (DEFAULT_DECODE_TILES, *SWEEP_DECODE_TILES, *(tiles for rows in DECODE_ONLY_VARIANTS.values() for tiles, _ in rows))
))


@pytest.mark.parametrize("tiles", BENCHMARKED_DECODE_TILES)
@pytest.mark.parametrize(("key_bits", "value_bits"), [(4, 4), (3, 5)])
def test_decode_every_benchmarked_tile_shape(tiles, key_bits, value_bits, device, generator):
    """The tile shapes benchmarks/tkv_kernels.py --sweep and --decode-only time, compiled for the GPU, at Llama's GQA 4 and a
    long context."""
    seq_lens = [int(torch.randint(4096, 12289, (1,), generator=generator, device=device)), 1, 300]
    shape = TkvShape(4 * NUM_KV_HEADS, NUM_KV_HEADS, 128, 16, key_bits, value_bits)
    _decode(random_tkv_batch(shape, [1] * 3, seq_lens, device, generator), tiles=tiles)


@pytest.mark.parametrize(
    ("head_dim", "key_bits", "value_bits", "sink_tokens"),
    [(128, 4, 4, 1), (128, 8, 4, 0), (64, 3, 4, 2)],
)
def test_decode_ptx_nibbles(head_dim, key_bits, value_bits, sink_tokens, device, generator):
    """4-bit codes made float16 by inline PTX, with and without transposed dots: against the reference, and against
    Triton's unpacking on the same tiles (same float16 operands, so equal up to the order of the dots' sums)."""
    seq_lens = [int(torch.randint(4096, 12289, (1,), generator=generator, device=device)), 1, 300, 17]
    shape = TkvShape(4 * NUM_KV_HEADS, NUM_KV_HEADS, head_dim, 16, key_bits, value_bits, 32, sink_tokens)
    batch = random_tkv_batch(shape, [1] * len(seq_lens), seq_lens, device, generator)
    arguments = _decode_arguments(batch)
    expected = tkv_paged_decode_attention_reference(*arguments)
    for transposed in (False, True):
        outputs = [tkv_paged_decode_attention(*arguments, tiles=TkvDecodeTiles(64, 4, 2, ptx_nibbles=ptx,
                                                                              transposed_dots=transposed))
                   for ptx in (True, False)]
        assert_tkv_close(outputs[0], expected, torch.float16)
        torch.testing.assert_close(outputs[0], outputs[1], atol=1e-5, rtol=1e-5)


def test_decode_replays_in_a_cuda_graph(device, generator):
    """With max_seq_len and num_splits given, TKV decode makes no host sync and replays under a CUDA graph."""
    shape = TkvShape(8, 2, 128, 16, 4, 4)
    batch = random_tkv_batch(shape, [1] * 4, [4096] * 4, device, generator)
    seq_lens = batch.seq_lens.clone()
    arguments = (batch.query, batch.layer, batch.block_tables, seq_lens, batch.tail_slots, batch.key_exact,
                 batch.value_exact, batch.softmax_scale)
    tkv_paged_decode_attention(*arguments, max_seq_len=4096, num_splits=8)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = tkv_paged_decode_attention(*arguments, max_seq_len=4096, num_splits=8)
    for _ in range(2):
        seq_lens.copy_(torch.randint(1, 4097, (4,), generator=generator, device=device, dtype=torch.int32))
        graph.replay()
        assert_tkv_close(output, tkv_paged_decode_attention_reference(*arguments), torch.float16)


@pytest.mark.parametrize(("head_dim", "group_size", "page_size", "key_bits", "value_bits"), LAYOUTS)
@pytest.mark.parametrize("chunk_exact", [True, False])
def test_prefill_ragged_batch_with_cached_prefixes(head_dim, group_size, page_size, key_bits, value_bits, chunk_exact,
                                                   device, generator):
    query_lens = [1, *torch.randint(2, 1025, (3,), generator=generator, device=device).tolist()]
    prefixes = [0, *torch.randint(0, 3001, (3,), generator=generator, device=device).tolist()]
    seq_lens = [q + p for q, p in zip(query_lens, prefixes)]
    shape = TkvShape(group_size * NUM_KV_HEADS, NUM_KV_HEADS, head_dim, page_size, key_bits, value_bits)
    _prefill(random_tkv_batch(shape, query_lens, seq_lens, device, generator), chunk_exact)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("chunk_exact", [True, False])
def test_prefill_long_prompt_and_long_prefix(head_dim, chunk_exact, device, generator):
    """A 4k-token prompt from scratch next to a 1k-token chunk extending a 31k-token cached prefix."""
    shape = TkvShape(4 * NUM_KV_HEADS, NUM_KV_HEADS, head_dim, 16, 4, 4, 32, sink_tokens=1)
    _prefill(random_tkv_batch(shape, [4096, 1024], [4096, 32768], device, generator), chunk_exact)


@pytest.mark.parametrize("tiles", [PrefillTiles(64, 64, 8), PrefillTiles(64, 64, 4), PrefillTiles(32, 64, 8),
                                   PrefillTiles(32, 32, 4), PrefillTiles(16, 16, 4), PrefillTiles(128, 64, 8)])
@pytest.mark.parametrize(("head_dim", "sink_tokens"), [(64, 1), (128, 1), (128, 4), (128, 0)])
@pytest.mark.parametrize("chunk_exact", [True, False])
def test_prefill_every_tile_shape_with_and_without_sinks(tiles, head_dim, sink_tokens, chunk_exact, device, generator):
    """Regression: 8 warps over a 64-row tile miscompiled the 16-key sink tile (wrong outputs at D=128, an illegal
    address at D=64); the sink tile now spans a whole key tile (prefill_sink_tile_size)."""
    shape = TkvShape(4 * NUM_KV_HEADS, NUM_KV_HEADS, head_dim, 16, 4, 4, 32, sink_tokens=sink_tokens)
    _prefill(random_tkv_batch(shape, [1, 300, 700], [1, 1300, 700], device, generator), chunk_exact, tiles=tiles)


@pytest.mark.parametrize("tiles", [PLAIN_DECODE_TILES, DEFAULT_DECODE_TILES,
                                   TkvDecodeTiles(64, 4, 1, prefetch=True, ptx_nibbles=True, transposed_dots=True),
                                   TkvDecodeTiles(64, 4, 2, ptx_nibbles=True, folded_scales=True, max_registers=128)],
                         ids=["plain", "default", "prefetch", "folded"])
@pytest.mark.parametrize(("page_size", "sink_tokens"), [(16, 0), (16, 4), (32, 1)])
def test_decode_reads_the_last_block_exact_at_every_offset(page_size, sink_tokens, tiles, device, generator):
    """New tokens at offsets 0, 1 and page_size - 1 of a first and a later block, Llama's GQA 4 at D=128, K4V4,
    several splits: against the reference, which differs from the all-decoded result by more than the bound."""
    shape = TkvShape(4 * NUM_KV_HEADS, NUM_KV_HEADS, 128, page_size, 4, 4, 32, sink_tokens)
    base = 200 * page_size
    seq_lens = [1, 2, page_size, base + 1, base + 2, base + page_size]
    batch = random_tkv_batch(shape, [1] * len(seq_lens), seq_lens, device, generator)
    expected = _decode(batch, tiles=tiles, num_splits=4)
    coded = tkv_paged_decode_attention_reference(*_decode_arguments(with_decoded_exact(batch)))
    with pytest.raises(AssertionError):
        assert_tkv_close(coded, expected, torch.float16)


@pytest.mark.parametrize("tiles", [None, PrefillTiles(32, 32, 4), PrefillTiles(128, 64, 8)],
                         ids=["default", "m32n32", "m128n64"])
@pytest.mark.parametrize(("head_dim", "page_size", "sink_tokens"), [(128, 16, 1), (128, 32, 4), (64, 32, 0)])
def test_prefill_chunks_from_mid_block_read_the_tail(head_dim, page_size, sink_tokens, tiles, device, generator):
    """Chunks that start mid-block (the block's earlier positions from the tail slot) and cross boundaries, next to
    a prompt, at serving tiles: against the reference, which differs from the all-decoded result."""
    shape = TkvShape(4 * NUM_KV_HEADS, NUM_KV_HEADS, head_dim, page_size, 4, 4, 32, sink_tokens)
    prefixes = [page_size // 2 + 1, 100 * page_size + 3, 0]
    query_lens = [3 * page_size + 5, 700, 513]
    batch = random_tkv_batch(shape, query_lens, [q + p for q, p in zip(query_lens, prefixes)], device, generator)
    expected = _prefill(batch, tiles=tiles)
    coded = tkv_paged_prefill_attention_reference(*_prefill_arguments(with_decoded_exact(batch)))
    with pytest.raises(AssertionError):
        assert_tkv_close(coded, expected, torch.float16)


@pytest.mark.parametrize("page_size", [16, 32])
def test_store_tkv_tail_matches_the_reference(page_size, device, generator):
    """Llama's 8 kv heads at D=128: decodes at every offset, chunks across boundaries, padding rows."""
    query_lens = [1] * page_size + [700, 3 * page_size, 0, 0]
    seq_lens = [page_size * 5 + offset + 1 for offset in range(page_size)] + [1000, 4 * page_size + 1, 0, 0]
    _check_tail_store(TkvShape(8, 8, 128, page_size, 4, 4), query_lens, seq_lens, device, generator)


@pytest.mark.parametrize("exact_blocks", [2, 4, 16])
def test_store_tkv_tail_fills_the_window_ring(exact_blocks, device, generator):
    """Llama's 8 kv heads at D=128, block 16, rings of E blocks: decodes at every offset, chunks across boundaries
    and over more blocks than the window, padding rows; bit for bit against the reference over the whole pool."""
    page_size = 16
    query_lens = [1] * page_size + [700, 3 * page_size, (exact_blocks + 2) * page_size + 3, 0, 0]
    seq_lens = ([page_size * 5 + offset + 1 for offset in range(page_size)]
                + [1000, 4 * page_size + 1, (exact_blocks + 3) * page_size + 7, 0, 0])
    _check_tail_store(TkvShape(8, 8, 128, page_size, 4, 4, exact_blocks=exact_blocks), query_lens, seq_lens, device,
                      generator)


def _check_tail_store(shape, query_lens, seq_lens, device, generator):
    """store_tkv_tail over random exact K/V of a step equals its reference on every tail row of the pool."""
    num_slots = len(seq_lens) + 5
    layer = random_tkv_layer(shape, 1, device, generator, num_slots)
    tail_slots = torch.randperm(num_slots, generator=generator, device=device)[: len(seq_lens)].int()
    key_exact, value_exact = (torch.randn((sum(query_lens), 8, 128), generator=generator, device=device).half()
                              for _ in range(2))
    query_start_loc = torch.tensor([0, *query_lens], device=device).cumsum(0).int()
    seq_lens_tensor = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    expected = dataclasses.replace(layer, key_tail=layer.key_tail.clone(), value_tail=layer.value_tail.clone())
    store_tkv_tail(key_exact, value_exact, layer, query_start_loc, seq_lens_tensor, tail_slots)
    store_tkv_tail_reference(key_exact, value_exact, expected, query_start_loc, seq_lens_tensor, tail_slots)
    assert torch.equal(layer.key_tail, expected.key_tail)
    assert torch.equal(layer.value_tail, expected.value_tail)


@pytest.mark.parametrize("tiles", [PLAIN_DECODE_TILES, DEFAULT_DECODE_TILES,
                                   TkvDecodeTiles(64, 4, 1, prefetch=True, ptx_nibbles=True, transposed_dots=True)],
                         ids=["plain", "default", "prefetch"])
@pytest.mark.parametrize("sink_tokens", [0, 1])
@pytest.mark.parametrize("exact_blocks", [2, 4, 16])  # 16: the largest window, 256 positions in one tile
def test_decode_reads_the_exact_window(exact_blocks, sink_tokens, tiles, device, generator):
    """Llama's GQA 4 at D=128, block 16, K4V4, several splits: new tokens at offsets 0, 1 and 15 of a first block,
    inside the first window (contexts shorter than it) and of a late block; the window never read from codes (NaN
    scales and zeros in its blocks), and its earlier blocks decoded instead would give another result."""
    page_size = 16
    shape = TkvShape(4 * NUM_KV_HEADS, NUM_KV_HEADS, 128, page_size, 4, 4, 32, sink_tokens,
                     exact_blocks=exact_blocks)
    window, base = exact_blocks * page_size, 200 * page_size
    seq_lens = [1, 2, page_size, page_size + 1, window - 1, window + 1, base + 1, base + 2, base + page_size]
    batch = random_tkv_batch(shape, [1] * len(seq_lens), seq_lens, device, generator)
    expected = tkv_paged_decode_attention_reference(*_decode_arguments(batch))
    coded = tkv_paged_decode_attention_reference(*_decode_arguments(with_decoded_exact(batch, tail_only=True)))
    with pytest.raises(AssertionError):
        assert_tkv_close(coded, expected, torch.float16)
    poison_exact_window_metadata(batch)
    assert_tkv_close(tkv_paged_decode_attention(*_decode_arguments(batch), tiles=tiles, num_splits=4), expected,
                     torch.float16)


@pytest.mark.parametrize("tiles", [None, PrefillTiles(32, 32, 4), PrefillTiles(128, 64, 8)],
                         ids=["default", "m32n32", "m128n64"])
@pytest.mark.parametrize("sink_tokens", [0, 1])
@pytest.mark.parametrize("exact_blocks", [2, 4])
def test_prefill_chunks_read_the_exact_window(exact_blocks, sink_tokens, tiles, device, generator):
    """Llama's GQA 4 at D=128, block 16, K4V4: chunks from mid-block and from a block's start after a long prefix
    (the window's earlier positions from the tail ring), a prompt shorter than the window and a long one; against
    the reference, which differs from the one with the ring's rows decoded."""
    page_size = 16
    shape = TkvShape(4 * NUM_KV_HEADS, NUM_KV_HEADS, 128, page_size, 4, 4, 32, sink_tokens,
                     exact_blocks=exact_blocks)
    window = exact_blocks * page_size
    prefixes = [page_size // 2 + 1, 100 * page_size + 3, 50 * page_size, 0, 0]
    query_lens = [3 * window + 5, 700, 130, window - 1, 513]
    batch = random_tkv_batch(shape, query_lens, [q + p for q, p in zip(query_lens, prefixes)], device, generator)
    expected = _prefill(batch, tiles=tiles)
    coded = tkv_paged_prefill_attention_reference(*_prefill_arguments(with_decoded_exact(batch, tail_only=True)))
    chunk_rows = sum(query_lens[:3])  # the prompts have nothing in the tail
    with pytest.raises(AssertionError):
        assert_tkv_close(coded[:chunk_rows], expected[:chunk_rows], torch.float16)


def test_triton_backend_matches_torch_backend_in_bf16(device, generator):
    """Llama-3-8B's attention shape (32 q heads, 8 kv heads, D 128) over a prompt step, then decode steps."""
    num_heads, num_kv_heads, head_dim, block_size = 32, 8, 128, 16
    shape = (2, num_kv_heads, head_dim)
    calibration = TkvCalibration(
        model_fingerprint="tkvfp1:" + "0" * 32, group_size=32, rotate=True, layer_bits=((4, 4), (3, 5)),
        key_scales=torch.exp(0.3 * torch.randn(shape)), value_scales=torch.exp(0.3 * torch.randn(shape)),
        key_shifts=torch.randn(shape), value_shifts=0.2 * torch.randn(shape), sink_tokens=1,
    )
    caches = [TkvPagedKVCache(calibration, num_blocks=300, block_size=block_size, device=device, num_tail_slots=3)
              for _ in range(2)]
    backends = (TkvTritonPagedAttention(), TkvTorchPagedAttention.for_device(device))
    tables = [list(range(140)), list(range(140, 300))]
    for query_lens, seq_lens in (([1500, 700], [1500, 700]), ([1, 1], [1501, 701]), ([1, 300], [1502, 1001])):
        metadata = AttentionMetadata.build(
            query_lens=query_lens, seq_lens=seq_lens, block_tables=tables, block_size=block_size, device=device,
            batch_slots=[2, 0],
        )
        num_tokens = sum(query_lens)
        query = torch.randn((num_tokens, num_heads, head_dim), generator=generator, device=device).bfloat16()
        key = torch.randn((num_tokens, num_kv_heads, head_dim), generator=generator, device=device).bfloat16()
        value = torch.randn((num_tokens, num_kv_heads, head_dim), generator=generator, device=device).bfloat16()
        for layer in range(2):
            triton_output, torch_output = (
                backend.forward(layer, query, key, value, metadata, cache) for backend, cache in zip(backends, caches)
            )
            torch.testing.assert_close(triton_output, torch_output, atol=2e-2, rtol=2e-2)


def test_triton_backend_decode_replays_in_a_cuda_graph(device, generator):
    """A decode step of the backend (write, transforms, split-K decode) captured once with padding rows (slot -1,
    seq_len 0) as the engine's graph runner pads, then replayed on new tokens: equal to eager steps."""
    num_heads, num_kv_heads, head_dim, block_size, batch = 8, 2, 128, 16, 4
    shape = (1, num_kv_heads, head_dim)
    calibration = TkvCalibration(
        model_fingerprint="tkvfp1:" + "0" * 32, group_size=32, rotate=True, layer_bits=((4, 3),),
        key_scales=torch.exp(0.3 * torch.randn(shape)), value_scales=torch.exp(0.3 * torch.randn(shape)),
        key_shifts=torch.randn(shape), value_shifts=0.2 * torch.randn(shape), sink_tokens=1,
    )
    cache = TkvPagedKVCache(calibration, num_blocks=4 * 64, block_size=block_size, device=device,
                            num_tail_slots=batch + 1)
    backend = TkvTritonPagedAttention()
    tables = torch.arange(4 * 64, dtype=torch.int32, device=device).view(4, 64)
    slots = torch.full((batch,), -1, dtype=torch.int64, device=device)
    seq_lens = torch.zeros(batch, dtype=torch.int32, device=device)
    query = torch.zeros((batch, num_heads, head_dim), dtype=torch.bfloat16, device=device)
    key = torch.zeros((batch, num_kv_heads, head_dim), dtype=torch.bfloat16, device=device)
    value = torch.zeros_like(key)
    metadata = AttentionMetadata(
        slot_mapping=slots, query_start_loc=torch.arange(batch + 1, dtype=torch.int32, device=device),
        seq_lens=seq_lens, block_tables=tables, batch_slots=torch.tensor([4, 2, 0, 1], dtype=torch.int32, device=device),
        query_lens_host=(1,) * batch, seq_lens_host=(1,) * batch,
        seq_len_bound=64 * block_size,
    )
    backend.forward(0, query, key, value, metadata, cache)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = backend.forward(0, query, key, value, metadata, cache)
    lengths = [1, 700, 1023]  # the fourth row is padding
    for step in range(2):
        for tensor in (query, key, value):
            tensor.copy_(torch.randn(tensor.shape, generator=generator, device=device))
        current = [length + step for length in lengths]
        seq_lens.copy_(torch.tensor([*current, 0], dtype=torch.int32))
        positions = torch.tensor([length - 1 for length in current])
        slots.copy_(torch.tensor([*(tables[row, p // block_size].item() * block_size + p % block_size
                                    for row, p in enumerate(positions.tolist())), -1]))
        graph.replay()
        eager = backend.forward(0, query, key, value, metadata, cache)  # rewrites the same tokens, then attends
        torch.testing.assert_close(output[:3], eager[:3], atol=0.0, rtol=0.0)
        assert bool(torch.isfinite(output[3]).all())  # a padding row attends to nothing; the engine drops it
