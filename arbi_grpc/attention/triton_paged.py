"""The CUDA attention backend built on arbi_kernels: KV write by slot, then flash-decoding for steps where
every sequence brings one token, and the varlen paged prefill kernel for any step with a longer chunk.

It never reads a device value on the host, so a decode step runs unchanged inside a CUDA graph; the split of
long contexts is sized from `metadata.max_seq_len`, which a captured graph pins to the longest context served.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from arbi_grpc.attention.metadata import AttentionMetadata
from arbi_grpc.attention.paged_kv_cache import PagedKVCache


@dataclass(frozen=True)
class TritonPagedAttention:
    """The `AttentionBackend[PagedKVCache]` of the CUDA engine path (bf16 or fp32 paged cache)."""

    cuda_graph_safe: ClassVar[bool] = True

    def __post_init__(self) -> None:
        import arbi_kernels  # noqa: F401 (imports triton: fail at boot, not at the first request)

    def forward(
        self,
        layer_index: int,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        metadata: AttentionMetadata,
        kv_cache: PagedKVCache,
    ) -> Tensor:
        from arbi_kernels import paged_decode_attention, paged_prefill_attention, write_kv_cache

        key_cache, value_cache = kv_cache.layer(layer_index)
        write_kv_cache(key, value, key_cache, value_cache, metadata.slot_mapping)
        softmax_scale = query.shape[-1] ** -0.5
        if metadata.is_decode_only:
            return paged_decode_attention(
                query, key_cache, value_cache, metadata.block_tables, metadata.seq_lens, softmax_scale,
                max_seq_len=metadata.max_seq_len,
            )
        return paged_prefill_attention(
            query, key_cache, value_cache, metadata.block_tables, metadata.query_start_loc, metadata.seq_lens,
            softmax_scale, max_query_len=metadata.max_query_len,
        )
