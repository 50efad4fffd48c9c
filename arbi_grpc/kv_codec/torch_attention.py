"""The TKV attention backend in plain torch (CPU and GPU): encode new K/V into their slots and the sink pool,
then attend each sequence's transformed queries over its own blocks, decoded to the code space.

Every key and value attention reads went through the codec, the chunk's own tokens included (write first,
then attend). Decode sequences are batched in padded groups as in the bf16 `TorchPagedAttention`.
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
        write_tokens(storage, kv_cache.codec(layer_index), key, value, metadata)
        transformed = transform_queries(query, storage)  # [T, Hq, D] fp32
        accumulated = torch.empty_like(transformed)  # [T, Hq, D] in the value code space
        for start, end in self._decode_groups(metadata.decode_seq_lens_host, storage.block_size):
            rows = metadata.decode_sequence_indices[start:end]
            _attend_decodes(transformed, storage, metadata, rows, metadata.decode_seq_lens_host[end - 1], accumulated)
        query_starts = (0, *accumulate(metadata.query_lens_host))
        for sequence in metadata.prefill_sequence_indices:
            _attend_prefill(transformed, storage, metadata, sequence, query_starts, accumulated)
        return transform_output(accumulated, storage, query.dtype)


def write_tokens(
    storage: TkvLayerStorage, codec: TkvLayerCodec, key: Tensor, value: Tensor, metadata: AttentionMetadata
) -> None:
    """Encode key/value [T, Hkv, D] (model space, RoPE applied) into their slots; tokens at positions below
    sink_tokens also go, unquantized in the code space, to the sink pool of their (first) block."""
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
    rows, positions = _sink_rows(metadata, storage.sink_tokens)
    if not rows:
        return
    rows_tensor = torch.tensor(rows, dtype=torch.int64, device=slots.device)
    sink_slots = (slots.index_select(0, rows_tensor) // storage.block_size) * storage.sink_tokens + torch.tensor(
        positions, dtype=torch.int64, device=slots.device
    )  # [S'] flat index into [num_blocks * sink_tokens]
    for pool, source, transform in (
        (storage.key_sink, key, codec.keys),
        (storage.value_sink, value, codec.values),
    ):
        code_space = transform.forward(codec.into_rotated_space(source.index_select(0, rows_tensor).float()))
        pool.view(-1, *pool.shape[2:]).index_copy_(0, sink_slots, code_space.to(pool.dtype))


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
    rows: Tensor,
    longest: int,
    accumulated: Tensor,
) -> None:
    """One-token sequences `rows` at once, their contexts decoded, padded to `longest` and masked."""
    block_size = storage.block_size
    num_blocks = -(-longest // block_size)
    tables = metadata.block_tables.index_select(0, rows)[:, :num_blocks].long()  # [Bg, nb]
    keys, values = _decoded_blocks(storage, tables.reshape(-1))  # [Bg * nb, bs, Hkv, D]
    padded_shape = (rows.shape[0], num_blocks * block_size, storage.num_kv_heads, storage.head_dim)
    keys, values = keys.view(padded_shape), values.view(padded_shape)
    _overlay_sinks(storage, tables[:, 0], keys, values)
    token_rows = metadata.query_start_loc.index_select(0, rows).long()  # [Bg] flat index of each query
    seq_lens = metadata.seq_lens.index_select(0, rows)  # [Bg]
    key_positions = torch.arange(padded_shape[1], device=transformed.device)
    allowed = (key_positions[None, :] < seq_lens[:, None])[:, None, :]  # [Bg, 1, L]
    queries = transformed.index_select(0, token_rows)[:, None]  # [Bg, 1, Hq, D]
    attended = grouped_query_attention(queries, keys, values, allowed)  # [Bg, 1, Hq, D]
    accumulated.index_copy_(0, token_rows, attended[:, 0])


def _attend_prefill(
    transformed: Tensor,
    storage: TkvLayerStorage,
    metadata: AttentionMetadata,
    sequence: int,
    query_starts: tuple[int, ...],
    accumulated: Tensor,
) -> None:
    """One multi-token chunk: its queries see the cached prefix and, causally, each other (all decoded)."""
    query_len = metadata.query_lens_host[sequence]
    seq_len = metadata.seq_lens_host[sequence]
    start = query_starts[sequence]
    table = metadata.block_tables[sequence, : -(-seq_len // storage.block_size)].long()  # [nb]
    keys, values = _decoded_blocks(storage, table)
    keys, values = keys.flatten(0, 1)[None, :seq_len], values.flatten(0, 1)[None, :seq_len]  # [1, L, Hkv, D]
    _overlay_sinks(storage, table[:1], keys, values)
    # Query i sits at position seq_len - query_len + i and sees keys at positions <= its own.
    allowed = torch.ones(query_len, seq_len, dtype=torch.bool, device=transformed.device).tril(seq_len - query_len)
    attended = grouped_query_attention(transformed[start : start + query_len][None], keys, values, allowed[None])
    accumulated[start : start + query_len] = attended[0]
