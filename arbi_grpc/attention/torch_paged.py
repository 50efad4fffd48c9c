"""Reference attention backend in plain torch: scatter new K/V into the paged cache, gather each sequence's
context through its block table, and run `scaled_dot_product_attention` under a causal mask.

Decode sequences (one new token) are attended in padded groups of similar context length, one call per group;
prefill chunks are attended one sequence at a time. What a decode group reads is the same in every layer: it is
planned once per step, at the first layer, and kept on the step's metadata (`AttentionMetadata.plans`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate
from typing import ClassVar, Self

import torch
import torch.nn.functional as F
from torch import Tensor

from arbi_grpc.attention.metadata import AttentionMetadata
from arbi_grpc.attention.paged_kv_cache import PagedKVCache


@dataclass(frozen=True)
class DecodeGroups:
    """How the torch backends batch decode sequences: in padded groups of similar context length, each of at most
    `max_decode_group_size` sequences and `max_decode_group_tokens` padded context tokens.

    On CPU, bounded groups keep the gathered K/V small: with 2 threads, 64 decodes of ~256 to ~1024 context tokens
    attended about 4 times faster in such groups than in one padded call (fresh multi-megabyte gathers cost more
    than the attention itself). On a GPU one padded call per step is fastest: `for_device`.
    """

    cuda_graph_safe: ClassVar[bool] = False  # plans decode groups from host-side context lengths
    max_decode_group_size: int = 16
    max_decode_group_tokens: int = 8192

    @classmethod
    def for_device(cls, device: torch.device | str) -> Self:
        """Bounded decode groups on CPU, a single decode group per step elsewhere."""
        if torch.device(device).type == "cpu":
            return cls()
        return cls(max_decode_group_size=2**31, max_decode_group_tokens=2**62)

    def __post_init__(self) -> None:
        if self.max_decode_group_size <= 0 or self.max_decode_group_tokens <= 0:
            raise ValueError(
                "decode group limits must be > 0, got "
                f"{self.max_decode_group_size} sequences and {self.max_decode_group_tokens} tokens"
            )

    def _decode_groups(self, sorted_seq_lens: tuple[int, ...], block_size: int) -> Iterator[tuple[int, int]]:
        """[start, end) ranges over the length-sorted decode sequences, each within the group limits."""
        start = 0
        while start < len(sorted_seq_lens):
            end = start + 1
            while end < len(sorted_seq_lens) and end - start < self.max_decode_group_size:
                padded_len = -(-sorted_seq_lens[end] // block_size) * block_size  # the longest if `end` joins
                if (end - start + 1) * padded_len > self.max_decode_group_tokens:
                    break
                end += 1
            yield start, end
            start = end

    def decode_plan(self, metadata: AttentionMetadata, block_size: int, dtype: torch.dtype) -> list[DecodeGroupPlan]:
        """The step's decode groups for queries of `dtype`, planned at the first layer that asks and reused by the
        others."""
        key = ("torch decode groups", self.max_decode_group_size, self.max_decode_group_tokens, block_size, dtype)
        plan = metadata.plans.get(key)
        if plan is None:
            plan = metadata.plans[key] = [
                _plan_group(metadata, block_size, dtype, start, end)
                for start, end in self._decode_groups(metadata.decode_seq_lens_host, block_size)
            ]
        return plan


@dataclass(frozen=True)
class DecodeGroupPlan:
    """The layer-invariant part of attending one decode group: which cache blocks it gathers, which query rows
    it reads and writes, and its padding mask (None when every context fills its blocks), made additive in the
    queries' dtype once rather than converted from booleans by every layer's attention call."""

    blocks: Tensor  # [Bg * nb] block ids, the group's tables side by side
    num_sequences: int
    padded_len: int  # nb * block_size keys gathered per sequence
    token_rows: Tensor | None  # [Bg] int64 flat index of each sequence's query; None: all T tokens, in order
    allowed: Tensor | None  # [Bg, 1, padded_len] 0 where a key is within its sequence's context, else -inf


def _plan_group(metadata: AttentionMetadata, block_size: int, dtype: torch.dtype, start: int, end: int
                ) -> DecodeGroupPlan:
    rows = metadata.decode_sequence_indices[start:end]
    longest = metadata.decode_seq_lens_host[end - 1]
    num_blocks = -(-longest // block_size)
    padded_len = num_blocks * block_size
    allowed = None
    if metadata.decode_seq_lens_host[start] != padded_len:  # sorted: the shortest context is padded
        key_positions = torch.arange(padded_len, device=rows.device)
        beyond = key_positions[None, :] >= metadata.seq_lens.index_select(0, rows)[:, None]
        allowed = torch.zeros(beyond.shape, dtype=dtype, device=rows.device).masked_fill_(beyond, float("-inf"))
        allowed = allowed[:, None, :]
    # A decode-only step whose contexts are sorted already, in a single group, reads and writes its rows as they are.
    in_order = end - start == metadata.num_tokens and metadata.decode_seq_lens_host == metadata.seq_lens_host
    return DecodeGroupPlan(
        blocks=metadata.block_tables.index_select(0, rows)[:, :num_blocks].reshape(-1),
        num_sequences=end - start,
        padded_len=padded_len,
        token_rows=None if in_order else metadata.query_start_loc.index_select(0, rows).long(),
        allowed=allowed,
    )


@dataclass(frozen=True)
class TorchPagedAttention(DecodeGroups):
    """The `AttentionBackend[PagedKVCache]` used on CPU and as the correctness reference for kernels."""

    def forward(
        self,
        layer_index: int,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        metadata: AttentionMetadata,
        kv_cache: PagedKVCache,
    ) -> Tensor:
        key_cache, value_cache = kv_cache.layer(layer_index)
        block_size = kv_cache.block_size
        # Flat slot views: [num_blocks * block_size, num_kv_heads, head_dim]
        # Stored in the cache's dtype, read back in the activations' (the two may differ: --kv-cache-dtype).
        if key.dtype != key_cache.dtype:
            key, value = key.to(key_cache.dtype), value.to(value_cache.dtype)
        self.write_cache(key, value, metadata.slot_mapping, key_cache, value_cache)
        output = self.attend_decodes(query, key_cache, value_cache, metadata, block_size)
        if not metadata.prefill_sequence_indices:
            return output
        query_starts = (0, *accumulate(metadata.query_lens_host))
        for sequence in metadata.prefill_sequence_indices:
            _attend_prefill(query, key_cache, value_cache, block_size, metadata, sequence, query_starts, output)
        return output

    def write_cache(self, key: Tensor, value: Tensor, slot_mapping: Tensor, key_cache: Tensor,
                    value_cache: Tensor) -> None:
        """Store the new tokens' key and value [T, Hkv, D] (the cache's dtype) at their flat slots."""
        key_cache.view(-1, *key_cache.shape[2:]).index_copy_(0, slot_mapping, key)
        value_cache.view(-1, *value_cache.shape[2:]).index_copy_(0, slot_mapping, value)

    def attend_decodes(self, query: Tensor, key_cache: Tensor, value_cache: Tensor, metadata: AttentionMetadata,
                       block_size: int) -> Tensor:
        """[T, H, D] holding every decode query's attention in its row (prefill rows: the caller's to fill)."""
        groups = self.decode_plan(metadata, block_size, query.dtype)
        if len(groups) == 1 and groups[0].token_rows is None:
            return _attend_decodes(query, key_cache, value_cache, groups[0])
        output = torch.empty_like(query)  # [T, H, D]
        for group in groups:
            output.index_copy_(0, group.token_rows, _attend_decodes(query, key_cache, value_cache, group))
        return output


def _attend_decodes(query: Tensor, key_cache: Tensor, value_cache: Tensor, group: DecodeGroupPlan) -> Tensor:
    """The group's one-token sequences at once, contexts padded to whole blocks of the longest and masked:
    [Bg, H, D], row i for the group's sequence i."""
    padded_shape = (group.num_sequences, group.padded_len, *key_cache.shape[2:])
    context_keys = key_cache.index_select(0, group.blocks).view(padded_shape)  # [Bg, nb * bs, Hkv, D]
    context_values = value_cache.index_select(0, group.blocks).view(padded_shape)
    if key_cache.dtype != query.dtype:
        context_keys, context_values = context_keys.to(query.dtype), context_values.to(query.dtype)
    decode_queries = query if group.token_rows is None else query.index_select(0, group.token_rows)
    # [Bg, 1, H, D] -> [Bg, H, D]
    return grouped_query_attention(decode_queries[:, None], context_keys, context_values, group.allowed)[:, 0]


def _attend_prefill(
    query: Tensor,
    key_cache: Tensor,
    value_cache: Tensor,
    block_size: int,
    metadata: AttentionMetadata,
    sequence: int,
    query_starts: tuple[int, ...],
    output: Tensor,
) -> None:
    """One multi-token chunk: its queries see the cached prefix and, causally, each other."""
    query_len = metadata.query_lens_host[sequence]
    seq_len = metadata.seq_lens_host[sequence]
    start = query_starts[sequence]
    table = metadata.block_tables[sequence, : -(-seq_len // block_size)]  # [nb]
    context_keys = key_cache.index_select(0, table).flatten(0, 1)[:seq_len].to(query.dtype)  # [L, Hkv, D]
    context_values = value_cache.index_select(0, table).flatten(0, 1)[:seq_len].to(query.dtype)
    # Query i sits at position seq_len - query_len + i and sees keys at positions <= its own.
    allowed = torch.ones(query_len, seq_len, dtype=torch.bool, device=query.device).tril(seq_len - query_len)
    attended = grouped_query_attention(
        query[start : start + query_len][None], context_keys[None], context_values[None], allowed[None]
    )
    output[start : start + query_len] = attended[0]


def grouped_query_attention(query: Tensor, keys: Tensor, values: Tensor, allowed: Tensor | None) -> Tensor:
    """Masked attention where each key/value head serves a group of consecutive query heads.

    query [B, Q, H, D], keys/values [B, L, Hkv, D], allowed [B, Q, L] (True = may attend, or an additive mask of
    the query's dtype: 0 or -inf; None: every key) -> [B, Q, H, D]. Every query row must allow at least one key.
    """
    batch, num_queries, num_heads, head_dim = query.shape
    num_kv_heads = keys.shape[2]
    group = num_heads // num_kv_heads
    # Fold the group into the query axis so K/V are never repeated: q: [B, Hkv, G * Q, D]
    grouped_query = (
        query.view(batch, num_queries, num_kv_heads, group, head_dim)
        .permute(0, 2, 3, 1, 4)
        .reshape(batch, num_kv_heads, group * num_queries, head_dim)
    )
    mask = None if allowed is None else (
        allowed[:, None, None]
        .expand(batch, 1, group, num_queries, allowed.shape[-1])
        .reshape(batch, 1, group * num_queries, allowed.shape[-1])
    )  # [B, 1, G * Q, L]
    attended = F.scaled_dot_product_attention(
        grouped_query, keys.transpose(1, 2), values.transpose(1, 2), attn_mask=mask
    )  # [B, Hkv, G * Q, D]
    return (
        attended.view(batch, num_kv_heads, group, num_queries, head_dim)
        .permute(0, 3, 1, 2, 4)
        .reshape(batch, num_queries, num_heads, head_dim)
    )
