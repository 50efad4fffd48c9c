"""TKV write by slot against arbi_grpc.kv_codec: codes, scales, zeros and sink entries (tkv_batches.assert_same_encoding),
and the exact code-space K/V it returns, bit for bit."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from arbi_kernels import write_tkv_cache
from arbi_kernels.tkv_write import WriteTiles
from tests.kernels.tkv_batches import (
    TkvShape,
    assert_same_encoding,
    copy_pools,
    positions_of_slots,
    random_model_space_kv,
    random_tkv_layer,
)
from tests.kernels.tkv_reference import write_tkv_cache_reference


def _write_both(shape: TkvShape, num_tokens: int, dtype: torch.dtype, device, generator,
                tiles: WriteTiles | None = None):
    num_blocks = num_tokens // shape.page_size + 3
    layer = random_tkv_layer(shape, num_blocks, device, generator)
    expected = copy_pools(layer)
    slots = torch.randperm(num_blocks * shape.page_size, generator=generator)[:num_tokens]
    if num_tokens > 4:
        slots[torch.randint(0, num_tokens, (2,), generator=generator)] = -1  # padding tokens
    slots = slots.to(device)
    positions = positions_of_slots(slots, shape.page_size, generator)
    key, value = random_model_space_kv(positions, shape.num_kv_heads, shape.head_dim, device, generator)
    key, value = key.to(dtype), value.to(dtype)
    exact = write_tkv_cache(key, value, positions, slots, layer, tiles)
    expected_exact = write_tkv_cache_reference(key, value, positions, slots, expected)
    kept = slots >= 0
    for actual_rows, expected_rows in zip(exact, expected_exact):
        assert actual_rows.dtype == torch.float16 and actual_rows.shape == key.shape
        assert torch.equal(actual_rows[kept], expected_rows[kept])
    return layer, expected


@pytest.mark.parametrize(
    ("key_bits", "value_bits", "head_dim", "group_size", "sink_tokens", "rotate", "dtype"),
    [
        (4, 4, 64, 32, 1, True, torch.bfloat16),
        (3, 5, 64, 16, 2, True, torch.float16),
        (2, 8, 32, 8, 0, False, torch.float32),
        (6, 3, 64, 64, 4, True, torch.float32),
        (8, 2, 128, 32, 1, True, torch.bfloat16),
        (5, 6, 16, 8, 1, True, torch.float16),
    ],
)
def test_matches_the_codec(key_bits, value_bits, head_dim, group_size, sink_tokens, rotate, dtype, device,
                                   generator):
    shape = TkvShape(4, 2, head_dim, 16, key_bits, value_bits, group_size, sink_tokens, rotate)
    assert_same_encoding(*_write_both(shape, 37, dtype, device, generator))


@pytest.mark.parametrize("num_tokens", [1, 2, 3, 6])
def test_decode_sized_writes(num_tokens, device, generator):
    """A decode step's few tokens, without the padding rows the other tests add."""
    shape = TkvShape(4, 2, 64, 16, 4, 3, 32, 1, True)
    assert_same_encoding(*_write_both(shape, num_tokens, torch.bfloat16, device, generator))


@pytest.mark.parametrize("tiles", [WriteTiles(1, 1), WriteTiles(4, 2), WriteTiles(16, 4)])
def test_every_write_tile_shape_matches_the_codec(tiles, device, generator):
    shape = TkvShape(4, 2, 64, 16, 3, 5, 16, 2, True)
    assert_same_encoding(*_write_both(shape, 21, torch.float16, device, generator, tiles))


def test_strided_key_and_value_views(device, generator):
    """K and V sliced out of a fused QKV projection are read through their strides."""
    shape = TkvShape(4, 2, 64, 16, 4, 3)
    layer = random_tkv_layer(shape, 4, device, generator)
    expected = copy_pools(layer)
    fused = torch.randn((20, 8, 64), generator=generator).to(device)
    key, value = fused[:, 4:6], fused[:, 6:8]
    positions = torch.arange(20, device=device)
    slots = torch.arange(20, device=device) + 16
    exact = write_tkv_cache(key, value, positions, slots, layer)
    expected_exact = write_tkv_cache_reference(key, value, positions, slots, expected)
    assert_same_encoding(layer, expected)
    assert all(torch.equal(actual, wanted) for actual, wanted in zip(exact, expected_exact))


def test_only_positions_below_sink_tokens_touch_the_sink_pool(device, generator):
    shape = TkvShape(2, 1, 32, 16, 4, 4, group_size=16, sink_tokens=2)
    layer = random_tkv_layer(shape, 2, device, generator)
    before = layer.key_sink.clone()
    positions = torch.tensor([1, 2, 3], device=device)
    slots = torch.tensor([17, 18, 19], device=device)  # block 1, offsets 1..3
    key, value = random_model_space_kv(positions, 1, 32, device, generator)
    write_tkv_cache(key, value, positions, slots, layer)
    changed = (layer.key_sink != before).any(dim=-1).any(dim=-1)  # [num_blocks, sink_tokens]
    assert changed.nonzero().tolist() == [[1, 1]]


def _bad(layer, **changes):
    return dataclasses.replace(layer, **changes)


def test_rejects_bad_arguments(device, generator):
    shape = TkvShape(2, 1, 32, 16, 4, 4, group_size=16, sink_tokens=1)
    layer = random_tkv_layer(shape, 2, device, generator)
    key = torch.zeros((3, 1, 32), device=device)
    positions = torch.zeros(3, dtype=torch.int64, device=device)
    slots = torch.zeros(3, dtype=torch.int64, device=device)
    cases = [
        ((key, key, positions, slots, _bad(layer, key_bits=3)), "key_codes: expected shape"),
        ((key, key, positions, slots, _bad(layer, value_bits=7)), "value_bits: must be one of"),
        ((key, key, positions, slots, _bad(layer, group_size=12)), "group_size"),
        ((key, key, positions, slots, _bad(layer, sink_tokens=17)), "sink_tokens"),
        ((key, key, positions, slots, _bad(layer, key_metadata=layer.key_metadata.float())), "key_metadata: dtype"),
        ((key, key, positions, slots, _bad(layer, value_codes=layer.value_codes.transpose(0, 1))),
         "value_codes: expected shape"),
        ((key, key, positions, slots, _bad(layer, value_metadata=torch.zeros(2, 1, 16, 2, 4, dtype=torch.float16,
                                                                             device=device)[..., ::2])),
         "value_metadata: must be contiguous"),
        ((key, key, positions, slots, _bad(layer, key_metadata=layer.key_metadata.transpose(1, 2).contiguous())),
         "key_metadata: expected shape"),
        ((key, key, positions.int(), slots, layer), "positions: dtype"),
        ((key, key, positions, slots[:2], layer), "slot_mapping: expected shape"),
        ((key, key.half(), positions, slots, layer), "value: dtype"),
        ((key[:, :, :16], key[:, :, :16], positions, slots, layer), "key: expected shape"),
    ]
    for arguments, message in cases:
        with pytest.raises(ValueError, match=message):
            write_tkv_cache(*arguments)
