"""Causal attention without a KV cache, for a forward pass whose keys and values are never read again (a decoder
model's embeddings: `embeddings/decoder_embedder.py`). Each sequence of the flattened batch attends causally over
its own tokens only; nothing is written anywhere.

Queries run in chunks of at most `query_chunk_tokens` per sequence, so a long input's scores stay
[heads, chunk, length] rather than [heads, length, length] (on the CPU, scaled_dot_product_attention with a mask
materializes them).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import ClassVar

import torch
from torch import Tensor

from arbi_grpc.attention.torch_paged import grouped_query_attention


@dataclass(frozen=True)
class Spans:
    """The layout of a flattened batch of whole sequences: sequence b owns flat tokens
    `starts[b] : starts[b] + lengths[b]`, at positions 0 .. lengths[b] - 1."""

    lengths: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.lengths or min(self.lengths) < 1:
            raise ValueError(f"need one or more sequences of >= 1 token, got lengths {self.lengths}")

    @property
    def starts(self) -> tuple[int, ...]:
        return (0, *accumulate(self.lengths))[:-1]

    @property
    def num_tokens(self) -> int:
        return sum(self.lengths)

    def positions(self, device: torch.device | str) -> Tensor:
        """[T] int64: each token's position in its sequence."""
        return torch.cat([torch.arange(length, dtype=torch.int64) for length in self.lengths]).to(device)

    def last_rows(self, device: torch.device | str) -> Tensor:
        """[B] int64: the flat row of each sequence's last token."""
        return torch.tensor([start + length - 1 for start, length in zip(self.starts, self.lengths)],
                            dtype=torch.int64, device=device)


@dataclass(frozen=True)
class UncachedCausalAttention:
    """An attention backend over no storage: `forward` takes `Spans` for metadata and ignores `kv_cache`."""

    cuda_graph_safe: ClassVar[bool] = False  # plans from host-side lengths; never captured anyway
    query_chunk_tokens: int = 256

    def forward(self, layer_index: int, query: Tensor, key: Tensor, value: Tensor, metadata: Spans,
                kv_cache: object = None) -> Tensor:
        output = torch.empty_like(query)  # [T, H, D]
        for start, length in zip(metadata.starts, metadata.lengths):
            keys, values = key[start:start + length][None], value[start:start + length][None]  # [1, L, Hkv, D]
            for first in range(0, length, self.query_chunk_tokens):
                last = min(length, first + self.query_chunk_tokens)
                # Query i (at position first + i) sees keys 0 .. first + i.
                allowed = torch.ones(last - first, last, dtype=torch.bool, device=query.device).tril(first)
                attended = grouped_query_attention(query[start + first:start + last][None], keys[:, :last],
                                                   values[:, :last], allowed[None])
                output[start + first:start + last] = attended[0]
        return output
