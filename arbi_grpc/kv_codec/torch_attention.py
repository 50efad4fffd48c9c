"""The TKV attention backend in plain torch (CPU and GPU): encode new K/V into their slots and the sink pool,
then attend each sequence's transformed queries over its own blocks, decoded to the code space, except the
query's exact window, its own block and the `exact_blocks - 1` before it, which are read exactly, and with the
cache's `chunk_exact` a prefill chunk's own tokens and the window of its first query (docs/tkv.md, "Exact
window"); last, keep each sequence's last `exact_blocks` blocks exact in the ring of its tail slot for
the next steps.

Keys and values attention reads went through the codec (write first, then attend), except sink positions (from
the sink pool) and those in the query's window: fp16 in the code space, from this step's tokens or the tail
ring. Decode sequences are batched in padded groups as in the bf16 `TorchPagedAttention`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch
from torch import Tensor

from arbi_grpc.attention.metadata import AttentionMetadata
from arbi_grpc.attention.torch_paged import DecodeGroups, grouped_query_attention
from arbi_grpc.kv_codec.attention_transforms import transform_output, transform_queries
from arbi_grpc.kv_codec.codec import TkvLayerCodec
from arbi_grpc.kv_codec.paged_cache import (
    TkvLayerStorage,
    TkvPagedKVCache,
    exact_window_start,
    split_group_metadata,
)


@dataclass(frozen=True)
class TkvTorchPagedAttention(DecodeGroups):
    """The `AttentionBackend[TkvPagedKVCache]` in torch; the reference the TKV kernels are tested against."""

    def forward(
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
            _attend_prefill(transformed, storage, metadata, exact, sequence, query_starts, accumulated,
                            kv_cache.chunk_exact)
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
    for codes, pairs, encoded in (
        (storage.key_codes, storage.key_metadata, encoded_keys),
        (storage.value_codes, storage.value_metadata, encoded_values),
    ):
        codes.view(-1, *codes.shape[2:]).index_copy_(0, slots, encoded.codes)  # flat slots: [blocks * block_size, ..]
        scale, zero = split_group_metadata(pairs)
        index = (slots // storage.block_size, slots % storage.block_size)
        scale[index], zero[index] = encoded.scale, encoded.zero
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
    """Copy this step's tokens that lie in their sequence's last `exact_blocks` blocks to their ring rows of its
    tail slot."""
    block_size, exact_blocks = storage.block_size, storage.exact_blocks
    rows: list[int] = []
    sequences: list[int] = []
    positions: list[int] = []
    start = 0
    for sequence, (query_len, seq_len) in enumerate(zip(metadata.query_lens_host, metadata.seq_lens_host)):
        first_position = seq_len - query_len
        for position in range(max(first_position, exact_window_start(seq_len - 1, block_size, exact_blocks)), seq_len):
            rows.append(start + position - first_position)
            sequences.append(sequence)
            positions.append(position)
        start += query_len
    device = exact.keys.device
    slots = metadata.batch_slots.long().index_select(0, torch.tensor(sequences, dtype=torch.int64, device=device))
    ring_rows = storage.ring_rows(torch.tensor(positions, dtype=torch.int64, device=device))
    destinations = slots * storage.key_tail.shape[1] + ring_rows  # flat rows of [num_tail_slots * E * bs]
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
    """One-token sequences `rows` at once, their contexts decoded, padded to `longest` and masked; each one's
    window (its last `exact_blocks` blocks) read from its tail ring, its new token from `exact`."""
    block_size, exact_blocks = storage.block_size, storage.exact_blocks
    num_blocks = -(-longest // block_size)
    tables = metadata.block_tables.index_select(0, rows)[:, :num_blocks].long()  # [Bg, nb]
    keys, values = storage.decoded_blocks(tables.reshape(-1))  # [Bg * nb, bs, Hkv, D]
    padded_shape = (rows.shape[0], num_blocks * block_size, storage.num_kv_heads, storage.head_dim)
    keys, values = keys.view(padded_shape), values.view(padded_shape)
    token_rows = metadata.query_start_loc.index_select(0, rows).long()  # [Bg] flat index of each query
    seq_lens = metadata.seq_lens.index_select(0, rows).long()  # [Bg]
    group_rows = torch.arange(rows.shape[0], device=rows.device)
    tail_slots = metadata.batch_slots.index_select(0, rows).long()
    last_blocks = (seq_lens - 1) // block_size  # [Bg]
    for context, tail, new in ((keys, storage.key_tail, exact.keys), (values, storage.value_tail, exact.values)):
        context_blocks = context.view(rows.shape[0], num_blocks, block_size, *context.shape[2:])
        ring = tail.view(tail.shape[0], exact_blocks, block_size, *tail.shape[2:])  # [slots, E, bs, Hkv, D]
        # The window's blocks before the new token come from the ring (its later positions are masked out); a
        # window reaching before the sequence's start keeps those (absent) blocks as they are.
        for back in range(exact_blocks):
            block = last_blocks - back
            target = block.clamp(min=0)
            before_start = (block < 0)[:, None, None, None]
            context_blocks[group_rows, target] = torch.where(
                before_start, context_blocks[group_rows, target], ring[tail_slots, target % exact_blocks].float()
            )
        context[group_rows, seq_lens - 1] = new.index_select(0, token_rows).float()
    _overlay_sinks(storage, tables[:, 0], keys, values)
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
    chunk_exact: bool,
) -> None:
    """One multi-token chunk. With `chunk_exact` all its queries at once, over the chunk's tokens (from `exact`)
    and its first query's window before it (from the tail ring) exactly, the earlier blocks decoded; else block by
    block of its queries: the queries of one block see their own window (their block and the `exact_blocks - 1`
    before it) exactly, the earlier blocks decoded."""
    block_size, exact_blocks = storage.block_size, storage.exact_blocks
    query_len = metadata.query_lens_host[sequence]
    seq_len = metadata.seq_lens_host[sequence]
    prefix_len = seq_len - query_len
    start = query_starts[sequence]
    table = metadata.block_tables[sequence, : -(-seq_len // block_size)].long()  # [nb]
    exact_start = exact_window_start(prefix_len, block_size, exact_blocks)  # the first query's window
    slot = metadata.batch_slots[sequence].long()
    ring_rows = storage.ring_rows(torch.arange(exact_start, prefix_len, device=transformed.device))
    if chunk_exact:  # decoded before exact_start (a whole block), exact from there on, for every query
        decoded_keys, decoded_values = (
            decoded.flatten(0, 1) for decoded in storage.decoded_blocks(table[: exact_start // block_size])
        )
        context_keys, context_values = (
            torch.cat([decoded, tail[slot].index_select(0, ring_rows).float(),
                       new[start : start + query_len].float()])[None]
            for decoded, tail, new in ((decoded_keys, storage.key_tail, exact.keys),
                                       (decoded_values, storage.value_tail, exact.values))
        )  # [1, L, Hkv, D]
        _overlay_sinks(storage, table[:1], context_keys, context_values)
        allowed = torch.ones(query_len, seq_len, dtype=torch.bool, device=transformed.device).tril(prefix_len)
        rows = slice(start, start + query_len)
        accumulated[rows] = grouped_query_attention(transformed[rows][None], context_keys, context_values,
                                                    allowed[None])[0]
        return
    decoded_keys, decoded_values = (
        decoded.flatten(0, 1)[None, :seq_len] for decoded in storage.decoded_blocks(table)
    )  # [1, L, Hkv, D]
    _overlay_sinks(storage, table[:1], decoded_keys, decoded_values)
    # The context the current query block reads: decoded before its window, exact from there on (positions from
    # exact_start on are set exact once, then given back to their decoded values as the window moves on).
    contexts = []
    for decoded, tail, new in ((decoded_keys, storage.key_tail, exact.keys),
                               (decoded_values, storage.value_tail, exact.values)):
        context = decoded.clone()
        context[0, exact_start:prefix_len] = tail[slot].index_select(0, ring_rows).float()
        context[0, prefix_len:] = new[start : start + query_len].float()
        contexts.append(context)
    context_keys, context_values = contexts
    _overlay_sinks(storage, table[:1], context_keys, context_values)
    decoded_from = exact_start  # positions below it hold decoded values in the contexts
    for block_start in range(prefix_len // block_size * block_size, seq_len, block_size):
        block_end = min(block_start + block_size, seq_len)
        first_query = max(block_start, prefix_len)  # positions first_query..block_end-1 query this block
        first_exact = exact_window_start(block_start, block_size, exact_blocks)
        for context, decoded in ((context_keys, decoded_keys), (context_values, decoded_values)):
            context[:, decoded_from:first_exact] = decoded[:, decoded_from:first_exact]
        decoded_from = first_exact
        # Query at position p sees keys at positions <= p.
        allowed = torch.ones(block_end - first_query, block_end, dtype=torch.bool, device=transformed.device).tril(
            first_query
        )
        rows = slice(start + first_query - prefix_len, start + block_end - prefix_len)
        attended = grouped_query_attention(
            transformed[rows][None], context_keys[:, :block_end], context_values[:, :block_end], allowed[None]
        )
        accumulated[rows] = attended[0]
