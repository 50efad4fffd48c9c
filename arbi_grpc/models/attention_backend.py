"""The contract between the decoder and an attention implementation over the paged KV cache.

The torch reference backend implements it; Triton kernels can replace it without touching the model code.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from torch import Tensor

from arbi_grpc.models.attention_metadata import AttentionMetadata
from arbi_grpc.models.kv_cache import PagedKVCache


class AttentionBackend(Protocol):
    """Stores one layer's new keys/values in the cache, then attends each sequence's new queries over its context."""

    # True when a decode step (every query_len 1) reads only device tensors, never host values that change
    # from step to step, so a CUDA graph of it stays valid when replayed (see metadata.seq_len_bound).
    cuda_graph_safe: ClassVar[bool]

    def forward(
        self,
        layer_index: int,
        query: Tensor,  # [T, num_heads, head_dim], RoPE applied
        key: Tensor,  # [T, num_kv_heads, head_dim], RoPE applied
        value: Tensor,  # [T, num_kv_heads, head_dim]
        metadata: AttentionMetadata,
        kv_cache: PagedKVCache,
    ) -> Tensor:
        """Causal attention with softmax scale `head_dim ** -0.5`; returns `[T, num_heads, head_dim]`.

        Query head h reads key/value head `h // (num_heads // num_kv_heads)` (grouped-query attention).
        """
        ...
