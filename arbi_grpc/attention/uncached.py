"""Causal attention without a KV cache, for a forward pass whose keys and values are never read again (a decoder
model's embeddings: `embeddings/decoder_embedder.py`). Each sequence of the flattened batch attends causally over
its own tokens only; nothing is written anywhere.

Sequences of at most `query_chunk_tokens` attend together, padded to the longest in one call per layer (the layout
and mask are built once per pass and device, in `Spans`); a longer sequence attends alone, its queries in chunks of
`query_chunk_tokens`, so its scores stay [heads, chunk, length] rather than [heads, length, length] (on the CPU,
scaled_dot_product_attention with a mask materializes them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    _layouts: dict = field(default_factory=dict, compare=False, repr=False)  # device -> padded_layout's tensors

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

    def padded_layout(self, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """(row [T], column [T]) of each flat token in a [B, longest] padding, and the mask [B, longest, longest]
        of the keys each padded query may see (its own sequence's, up to itself; a padding query sees its
        sequence's tokens, so no row is empty). Built once per pass and device."""
        if device not in self._layouts:
            self._layouts[device] = tuple(tensor.to(device) for tensor in self._padded_layout())
        return self._layouts[device]

    def _padded_layout(self) -> tuple[Tensor, Tensor, Tensor]:
        longest = max(self.lengths)
        rows = torch.repeat_interleave(torch.arange(len(self.lengths)), torch.tensor(self.lengths))
        columns = self.positions("cpu")
        keys = torch.arange(longest)
        causal = keys[None, :] <= keys[:, None]  # [Lq, Lk]
        real = keys[None, :] < torch.tensor(self.lengths)[:, None]  # [B, Lk]
        return rows, columns, causal[None] & real[:, None, :]

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
        if max(metadata.lengths) <= self.query_chunk_tokens:
            return _attend_padded(query, key, value, metadata)
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


def _attend_padded(query: Tensor, key: Tensor, value: Tensor, spans: Spans) -> Tensor:
    """Every sequence at once, padded to the longest: [T, H, D]."""
    rows, columns, allowed = spans.padded_layout(query.device)
    shape = (len(spans.lengths), max(spans.lengths))
    padded = [tensor.new_zeros((*shape, *tensor.shape[1:])).index_put_((rows, columns), tensor)
              for tensor in (query, key, value)]  # [B, L, heads, D]
    return grouped_query_attention(*padded, allowed)[rows, columns]
