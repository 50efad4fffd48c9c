"""store_tkv_tail against its reference, bit for bit over the whole tail pool: decodes at a block's first, second
and last offset, chunks within a block, across boundaries and ending on one, padding rows (seq_len 0)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from arbi_kernels import store_tkv_tail
from arbi_kernels.tkv_reference import store_tkv_tail_reference
from arbi_kernels.tkv_testing import TkvShape, random_tkv_layer


def _step(query_lens: list[int], seq_lens: list[int], num_kv_heads: int, head_dim: int, device,
          generator) -> tuple[torch.Tensor, ...]:
    num_tokens = sum(query_lens)
    key_exact, value_exact = (torch.randn((num_tokens, num_kv_heads, head_dim), generator=generator)
                              .to(device=device, dtype=torch.float16) for _ in range(2))
    query_start_loc = torch.tensor([0, *query_lens], device=device).cumsum(0).to(torch.int32)
    return key_exact, value_exact, query_start_loc, torch.tensor(seq_lens, dtype=torch.int32, device=device)


@pytest.mark.parametrize("page_size", [16, 32])
def test_matches_reference(page_size, device, generator):
    shape = TkvShape(4, 2, 64, page_size, 4, 4)
    #            decode at offset 0, 1, last; chunk in a block, across two boundaries, ending on one; padding
    query_lens = [1, 1, 1, 5, 2 * page_size + 3, page_size, 0]
    seq_lens = [page_size + 1, 2, 3 * page_size, page_size + 9, 3 * page_size + 7, 2 * page_size, 0]
    num_slots = len(seq_lens) + 3
    layer = random_tkv_layer(shape, 1, device, generator, num_slots)
    tail_slots = torch.randperm(num_slots, generator=generator)[: len(seq_lens)].to(device=device, dtype=torch.int32)
    key_exact, value_exact, query_start_loc, seq_lens_tensor = _step(query_lens, seq_lens, 2, 64, device, generator)
    initial = layer.key_tail.clone()
    expected = dataclasses.replace(layer, key_tail=layer.key_tail.clone(), value_tail=layer.value_tail.clone())
    store_tkv_tail(key_exact, value_exact, layer, query_start_loc, seq_lens_tensor, tail_slots)
    store_tkv_tail_reference(key_exact, value_exact, expected, query_start_loc, seq_lens_tensor, tail_slots)
    assert torch.equal(layer.key_tail, expected.key_tail)
    assert torch.equal(layer.value_tail, expected.value_tail)
    written = (layer.key_tail != initial).any(dim=-1).any(dim=-1)  # [num_slots, block_size]
    assert int(written.sum()) == 1 + 1 + 1 + 5 + 7 + page_size  # the step tokens in each last block

def test_rejects_bad_arguments(device, generator):
    layer = random_tkv_layer(TkvShape(4, 2, 64, 16, 4, 4), 1, device, generator, 2)
    key_exact, value_exact, query_start_loc, seq_lens = _step([2, 1], [5, 9], 2, 64, device, generator)
    tail_slots = torch.tensor([1, 0], dtype=torch.int32, device=device)
    arguments = {"key_exact": key_exact, "value_exact": value_exact, "layer": layer, "query_start_loc": query_start_loc,
                 "seq_lens": seq_lens, "tail_slots": tail_slots}
    cases = [
        ({"key_exact": key_exact.float()}, "key_exact: dtype"),
        ({"value_exact": value_exact[:2]}, r"value_exact: expected shape \[num_tokens=3"),
        ({"query_start_loc": query_start_loc[:2]}, "query_start_loc: expected shape"),
        ({"seq_lens": seq_lens.long()}, "seq_lens: dtype"),
        ({"tail_slots": tail_slots[:1]}, "tail_slots: expected shape"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            store_tkv_tail(**(arguments | change))
