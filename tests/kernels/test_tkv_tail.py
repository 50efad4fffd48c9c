"""store_tkv_tail against its reference, bit for bit over the whole tail pool: decodes at a block's first, second
and last offset, chunks within a block, across boundaries and ending on one, padding rows (seq_len 0), with exact
windows of E = 1, 2 and 3 blocks (tail slots as rings of E blocks), and the tail shapes the kernels refuse."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from arbi_kernels import store_tkv_tail
from tests.kernels.tkv_batches import TkvShape, random_tkv_layer
from tests.kernels.tkv_reference import store_tkv_tail_reference


def _step(query_lens: list[int], seq_lens: list[int], num_kv_heads: int, head_dim: int, device,
          generator) -> tuple[torch.Tensor, ...]:
    num_tokens = sum(query_lens)
    key_exact, value_exact = (torch.randn((num_tokens, num_kv_heads, head_dim), generator=generator)
                              .to(device=device, dtype=torch.float16) for _ in range(2))
    query_start_loc = torch.tensor([0, *query_lens], device=device).cumsum(0).to(torch.int32)
    return key_exact, value_exact, query_start_loc, torch.tensor(seq_lens, dtype=torch.int32, device=device)


@pytest.mark.parametrize(("page_size", "exact_blocks"), [(16, 1), (32, 1), (4, 3), (8, 2), (16, 3)])
def test_matches_reference(page_size, exact_blocks, device, generator):
    shape = TkvShape(4, 2, 64, page_size, 4, 4, exact_blocks=exact_blocks)
    #            decode at offset 0, 1, last; chunk in a block, across two boundaries, ending on one; a chunk over
    #            more blocks than the window; padding
    query_lens = [1, 1, 1, 5, 2 * page_size + 3, page_size, 4 * page_size + 1, 0]
    seq_lens = [page_size + 1, 2, 3 * page_size, page_size + 9, 3 * page_size + 7, 2 * page_size, 5 * page_size + 2, 0]
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
    written = (layer.key_tail != initial).any(dim=-1).any(dim=-1)  # [num_slots, E * block_size]
    # the step tokens in each sequence's last E blocks (each sequence's first position is p = seq_len - query_len)
    window_starts = [max((seq_len - 1) // page_size - exact_blocks + 1, 0) * page_size for seq_len in seq_lens]
    stored = [max(seq_len - max(start, seq_len - query_len), 0)
              for start, seq_len, query_len in zip(window_starts, seq_lens, query_lens)]
    assert int(written.sum()) == sum(stored)


def test_ring_keeps_the_last_blocks_over_decode_steps(device, generator):
    """A prompt over 2 blocks then decode steps across 3 more, E = 2 at block 4: after each step, the ring rows of
    the last 2 blocks hold exactly those positions' values, row (p // 4) % 2 * 4 + p % 4."""
    page_size, exact_blocks = 4, 2
    layer = random_tkv_layer(TkvShape(4, 2, 64, page_size, 4, 4, exact_blocks=exact_blocks), 1, device, generator, 2)
    total = 21
    keys = torch.randn((total, 2, 64), generator=generator).to(device=device, dtype=torch.float16)
    tail_slots = torch.tensor([1], dtype=torch.int32, device=device)
    steps = [(0, 7), *((position, position + 1) for position in range(7, total))]
    for start, end in steps:
        query_start_loc = torch.tensor([0, end - start], dtype=torch.int32, device=device)
        seq_lens = torch.tensor([end], dtype=torch.int32, device=device)
        store_tkv_tail(keys[start:end], keys[start:end], layer, query_start_loc, seq_lens, tail_slots)
        for position in range(max(((end - 1) // page_size - 1) * page_size, 0), end):
            ring_row = position // page_size % exact_blocks * page_size + position % page_size
            assert torch.equal(layer.key_tail[1, ring_row], keys[position]), (end, position)


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
        ({"layer": dataclasses.replace(layer, key_tail=layer.key_tail[:, :8])}, "rows per tail slot must be"),
        ({"layer": dataclasses.replace(layer, key_tail=torch.cat([layer.key_tail] * 17, dim=1))}, "at most 256"),
        ({"layer": dataclasses.replace(layer, key_tail=torch.cat([layer.key_tail] * 2, dim=1))},
         "value_tail: expected shape"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            store_tkv_tail(**(arguments | change))
