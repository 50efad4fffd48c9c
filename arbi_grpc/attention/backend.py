"""The contract between the decoder and an attention implementation over one kind of KV storage.

A backend is typed over the storage kind it reads (`AttentionBackend[PagedKVCache]`, `AttentionBackend[
TkvPagedKVCache]`): it alone knows that kind's layout; the decoder hands it whatever storage the engine built
with it (`selection` picks the two together). The torch reference backends implement it; Triton kernels
can replace them without touching the model code.
"""

from __future__ import annotations

from typing import ClassVar, Protocol, TypeVar

from torch import Tensor

from arbi_grpc.attention.kv_storage import KVStorage
from arbi_grpc.attention.metadata import AttentionMetadata

StorageT = TypeVar("StorageT", bound=KVStorage, contravariant=True)


class AttentionBackend(Protocol[StorageT]):
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
        kv_cache: StorageT,
    ) -> Tensor:
        """Causal attention with softmax scale `head_dim ** -0.5`; returns `[T, num_heads, head_dim]`.

        Query head h reads key/value head `h // (num_heads // num_kv_heads)` (grouped-query attention).
        """
        ...
