"""The rows of the TKV kernel benchmark (benchmarks/tkv_kernels.py): each BenchCase's inputs, the call it times
and the check against its torch reference, for decode attention (bf16 and TKV), the KV write (bf16 and each TKV
write launch shape), prefill and the query/output transforms, on the Llama-3-8B attention shape."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arbi_grpc.kv_codec.attention_transforms import transform_output, transform_queries
from arbi_grpc.kv_codec.paged_cache import TkvLayerStorage
from arbi_grpc.kv_codec.spec import TkvSpec, bytes_per_token
from arbi_kernels import (
    paged_decode_attention,
    paged_prefill_attention,
    tkv_paged_decode_attention,
    tkv_paged_prefill_attention,
    tkv_transform_output,
    tkv_transform_queries,
    write_kv_cache,
    write_tkv_cache,
)
from arbi_kernels.prefill_attention import PrefillTiles
from arbi_kernels.tkv_decode_attention import DEFAULT_TKV_DECODE_TILES, TkvDecodeTiles
from arbi_kernels.tkv_prefill_attention import default_tkv_prefill_tiles
from arbi_kernels.tkv_write import DEFAULT_WRITE_TILES, WriteTiles
from benchmarks.kernels import BenchCase
from tests.kernels import reference
from tests.kernels.paged_batches import BatchShape, PagedBatch, random_paged_batch
from tests.kernels.tkv_batches import (
    TkvShape,
    assert_same_encoding,
    assert_tkv_close,
    copy_pools,
    positions_of_slots,
    random_model_space_kv,
    random_tkv_layer,
)
from tests.kernels.tkv_reference import (
    tkv_paged_decode_attention_reference,
    tkv_paged_prefill_attention_reference,
    write_tkv_cache_reference,
)

LLAMA = BatchShape(num_heads=32, num_kv_heads=8, head_dim=128, page_size=16, dtype=torch.bfloat16)
BF16_BYTES = 2
FILL_CHUNK_TOKENS = 65536

DEFAULT_DECODE_TILES = DEFAULT_TKV_DECODE_TILES
PLAIN_DECODE_TILES = TkvDecodeTiles()  # no PTX unpack, no transposed dots, unmasked word loads
# The default write launch, the former one (16 tokens over 8 warps) and one between; decode- and prefill-sized.
WRITE_TILE_VARIANTS = (DEFAULT_WRITE_TILES, WriteTiles(16, 8), WriteTiles(4, 1))
WRITE_TOKEN_COUNTS = (4, 32768)


@dataclass(frozen=True)
class TkvBench:
    """A bf16 paged batch and the same contexts encoded in a TKV layer (same block tables and q), with each
    sequence's tail slot holding its exact pre-step positions of the block the step starts in, and the step
    tokens' exact code-space K/V (what write_tkv_cache returns)."""

    paged: PagedBatch
    layer: TkvLayerStorage
    tail_slots: torch.Tensor  # [B] int32
    key_exact: torch.Tensor  # [T, Hkv, D] fp16
    value_exact: torch.Tensor
    label: str

    def exact_arguments(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(tail_slots, key_exact, value_exact), as the TKV attention kernels take them."""
        return self.tail_slots, self.key_exact, self.value_exact


def tkv_token_bytes(shape: TkvShape) -> int:
    """Bytes attention reads per context token over all kv heads: K and V codes plus their fp16 scales and
    zeros (the codec's own count)."""
    spec = TkvSpec(shape.key_bits, shape.value_bits, shape.group_size, shape.sink_tokens)
    return bytes_per_token(shape.head_dim, shape.num_kv_heads, spec)


def build(shape: TkvShape, query_lens: list[int], seq_lens: list[int], generator: torch.Generator) -> TkvBench:
    paged = random_paged_batch(
        BatchShape(shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.page_size, torch.bfloat16),
        query_lens, seq_lens, "cuda", generator,
    )
    layer = random_tkv_layer(shape, paged.key_cache.shape[0], "cuda", generator, len(seq_lens))
    tail_slots = torch.randperm(len(seq_lens), generator=generator, device="cuda").to(torch.int32)
    step_rows: list[tuple[torch.Tensor, torch.Tensor]] = []

    def write(seq: int, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(start, end, device="cuda")
        blocks = paged.block_tables[seq].long()[positions // shape.page_size]
        key, value = random_model_space_kv(positions, shape.num_kv_heads, shape.head_dim, "cuda", generator)
        return write_tkv_cache(key.bfloat16(), value.bfloat16(), positions,
                               blocks * shape.page_size + positions % shape.page_size, layer)

    for seq, (query_len, length) in enumerate(zip(query_lens, seq_lens)):
        prefix_len = length - query_len
        tail_start = prefix_len // shape.page_size * shape.page_size  # the block the step starts in
        for start in range(0, tail_start, FILL_CHUNK_TOKENS):
            write(seq, start, min(tail_start, start + FILL_CHUNK_TOKENS))
        key_exact, value_exact = write(seq, tail_start, length)  # rows: the tail's positions, then the step's
        slot = int(tail_slots[seq])
        layer.key_tail[slot, : prefix_len - tail_start] = key_exact[: prefix_len - tail_start]
        layer.value_tail[slot, : prefix_len - tail_start] = value_exact[: prefix_len - tail_start]
        step_rows.append((key_exact[prefix_len - tail_start :], value_exact[prefix_len - tail_start :]))
    label = (f"B={len(seq_lens)} ctx={max(seq_lens)} Hq={shape.num_heads} Hkv={shape.num_kv_heads} "
             f"D={shape.head_dim} page={shape.page_size}")
    return TkvBench(paged, layer, tail_slots, torch.cat([rows[0] for rows in step_rows]),
                    torch.cat([rows[1] for rows in step_rows]), label)


def bf16_decode_case(bench: TkvBench, num_splits: int | None = None, seq_len_bound: int | None = None) -> BenchCase:
    """seq_len_bound: the max_seq_len the launch is sized for (a CUDA graph's max_model_len), else the longest
    sequence; num_splits: None chooses from that."""
    batch = bench.paged
    arguments = (batch.query.bfloat16(), batch.key_cache, batch.value_cache, batch.block_tables, batch.seq_lens,
                 batch.softmax_scale)
    options = {"max_seq_len": seq_len_bound or int(batch.seq_lens.max()), "num_splits": num_splits}
    tokens = int(batch.seq_lens.sum())
    return BenchCase(
        kernel="decode bf16",
        shape=f"{bench.label}{bound_label(seq_len_bound)}{f' splits={num_splits}' if num_splits else ''}",
        run=lambda: paged_decode_attention(*arguments, **options),
        check=lambda: torch.testing.assert_close(paged_decode_attention(*arguments, **options),
                                                 reference.paged_decode_attention_reference(*arguments),
                                                 atol=1.6e-2, rtol=1.6e-2),
        bytes_moved=2 * tokens * batch.key_cache.shape[2] * batch.key_cache.shape[3] * BF16_BYTES,
    )


def bound_label(seq_len_bound: int | None) -> str:
    """A decode case's label for a launch sized for a bound above its sequences."""
    return f" bound={seq_len_bound}" if seq_len_bound else ""


def tkv_decode_case(bench: TkvBench, shape: TkvShape, tiles: TkvDecodeTiles = DEFAULT_DECODE_TILES,
                    num_splits: int | None = None, with_transforms: bool = False,
                    expected: torch.Tensor | None = None, seq_len_bound: int | None = None) -> BenchCase:
    """expected: the reference output of this bench, when several cases share one; seq_len_bound: as
    bf16_decode_case."""
    batch, layer = bench.paged, bench.layer
    arguments = (batch.query, layer, batch.block_tables, batch.seq_lens, *bench.exact_arguments(),
                 batch.softmax_scale)
    options = {"max_seq_len": seq_len_bound or int(batch.seq_lens.max()), "num_splits": num_splits, "tiles": tiles}
    model_query = batch.query.bfloat16()

    def run() -> torch.Tensor:
        if not with_transforms:
            return tkv_paged_decode_attention(*arguments, **options)
        transformed = tkv_transform_queries(model_query, layer)
        accumulated = tkv_paged_decode_attention(transformed, *arguments[1:], **options)
        return tkv_transform_output(accumulated, layer, torch.bfloat16)

    def check() -> None:
        wanted = tkv_paged_decode_attention_reference(*arguments) if expected is None else expected
        assert_tkv_close(tkv_paged_decode_attention(*arguments, **options), wanted, torch.float16)

    name = f"decode tkv K{shape.key_bits}V{shape.value_bits}" + (" +transforms" if with_transforms else "")
    tokens = int(batch.seq_lens.sum())
    return BenchCase(
        kernel=name,
        shape=(f"{bench.label} n={tiles.block_n} w={tiles.num_warps} s={tiles.num_stages}"
               f"{' prefetch' if tiles.prefetch else ''}{f' r{tiles.max_registers}' if tiles.max_registers else ''}"
               f"{' masked-words' if tiles.mask_words else ''}{' ptx' if tiles.ptx_nibbles else ''}"
               f"{' transposed' if tiles.transposed_dots else ''}{' folded' if tiles.folded_scales else ''}"
               f"{f' window{tiles.window_blocks}' if tiles.window_blocks > 1 else ''} splits={num_splits or 'auto'}"
               f"{bound_label(seq_len_bound)}"),
        run=run, check=check, bytes_moved=tokens * tkv_token_bytes(shape),
    )


def write_cases(num_tokens: int, shape: TkvShape, generator: torch.Generator) -> list[BenchCase]:
    num_blocks = -(-2 * num_tokens // shape.page_size)  # half the slots used, at least one block
    layer = random_tkv_layer(shape, num_blocks, "cuda", generator)
    caches = [torch.zeros((num_blocks, shape.page_size, shape.num_kv_heads, shape.head_dim), dtype=torch.bfloat16,
                          device="cuda") for _ in range(2)]
    slots = torch.randperm(num_blocks * shape.page_size, generator=generator, device="cuda")[:num_tokens]
    positions = positions_of_slots(slots, shape.page_size, generator)
    key, value = (t.bfloat16() for t in random_model_space_kv(positions, shape.num_kv_heads, shape.head_dim, "cuda",
                                                              generator))
    label = f"T={num_tokens} Hkv={shape.num_kv_heads} D={shape.head_dim}"
    model_bytes = 2 * key.numel() * BF16_BYTES

    def check_bf16() -> None:
        expected = [cache.clone() for cache in caches]
        write_kv_cache(key, value, *caches, slots)
        reference.write_kv_cache_reference(key, value, *expected, slots)
        assert all(torch.equal(actual, wanted) for actual, wanted in zip(caches, expected))

    def tkv_case(tiles: WriteTiles) -> BenchCase:
        def check_tkv() -> None:
            expected = copy_pools(layer)
            write_tkv_cache(key, value, positions, slots, layer, tiles)
            write_tkv_cache_reference(key, value, positions, slots, expected)
            assert_same_encoding(layer, expected)

        return BenchCase(
            kernel=f"write tkv K{shape.key_bits}V{shape.value_bits} {tiles.block_t} tok/{tiles.num_warps} warps",
            shape=label, run=lambda: write_tkv_cache(key, value, positions, slots, layer, tiles), check=check_tkv,
            bytes_moved=model_bytes + num_tokens * tkv_token_bytes(shape),
        )

    bf16 = BenchCase(kernel="write bf16", shape=label, run=lambda: write_kv_cache(key, value, *caches, slots),
                     check=check_bf16, bytes_moved=2 * model_bytes)
    return [bf16, *(tkv_case(tiles) for tiles in WRITE_TILE_VARIANTS)]


def prefill_cases(shape: TkvShape, query_lens: list[int], generator: torch.Generator,
                  tile_options: tuple[PrefillTiles | None, ...] = (None,), prefix_len: int = 0) -> list[BenchCase]:
    """bf16 prefill of chunks of `query_lens` tokens after `prefix_len` cached ones, then TKV prefill with each of
    `tile_options` (None: the default tiles) under both rules of what a chunk reads exact (tkv_prefill_attention:
    `chunk`, its own tokens; `window`, each query's window only), given the prefix bound as the engine gives it,
    and the chunk rule once more without it (`prefix unknown`: the coded tiles compiled in)."""
    bench = build(shape, query_lens, [q + prefix_len for q in query_lens], generator)
    batch, layer = bench.paged, bench.layer
    bf16_arguments = (batch.query.bfloat16(), batch.key_cache, batch.value_cache, batch.block_tables,
                      batch.query_start_loc, batch.seq_lens, batch.softmax_scale)
    tkv_arguments = (batch.query, layer, batch.block_tables, batch.query_start_loc, batch.seq_lens,
                     *bench.exact_arguments(), batch.softmax_scale)
    bounds = {"max_query_len": max(query_lens)}  # no host sync: the calls replay in a CUDA graph
    pairs = sum(q * (q + 1) // 2 + q * prefix_len for q in query_lens)
    flops = 4 * pairs * shape.num_heads * shape.head_dim
    tokens = sum(query_lens)
    return [
        BenchCase(kernel="prefill bf16", shape=bench.label,
                  run=lambda: paged_prefill_attention(*bf16_arguments, **bounds),
                  check=lambda: torch.testing.assert_close(
                      paged_prefill_attention(*bf16_arguments),
                      reference.paged_prefill_attention_reference(*bf16_arguments), atol=1.6e-2, rtol=1.6e-2),
                  flops=flops,
                  bytes_moved=2 * (tokens + prefix_len * len(query_lens)) * shape.num_kv_heads * shape.head_dim
                  * BF16_BYTES),
    ] + [
        BenchCase(
            kernel=f"prefill tkv K{shape.key_bits}V{shape.value_bits} {'chunk' if chunk_exact else 'window'}"
                   + ("" if prefix_bound is not None else " prefix unknown"),
            shape=f"{bench.label} m={chosen.block_m} n={chosen.block_n} w={chosen.num_warps}",
            run=lambda tiles=tiles, chunk_exact=chunk_exact, prefix_bound=prefix_bound: tkv_paged_prefill_attention(
                *tkv_arguments, tiles=tiles, chunk_exact=chunk_exact, max_prefix_len=prefix_bound, **bounds),
            check=lambda tiles=tiles, chunk_exact=chunk_exact, prefix_bound=prefix_bound: assert_tkv_close(
                tkv_paged_prefill_attention(*tkv_arguments, tiles=tiles, chunk_exact=chunk_exact,
                                            max_prefix_len=prefix_bound),
                tkv_paged_prefill_attention_reference(*tkv_arguments, chunk_exact=chunk_exact), torch.float16),
            flops=flops, bytes_moved=(tokens + prefix_len * len(query_lens)) * tkv_token_bytes(shape),
        )
        for tiles in tile_options
        for chosen in (tiles or default_tkv_prefill_tiles(shape.head_dim),)
        for chunk_exact, prefix_bound in ((True, prefix_len), (True, None), (False, prefix_len))
    ]


def transform_cases(num_tokens: int, generator: torch.Generator) -> list[BenchCase]:
    """Both attention transforms of one layer: the torch reference's launches against the two kernels."""
    shape = llama_tkv()
    layer = random_tkv_layer(shape, 1, "cuda", generator)
    query = torch.randn((num_tokens, shape.num_heads, shape.head_dim), generator=generator, device="cuda").bfloat16()
    accumulated = torch.randn(query.shape, generator=generator, device="cuda")
    label = f"T={num_tokens} Hq={shape.num_heads} D={shape.head_dim}"
    moved = query.numel() * (BF16_BYTES + 4) + accumulated.numel() * (4 + BF16_BYTES)

    def check() -> None:
        assert torch.equal(tkv_transform_queries(query, layer), transform_queries(query, layer))
        assert torch.equal(tkv_transform_output(accumulated, layer, torch.bfloat16),
                           transform_output(accumulated, layer, torch.bfloat16))

    return [
        BenchCase(kernel="transforms torch", shape=label, check=check, bytes_moved=moved,
                  run=lambda: (transform_queries(query, layer), transform_output(accumulated, layer, torch.bfloat16))),
        BenchCase(kernel="transforms triton", shape=label, check=check, bytes_moved=moved,
                  run=lambda: (tkv_transform_queries(query, layer),
                               tkv_transform_output(accumulated, layer, torch.bfloat16))),
    ]


ENGINE_EXACT_BLOCKS = 4  # the engine's default exact window at page 16 (EngineConfig.kv_exact_window_blocks)


def llama_tkv(key_bits: int = 4, value_bits: int = 4) -> TkvShape:
    return TkvShape(LLAMA.num_heads, LLAMA.num_kv_heads, LLAMA.head_dim, LLAMA.page_size, key_bits, value_bits,
                    group_size=32, sink_tokens=1, exact_blocks=ENGINE_EXACT_BLOCKS)
