"""Causal attention without a KV cache: each sequence of a flattened batch against plain dense causal attention,
with its queries in chunks shorter and longer than the sequences; and the span layout it reads."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.attention.uncached import Spans, UncachedCausalAttention
from tests.unit.models.test_torch_paged_attention import dense_causal_attention


@pytest.mark.parametrize("chunk", [4, 256])
def test_each_sequence_attends_causally_over_its_own_tokens(chunk: int) -> None:
    generator = torch.Generator().manual_seed(0)
    spans = Spans((1, 5, 37))
    query = torch.randn(spans.num_tokens, 6, 8, generator=generator)
    key, value = (torch.randn(spans.num_tokens, 2, 8, generator=generator) for _ in range(2))
    output = UncachedCausalAttention(query_chunk_tokens=chunk).forward(0, query, key, value, spans)
    for start, length in zip(spans.starts, spans.lengths):
        rows = slice(start, start + length)
        expected = dense_causal_attention(query[rows], key[rows], value[rows])
        torch.testing.assert_close(output[rows], expected, atol=1e-5, rtol=1e-5)


def test_spans_give_positions_and_last_rows() -> None:
    spans = Spans((2, 1, 3))
    assert spans.starts == (0, 2, 3) and spans.num_tokens == 6
    assert spans.positions("cpu").tolist() == [0, 1, 0, 0, 1, 2]
    assert spans.last_rows("cpu").tolist() == [1, 2, 5]
    with pytest.raises(ValueError, match="one or more sequences"):
        Spans((3, 0))
