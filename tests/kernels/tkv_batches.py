"""Random TKV layers and batches for the TKV kernel tests and benchmark.

A layer gets random calibration transforms (positive channel scales, shifts) and pools full of finite noise,
so every unread slot holds garbage; a batch then encodes random model-space K/V for every context position of
its sequences through the codec's torch reference, over random non-contiguous block tables. Keys carry a few
large constant channels, as post-RoPE keys do, and each sequence's first token is an outlier (the sink).
Each sequence gets its own random tail slot among more slots than sequences, a ring of E blocks (the shape's
exact_blocks) holding the exact code-space values of its pre-step positions in the last E blocks before the step
(what store_tkv_tail left there); the step's own tokens come with their exact buffers, as write_tkv_cache returns
them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from arbi_grpc.kv_codec.packing import unpack_codes
from arbi_grpc.kv_codec.paged_cache import (
    TkvLayerStorage,
    exact_window_start,
    group_metadata_shape,
    split_group_metadata,
    tail_ring_row,
)
from arbi_kernels.tkv_exact import exact_window_blocks
from tests.kernels.paged_batches import BatchShape, random_paged_batch
from tests.kernels.tkv_reference import (
    context_in_code_space,
    store_tkv_tail_reference,
    write_tkv_cache_reference,
)


@dataclass(frozen=True)
class TkvShape:
    """Head layout, paging and encoding of a random TKV layer; exact_blocks: E, the exact window's blocks."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    key_bits: int
    value_bits: int
    group_size: int = 32
    sink_tokens: int = 1
    rotate: bool = True
    exact_blocks: int = 1


@dataclass(frozen=True)
class TkvBatch:
    """A varlen batch over a filled TKV layer; `query` is q' (already in the key code space), float32."""

    query: torch.Tensor  # [T, Hq, D]
    layer: TkvLayerStorage
    block_tables: torch.Tensor  # [B, max_blocks] int32
    query_start_loc: torch.Tensor  # [B + 1] int32
    seq_lens: torch.Tensor  # [B] int32
    tail_slots: torch.Tensor  # [B] int32, distinct, not the row indices in general
    key_exact: torch.Tensor  # [T, Hkv, D] fp16: the step tokens' code-space keys
    value_exact: torch.Tensor  # [T, Hkv, D] fp16
    softmax_scale: float


def _randn(size: tuple[int, ...], generator: torch.Generator, device: torch.device | str) -> torch.Tensor:
    return torch.randn(size, generator=generator, device=generator.device).to(device)


def random_tkv_layer(
    shape: TkvShape, num_blocks: int, device: torch.device | str, generator: torch.Generator, num_tail_slots: int = 1
) -> TkvLayerStorage:
    """A layer with random transforms whose pools hold finite noise (codes, scales, zeros, sinks and tails)."""
    heads, dim, group = shape.num_kv_heads, shape.head_dim, shape.group_size
    slots = (num_blocks, shape.page_size, heads)

    def noise_codes(bits: int) -> torch.Tensor:
        size = (*slots, dim * bits // 8)
        return torch.randint(0, 256, size, generator=generator, device=generator.device, dtype=torch.uint8).to(device)

    def noise_metadata() -> torch.Tensor:
        """Scales in [0.01, 0.2], zeros in [-3, 0]."""
        uniform = torch.rand(group_metadata_shape(num_blocks, shape.page_size, heads, dim // group),
                             generator=generator, device=generator.device)
        low, high = (torch.tensor(bounds, device=uniform.device) for bounds in ([0.01, -3.0], [0.2, 0.0]))
        return (low + (high - low) * uniform).to(device=device, dtype=torch.float16)

    def noise_sink() -> torch.Tensor:
        return _randn((num_blocks, shape.sink_tokens, heads, dim), generator, device).to(torch.float16)

    def noise_tail() -> torch.Tensor:
        window_rows = shape.exact_blocks * shape.page_size
        return _randn((num_tail_slots, window_rows, heads, dim), generator, device).to(torch.float16)

    def channel_scale() -> torch.Tensor:
        return torch.exp(0.3 * _randn((heads, dim), generator, device))

    return TkvLayerStorage(
        key_codes=noise_codes(shape.key_bits), key_metadata=noise_metadata(),
        value_codes=noise_codes(shape.value_bits), value_metadata=noise_metadata(), key_sink=noise_sink(),
        value_sink=noise_sink(), key_tail=noise_tail(), value_tail=noise_tail(),
        key_bits=shape.key_bits, value_bits=shape.value_bits, group_size=group, sink_tokens=shape.sink_tokens,
        block_size=shape.page_size, rotate=shape.rotate,
        key_channel_scale=channel_scale(), key_shift=0.5 * _randn((heads, dim), generator, device),
        value_channel_scale=channel_scale(), value_shift=0.2 * _randn((heads, dim), generator, device),
    )


def random_model_space_kv(
    positions: torch.Tensor, num_kv_heads: int, head_dim: int, device: torch.device | str, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys/values [T, Hkv, D] float32: keys with 4 large constant channels, position 0 an outlier."""
    size = (positions.shape[0], num_kv_heads, head_dim)
    keys, values = _randn(size, generator, device), _randn(size, generator, device)
    keys[..., :4] += 6.0
    outlier = (positions == 0).to(device)[:, None, None]
    return torch.where(outlier, 8.0 * keys, keys), torch.where(outlier, 4.0 * values, values)


def positions_of_slots(slots: torch.Tensor, page_size: int, generator: torch.Generator) -> torch.Tensor:
    """Positions new tokens at `slots` can have: the offset in the page plus 0 or 1 whole pages, so a position
    below the page size sits at its own offset (a sequence's first block) and no two claim one sink entry."""
    pages = torch.randint(0, 2, slots.shape, generator=generator, device=generator.device).to(slots.device)
    return slots.clamp_min(0) % page_size + pages * page_size


SPARE_TAIL_SLOTS = 3


def _write_positions(layer: TkvLayerStorage, block_tables: torch.Tensor, sequences: list[int],
                     positions: list[int], generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode random K/V at (sequence, position) pairs with the codec; returns their exact buffers [N, Hkv, D]."""
    device = block_tables.device
    position_tensor = torch.tensor(positions, dtype=torch.int64, device=device)
    sequence_tensor = torch.tensor(sequences, dtype=torch.int64, device=device)
    block_ids = block_tables.long()[sequence_tensor, position_tensor // layer.block_size]
    keys, values = random_model_space_kv(position_tensor, layer.num_kv_heads, layer.head_dim, device, generator)
    slots = block_ids * layer.block_size + position_tensor % layer.block_size
    return write_tkv_cache_reference(keys, values, position_tensor, slots, layer)


def random_tkv_batch(
    shape: TkvShape,
    query_lens: list[int],
    seq_lens: list[int],
    device: torch.device | str,
    generator: torch.Generator,
) -> TkvBatch:
    """Sequence b has seq_lens[b] encoded positions, the last query_lens[b] of which are this step's tokens
    (rows query_start_loc[b].. of the exact buffers); its tail slot holds its exact pre-step positions of the last
    E blocks up to position seq_len - query_len - 1, as the previous step's store_tkv_tail left them."""
    paged = random_paged_batch(
        BatchShape(shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.page_size, torch.float32),
        query_lens, seq_lens, device, generator,
    )
    num_seqs = len(seq_lens)
    layer = random_tkv_layer(shape, paged.key_cache.shape[0], device, generator, num_seqs + SPARE_TAIL_SLOTS)
    tail_slots = torch.randperm(num_seqs + SPARE_TAIL_SLOTS, generator=generator, device=generator.device)[:num_seqs]
    tail_slots = tail_slots.to(device=device, dtype=torch.int32)
    prefix_lens = [seq_len - query_len for query_len, seq_len in zip(query_lens, seq_lens)]
    earlier = [(seq, position) for seq, prefix_len in enumerate(prefix_lens) for position in range(prefix_len)]
    if earlier:
        exact = _write_positions(layer, paged.block_tables, *map(list, zip(*earlier)), generator)
        earlier_starts = torch.tensor([0, *prefix_lens], device=device).cumsum(0).to(torch.int32)
        store_tkv_tail_reference(*exact, layer, earlier_starts, torch.tensor(prefix_lens, device=device), tail_slots)
    step = [(seq, position) for seq, (prefix_len, seq_len) in enumerate(zip(prefix_lens, seq_lens))
            for position in range(prefix_len, seq_len)]
    if step:
        key_exact, value_exact = _write_positions(layer, paged.block_tables, *map(list, zip(*step)), generator)
    else:
        key_exact = value_exact = torch.zeros((0, shape.num_kv_heads, shape.head_dim), dtype=torch.float16,
                                              device=device)
    return TkvBatch(
        query=paged.query, layer=layer, block_tables=paged.block_tables, query_start_loc=paged.query_start_loc,
        seq_lens=paged.seq_lens, tail_slots=tail_slots, key_exact=key_exact, value_exact=value_exact,
        softmax_scale=paged.softmax_scale,
    )


def with_decoded_exact(batch: TkvBatch, tail_only: bool = False) -> TkvBatch:
    """The batch with every exact value attention may read (its exact buffers and its sequences' tail ring rows)
    replaced by the decoded codes of the same position: what a kernel reading codes instead of exact values
    computes. tail_only: replace the tail rows only, i.e. the pre-step positions of the window (for a step starting
    at a block's first position, exactly the E - 1 blocks before the own block). Tests compare the reference on
    both to show they can tell the two apart."""
    tails = {kind: getattr(batch.layer, f"{kind}_tail").clone() for kind in ("key", "value")}
    exact = {"key": batch.key_exact.clone(), "value": batch.value_exact.clone()}
    block_size, exact_blocks = batch.layer.block_size, exact_window_blocks(batch.layer)
    starts = batch.query_start_loc.tolist()
    for seq, (seq_len, slot) in enumerate(zip(batch.seq_lens.tolist(), batch.tail_slots.tolist())):
        prefix_len = seq_len - (starts[seq + 1] - starts[seq])
        tail_positions = range(exact_window_start(prefix_len, block_size, exact_blocks), prefix_len)  # the step reads
        ring_rows = [tail_ring_row(position, block_size, exact_blocks) for position in tail_positions]
        for kind in ("key", "value"):
            decoded = context_in_code_space(batch.layer, kind, batch.block_tables[seq], seq_len).to(torch.float16)
            if not tail_only:
                exact[kind][starts[seq] : starts[seq + 1]] = decoded[prefix_len:]
            tails[kind][slot, ring_rows] = decoded[tail_positions.start : prefix_len]
    layer = dataclasses.replace(batch.layer, key_tail=tails["key"], value_tail=tails["value"])
    return dataclasses.replace(batch, layer=layer, key_exact=exact["key"], value_exact=exact["value"])


def poison_exact_window_metadata(batch: TkvBatch) -> None:
    """NaN in the scales and zeros of every block in some sequence's exact window (the last E blocks up to
    seq_len - 1): a decode that read a window position from its codes would return NaN."""
    layer = batch.layer
    exact_blocks = exact_window_blocks(layer)
    for row, seq_len in enumerate(batch.seq_lens.tolist()):
        last_block = (seq_len - 1) // layer.block_size
        window = batch.block_tables[row, max(last_block - exact_blocks + 1, 0) : last_block + 1].long()
        for pool in (layer.key_metadata, layer.value_metadata):
            pool[window] = float("nan")


TKV_POOLS = ("key_codes", "key_metadata", "key_sink", "value_codes", "value_metadata", "value_sink")
MAX_DIFFERING_GROUP_SHARE = 0.01


def copy_pools(layer: TkvLayerStorage) -> TkvLayerStorage:
    """The same layer with its own copy of every pool (transforms shared)."""
    return dataclasses.replace(layer, **{name: getattr(layer, name).clone() for name in TKV_POOLS})


def assert_same_encoding(actual: TkvLayerStorage, expected: TkvLayerStorage) -> None:
    """A kernel-written layer against the codec-written one: sink pools bit for bit, and each group's (zero,
    scale, codes) bit for bit except in at most 1% of groups, whose decoded values must agree within two steps.

    Why not all: the encoder's least-squares refit sums over a group and keeps a refit only where its squared
    error is lower; the kernel sums in another order than torch, so a near-tie can resolve the other way (both
    encodings are then equally good)."""
    for name in ("key_sink", "value_sink"):
        assert torch.equal(getattr(actual, name), getattr(expected, name)), name
    for kind in ("key", "value"):
        bits, group = getattr(actual, f"{kind}_bits"), actual.group_size
        pools = [(getattr(layer, f"{kind}_codes"), *split_group_metadata(getattr(layer, f"{kind}_metadata")))
                 for layer in (actual, expected)]
        codes = [unpack_codes(pool[0], bits).reshape(*pool[1].shape, group) for pool in pools]  # [.., D/G, G]
        differing = (codes[0] != codes[1]).any(dim=-1) | (pools[0][1] != pools[1][1]) | (pools[0][2] != pools[1][2])
        share = float(differing.float().mean())
        assert share <= MAX_DIFFERING_GROUP_SHARE, f"{kind}: {share:.2%} of groups differ from the codec"
        decoded = [pool[2].float()[..., None] + code.float() * pool[1].float()[..., None]
                   for pool, code in zip(pools, codes)]
        step = pools[1][1].float()[..., None]
        assert bool(((decoded[0] - decoded[1]).abs() <= 2 * step).all()), f"{kind}: decoded values drift"


def assert_tkv_close(actual: torch.Tensor, expected: torch.Tensor, compute_dtype: torch.dtype) -> None:
    """A TKV kernel's float32 output against the reference. float32 tiles: exact products, so a tight bound.
    float16 tiles round q' and every decoded value once (relative 2^-11) and the softmax weights before the
    value dot: scores of large logits move by ~1e-3 of their size, so the bound scales with the output (the worst
    element of the H200 runs so far was 4.06e-3 of it: one of 1.6 million, prefill with a 4-block exact window)."""
    if compute_dtype == torch.float32:
        torch.testing.assert_close(actual, expected, atol=5e-5, rtol=5e-5)
        return
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(actual, expected, atol=5e-3 * scale, rtol=0.0)
