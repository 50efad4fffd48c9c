"""The TKV attention backend in plain torch (CPU and GPU): encode new K/V into their slots and the sink pool,
then attend each sequence's transformed queries over its own blocks, decoded to the code space, except the
query's own block, which is read exactly (docs/tkv.md, "Exact own block"); last, keep each sequence's last
block exact in its tail slot for the next steps.

Keys and values attention reads went through the codec (write first, then attend), except sink positions and
those in the query's own block: fp16 in the code space, from this step's tokens or the tail. Decode sequences
are batched in padded groups as in the bf16 `TorchPagedAttention`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch
from torch import Tensor

from arbi_grpc.kv_codec.attention_transforms import transform_output, transform_queries
from arbi_grpc.kv_codec.codec import TkvLayerCodec
from arbi_grpc.kv_codec.paged_cache import TkvLayerStorage, TkvPagedKVCache
from arbi_grpc.kv_codec.quantize import QuantizedGroups, dequantize_groups
from arbi_grpc.models.attention_metadata import AttentionMetadata
from arbi_grpc.models.torch_paged_attention import (
    TorchPagedAttention,
    grouped_query_attention,
)


@dataclass(frozen=True)
class TkvTorchPagedAttention(TorchPagedAttention):
    """The `AttentionBackend` over a `TkvPagedKVCache`; the reference the TKV kernels are tested against."""

    def forward(  # type: ignore[override]  (reads a TkvPagedKVCache, not a PagedKVCache)
        self,
        layer_index: int,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        metadata: AttentionMetadata,
        kv_cache: TkvPagedKVCache,
    ) -> Tensor:
        storage = kv_cache.layer(layer_index)
        exact = write_tokens(storage, kv_cache.codec(layer_index), key, value, metadata)
        transformed = transform_queries(query, storage)  # [T, Hq, D] fp32
        accumulated = torch.empty_like(transformed)  # [T, Hq, D] in the value code space
        for start, end in self._decode_groups(metadata.decode_seq_lens_host, storage.block_size):
            rows = metadata.decode_sequence_indices[start:end]
            _attend_decodes(transformed, storage, metadata, exact, rows, metadata.decode_seq_lens_host[end - 1],
                            accumulated)
        query_starts = (0, *accumulate(metadata.query_lens_host))
        for sequence in metadata.prefill_sequence_indices:
            _attend_prefill(transformed, storage, metadata, exact, sequence, query_starts, accumulated)
        store_tail(storage, exact, metadata)
        return transform_output(accumulated, storage, query.dtype)


@dataclass(frozen=True)
class ExactTokens:
    """This step's keys and values in the code space, fp16 [T, Hkv, D]: what sinks and tails store."""

    keys: Tensor
    values: Tensor


def write_tokens(
    storage: TkvLayerStorage, codec: TkvLayerCodec, key: Tensor, value: Tensor, metadata: AttentionMetadata
) -> ExactTokens:
    """Encode key/value [T, Hkv, D] (model space, RoPE applied) into their slots; tokens at positions below
    sink_tokens also go, unquantized in the code space, to the sink pool of their (first) block. Returns every
    token in that code space."""
    slots = metadata.slot_mapping
    encoded_keys, encoded_values = codec.encode_keys(key), codec.encode_values(value)
    for pool, encoded in (
        (storage.key_codes, encoded_keys.codes),
        (storage.key_scale, encoded_keys.scale),
        (storage.key_zero, encoded_keys.zero),
        (storage.value_codes, encoded_values.codes),
        (storage.value_scale, encoded_values.scale),
        (storage.value_zero, encoded_values.zero),
    ):
        pool.view(-1, *pool.shape[2:]).index_copy_(0, slots, encoded)  # flat slots: [num_blocks * block_size, ...]
    exact = ExactTokens(
        *(transform.forward(codec.into_rotated_space(source.float())).to(storage.key_sink.dtype)
          for source, transform in ((key, codec.keys), (value, codec.values)))
    )
    rows, positions = _sink_rows(metadata, storage.sink_tokens)
    if rows:
        rows_tensor = torch.tensor(rows, dtype=torch.int64, device=slots.device)
        sink_slots = (slots.index_select(0, rows_tensor) // storage.block_size) * storage.sink_tokens + torch.tensor(
            positions, dtype=torch.int64, device=slots.device
        )  # [S'] flat index into [num_blocks * sink_tokens]
        for pool, code_space in ((storage.key_sink, exact.keys), (storage.value_sink, exact.values)):
            pool.view(-1, *pool.shape[2:]).index_copy_(0, sink_slots, code_space.index_select(0, rows_tensor))
    return exact


def store_tail(storage: TkvLayerStorage, exact: ExactTokens, metadata: AttentionMetadata) -> None:
    """Copy this step's tokens that lie in their sequence's last block to [tail slot, position % block_size]."""
    block_size = storage.block_size
    rows: list[int] = []
    sequences: list[int] = []
    offsets: list[int] = []
    start = 0
    for sequence, (query_len, seq_len) in enumerate(zip(metadata.query_lens_host, metadata.seq_lens_host)):
        first_position = seq_len - query_len
        for position in range(max(first_position, (seq_len - 1) // block_size * block_size), seq_len):
            rows.append(start + position - first_position)
            sequences.append(sequence)
            offsets.append(position % block_size)
        start += query_len
    device = exact.keys.device
    slots = metadata.tail_slots.long().index_select(0, torch.tensor(sequences, dtype=torch.int64, device=device))
    destinations = slots * block_size + torch.tensor(offsets, dtype=torch.int64, device=device)
    rows_tensor = torch.tensor(rows, dtype=torch.int64, device=device)
    for tail, source in ((storage.key_tail, exact.keys), (storage.value_tail, exact.values)):
        tail.view(-1, *tail.shape[2:]).index_copy_(0, destinations, source.index_select(0, rows_tensor))


def _sink_rows(metadata: AttentionMetadata, sink_tokens: int) -> tuple[list[int], list[int]]:
    """Flat batch rows of the new tokens at positions < sink_tokens, and those positions (host lists)."""
    rows: list[int] = []
    positions: list[int] = []
    start = 0
    for query_len, seq_len in zip(metadata.query_lens_host, metadata.seq_lens_host):
        first_position = seq_len - query_len
        for offset in range(max(0, min(sink_tokens - first_position, query_len))):
            rows.append(start + offset)
            positions.append(first_position + offset)
        start += query_len
    return rows, positions


def _decoded_blocks(storage: TkvLayerStorage, blocks: Tensor) -> tuple[Tensor, Tensor]:
    """Keys and values of `blocks` [N] in the code space, fp32 [N, block_size, Hkv, D], sink slots applied."""
    decoded = []
    for codes, scale, zero, bits, sink in (
        (storage.key_codes, storage.key_scale, storage.key_zero, storage.key_bits, storage.key_sink),
        (storage.value_codes, storage.value_scale, storage.value_zero, storage.value_bits, storage.value_sink),
    ):
        quantized = QuantizedGroups(
            codes.index_select(0, blocks), scale.index_select(0, blocks), zero.index_select(0, blocks), bits,
            storage.group_size,
        )
        decoded.append(dequantize_groups(quantized))
    return decoded[0], decoded[1]


def _overlay_sinks(storage: TkvLayerStorage, first_blocks: Tensor, keys: Tensor, values: Tensor) -> None:
    """Replace positions < sink_tokens of contexts [B, L, Hkv, D] by the exact sink entries of their first block.

    Sink slots beyond a sequence's length hold zeros or stale finite values; attention masks them out.
    """
    count = min(storage.sink_tokens, keys.shape[1])
    if count:
        keys[:, :count] = storage.key_sink.index_select(0, first_blocks)[:, :count].float()
        values[:, :count] = storage.value_sink.index_select(0, first_blocks)[:, :count].float()


def _attend_decodes(
    transformed: Tensor,
    storage: TkvLayerStorage,
    metadata: AttentionMetadata,
    exact: ExactTokens,
    rows: Tensor,
    longest: int,
    accumulated: Tensor,
) -> None:
    """One-token sequences `rows` at once, their contexts decoded, padded to `longest` and masked; each one's last
    block read from its tail, its new token from `exact`."""
    block_size = storage.block_size
    num_blocks = -(-longest // block_size)
    tables = metadata.block_tables.index_select(0, rows)[:, :num_blocks].long()  # [Bg, nb]
    keys, values = _decoded_blocks(storage, tables.reshape(-1))  # [Bg * nb, bs, Hkv, D]
    padded_shape = (rows.shape[0], num_blocks * block_size, storage.num_kv_heads, storage.head_dim)
    keys, values = keys.view(padded_shape), values.view(padded_shape)
    _overlay_sinks(storage, tables[:, 0], keys, values)
    token_rows = metadata.query_start_loc.index_select(0, rows).long()  # [Bg] flat index of each query
    seq_lens = metadata.seq_lens.index_select(0, rows).long()  # [Bg]
    group_rows = torch.arange(rows.shape[0], device=rows.device)
    tail_slots = metadata.tail_slots.index_select(0, rows).long()
    for context, tail, new in ((keys, storage.key_tail, exact.keys), (values, storage.value_tail, exact.values)):
        # Positions before the new token in its block come from the tail (later ones are masked out).
        context.view(rows.shape[0], num_blocks, block_size, *context.shape[2:])[
            group_rows, (seq_lens - 1) // block_size
        ] = tail.index_select(0, tail_slots).float()
        context[group_rows, seq_lens - 1] = new.index_select(0, token_rows).float()
    key_positions = torch.arange(padded_shape[1], device=transformed.device)
    allowed = (key_positions[None, :] < seq_lens[:, None])[:, None, :]  # [Bg, 1, L]
    queries = transformed.index_select(0, token_rows)[:, None]  # [Bg, 1, Hq, D]
    attended = grouped_query_attention(queries, keys, values, allowed)  # [Bg, 1, Hq, D]
    accumulated.index_copy_(0, token_rows, attended[:, 0])


def _attend_prefill(
    transformed: Tensor,
    storage: TkvLayerStorage,
    metadata: AttentionMetadata,
    exact: ExactTokens,
    sequence: int,
    query_starts: tuple[int, ...],
    accumulated: Tensor,
) -> None:
    """One multi-token chunk, block by block of its queries: the queries of one block see the earlier blocks
    decoded and their own block exactly (the tail before this chunk, the chunk's tokens from `exact`)."""
    block_size = storage.block_size
    query_len = metadata.query_lens_host[sequence]
    seq_len = metadata.seq_lens_host[sequence]
    prefix_len = seq_len - query_len
    start = query_starts[sequence]
    table = metadata.block_tables[sequence, : -(-seq_len // block_size)].long()  # [nb]
    keys, values = _decoded_blocks(storage, table)
    keys, values = keys.flatten(0, 1)[None, :seq_len], values.flatten(0, 1)[None, :seq_len]  # [1, L, Hkv, D]
    _overlay_sinks(storage, table[:1], keys, values)
    first_block_start = prefix_len // block_size * block_size
    slot = metadata.tail_slots[sequence : sequence + 1].long()
    exact_keys, exact_values = (
        torch.cat([tail.index_select(0, slot)[0, : prefix_len - first_block_start], new[start : start + query_len]])
        .float()[None]
        for tail, new in ((storage.key_tail, exact.keys), (storage.value_tail, exact.values))
    )  # [1, seq_len - first_block_start, Hkv, D]: positions from first_block_start on, exact
    for block_start in range(first_block_start, seq_len, block_size):
        block_end = min(block_start + block_size, seq_len)
        first_query = max(block_start, prefix_len)  # positions first_query..block_end-1 query this block
        own = slice(block_start - first_block_start, block_end - first_block_start)
        block_keys = torch.cat([keys[:, :block_start], exact_keys[:, own]], dim=1)  # [1, block_end, Hkv, D]
        block_values = torch.cat([values[:, :block_start], exact_values[:, own]], dim=1)
        # Query at position p sees keys at positions <= p.
        allowed = torch.ones(block_end - first_query, block_end, dtype=torch.bool, device=transformed.device).tril(
            first_query
        )
        rows = slice(start + first_query - prefix_len, start + block_end - prefix_len)
        attended = grouped_query_attention(transformed[rows][None], block_keys, block_values, allowed[None])
        accumulated[rows] = attended[0]
