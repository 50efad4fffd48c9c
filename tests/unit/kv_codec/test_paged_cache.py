"""TkvPagedKVCache: per-layer shapes and dtypes from the calibration's bits, zeroed memory, sink rows for the first
blocks only, tail rings of `exact_blocks` blocks and their seeding, bytes per block and per pool."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from arbi_grpc.attention.selection import build_kv_cache
from arbi_grpc.config import EngineConfig
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec import TkvCalibration, TkvSpec
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache, group_metadata_shape, split_group_metadata
from arbi_grpc.kv_codec.quantize import QuantizedGroups, dequantize_groups
from arbi_grpc.memory.kv_pool import plan_kv_pool


def _calibration(layer_bits: tuple[tuple[int, int], ...], group_size: int = 16, sink_tokens: int = 2):
    base = TkvCalibration.uniform("tkvfp1:test", TkvSpec(4, 4, group_size, sink_tokens), len(layer_bits), 2, 32)
    scales = torch.linspace(0.5, 2.0, base.key_scales.numel()).view(base.key_scales.shape)
    return TkvCalibration(
        "tkvfp1:test", group_size, True, layer_bits, scales, scales.flip(-1).contiguous(), scales - 1, 1 - scales,
        "test", sink_tokens,
    )


def test_layers_follow_their_own_bits_and_start_zeroed():
    calibration = _calibration(((8, 8), (4, 3), (2, 5)))
    cache = TkvPagedKVCache(calibration, num_blocks=6, block_size=4, device="cpu", num_sink_blocks=3,
                            num_tail_slots=5)
    for index, (key_bits, value_bits) in enumerate(calibration.layer_bits):
        layer = cache.layer(index)
        assert (layer.key_bits, layer.value_bits, layer.group_size, layer.sink_tokens) == (key_bits, value_bits, 16, 2)
        assert layer.key_codes.shape == (6, 4, 2, 32 * key_bits // 8) and layer.key_codes.dtype == torch.uint8
        assert layer.value_codes.shape == (6, 4, 2, 32 * value_bits // 8)
        for metadata in (layer.key_metadata, layer.value_metadata):  # [blocks, heads, block tokens, groups, 2]
            assert metadata.shape == (6, 2, 4, 2, 2) and metadata.dtype == torch.float16
        for sink in (layer.key_sink, layer.value_sink):
            assert sink.shape == (3, 2, 2, 32) and sink.dtype == torch.float16
        for tail in (layer.key_tail, layer.value_tail):
            assert tail.shape == (5, 4, 2, 32) and tail.dtype == torch.float16
        assert torch.equal(layer.key_channel_scale, calibration.key_scales[index])
        assert torch.equal(layer.value_shift, calibration.value_shifts[index])
        assert layer.key_channel_scale.dtype == torch.float32 and layer.rotate
        assert cache.codec(index).spec.key_bits == key_bits
    assert all(not tensor.any() for tensor in cache.key_caches + cache.value_caches)


def test_group_metadata_pairs_each_groups_scale_and_zero_with_heads_outer_within_a_block():
    metadata = torch.arange(2 * 3 * 4 * 2 * 2, dtype=torch.float16).view(group_metadata_shape(2, 4, 3, 2))
    scale, zero = split_group_metadata(metadata)
    assert scale.shape == zero.shape == (2, 4, 3, 2)  # [blocks, block tokens, heads, groups]
    # block 1, offset 2, head 1, group 1: scale then zero, at ((1 * 3 + 1) * 4 + 2) * 4 + 1 * 2 in the flat pool
    assert (float(scale[1, 2, 1, 1]), float(zero[1, 2, 1, 1])) == (74.0, 75.0)
    scale[0, 3, 2, 0] = -1.0
    assert float(metadata.flatten()[((0 * 3 + 2) * 4 + 3) * 4]) == -1.0  # the views write into the pool


def test_pool_bytes_count_every_block_sink_row_and_tail_slot_tensor():
    calibration = _calibration(((8, 8), (4, 3), (2, 5)))
    cache = TkvPagedKVCache(calibration, num_blocks=5, block_size=8, device="cpu", num_sink_blocks=2,
                            num_tail_slots=3)
    total = sum(tensor.numel() * tensor.element_size() for tensor in cache.key_caches + cache.value_caches)
    assert cache.sink_row_bytes == 3 * 2 * 2 * 2 * 32 * 2  # layers x sink tokens x K,V x heads x D x fp16
    assert cache.tail_slot_bytes == 3 * 8 * 2 * 2 * 32 * 2  # layers x block tokens x K,V x heads x D x fp16
    assert total == cache.num_bytes == cache.bytes_per_block * 5 + cache.sink_row_bytes * 2 + cache.tail_slot_bytes * 3
    assert TkvPagedKVCache.bytes_per_block_for(calibration, 8) == cache.bytes_per_block
    assert TkvPagedKVCache.num_bytes_for(calibration, 8, 5, 2, 3) == cache.num_bytes
    every_block = TkvPagedKVCache(calibration, num_blocks=5, block_size=8, device="cpu",
                                  num_tail_slots=1)  # None: all have a row
    assert every_block.num_sink_blocks == 5 and every_block.layer(0).key_sink.shape[0] == 5
    assert cache.transform_bytes == 3 * 4 * 2 * 32 * 4  # layers x (scale, shift of K and V) x [2, 32] fp32


def test_bytes_per_token_matches_the_spec_formula_without_sinks():
    from arbi_grpc.kv_codec import bytes_per_token

    calibration = _calibration(((4, 4),) * 3, group_size=32, sink_tokens=0)
    block_bytes = TkvPagedKVCache.bytes_per_block_for(calibration, 16)
    assert block_bytes == 3 * 16 * bytes_per_token(32, 2, TkvSpec(4, 4, 32, 0))


def test_setting_name_names_uniform_bits_or_the_average():
    uniform = TkvPagedKVCache(_calibration(((4, 3),) * 2), num_blocks=1, block_size=4, device="cpu", num_tail_slots=1)
    assert uniform.setting_name == "tkv K4V3 G16 sink2"
    mixed = TkvPagedKVCache(_calibration(((4, 4), (3, 3))), num_blocks=1, block_size=4, device="cpu", num_tail_slots=1)
    assert mixed.setting_name.startswith("tkv 3.50 bits")


def test_sink_larger_than_a_block_is_refused():
    with pytest.raises(InvalidArgumentError, match="sink tokens do not fit"):
        TkvPagedKVCache(_calibration(((4, 4),), sink_tokens=8), num_blocks=2, block_size=4, device="cpu",
                        num_tail_slots=1)


def test_no_tail_slot_is_refused():
    with pytest.raises(InvalidArgumentError, match="num_tail_slots"):
        TkvPagedKVCache(_calibration(((4, 4),)), num_blocks=2, block_size=4, device="cpu", num_tail_slots=0)


@pytest.mark.parametrize("num_sink_blocks", [0, 3])
def test_sink_rows_outside_one_to_the_block_count_are_refused(num_sink_blocks: int):
    with pytest.raises(InvalidArgumentError, match="num_sink_blocks"):
        TkvPagedKVCache(_calibration(((4, 4),)), num_blocks=2, block_size=4, device="cpu",
                        num_sink_blocks=num_sink_blocks, num_tail_slots=1)


def test_a_window_of_e_blocks_makes_each_tail_slot_a_ring_of_e_blocks():
    calibration = _calibration(((8, 8), (4, 3)))
    cache = TkvPagedKVCache(calibration, num_blocks=5, block_size=8, device="cpu", num_sink_blocks=2,
                            num_tail_slots=3, exact_blocks=3)
    layer = cache.layer(1)
    assert layer.key_tail.shape == layer.value_tail.shape == (3, 24, 2, 32) and layer.exact_blocks == 3
    assert layer.ring_rows(torch.tensor([0, 7, 8, 23, 24, 31, 50])).tolist() == [0, 7, 8, 23, 0, 7, 2]
    assert cache.tail_slot_bytes == 3 * TkvPagedKVCache.tail_slot_bytes_for(calibration, 8)
    assert cache.tail_slot_bytes == TkvPagedKVCache.tail_slot_bytes_for(calibration, 8, 3)
    total = sum(tensor.numel() * tensor.element_size() for tensor in cache.key_caches + cache.value_caches)
    assert total == cache.num_bytes == TkvPagedKVCache.num_bytes_for(calibration, 8, 5, 2, 3, 3)
    assert cache.setting_name == "tkv 5.75 bits per layer-allocated K/V G16 sink2 exact3"
    one = TkvPagedKVCache(_calibration(((4, 3),)), num_blocks=1, block_size=8, device="cpu", num_tail_slots=1)
    assert one.exact_blocks == 1 and one.setting_name == "tkv K4V3 G16 sink2"


@pytest.mark.parametrize("exact_blocks,block_size,words", [
    (0, 4, "must be in [1, 16], got 0"), (17, 4, "must be in [1, 16], got 17"),
    (5, 64, "window of 320 tokens, more than the 256"),
])
def test_windows_outside_one_to_sixteen_blocks_or_one_tile_are_refused(exact_blocks, block_size, words):
    with pytest.raises(InvalidArgumentError) as refused:
        TkvPagedKVCache(_calibration(((4, 4),)), num_blocks=2, block_size=block_size, device="cpu",
                        num_tail_slots=1, exact_blocks=exact_blocks)
    assert refused.value.field == "kv_exact_blocks" and words in str(refused.value)


def test_seed_tail_writes_decoded_blocks_into_their_ring_rows_of_every_layer():
    calibration = _calibration(((8, 8), (3, 2)))
    cache = TkvPagedKVCache(calibration, num_blocks=6, block_size=4, device="cpu", num_tail_slots=2, exact_blocks=3)
    generator = torch.Generator().manual_seed(0)
    for index in range(calibration.num_layers):
        layer, codec = cache.layer(index), cache.codec(index)
        for codes, metadata, encode in (
            (layer.key_codes, layer.key_metadata, codec.encode_keys),
            (layer.value_codes, layer.value_metadata, codec.encode_values),
        ):
            encoded = encode(3 * torch.randn(6 * 4, 2, 32, generator=generator))
            scale, zero = split_group_metadata(metadata)
            for pool, part in ((codes, encoded.codes), (scale, encoded.scale), (zero, encoded.zero)):
                pool.copy_(part.view(pool.shape))
    # A sequence's blocks 4 and 5 (ring blocks 1 and 2) are pool blocks 2 and 0.
    cache.seed_tail(1, torch.tensor([2, 0]), first_block_index=4)
    for index in range(calibration.num_layers):
        layer = cache.layer(index)
        decoded_keys, decoded_values = layer.decoded_blocks(torch.tensor([2, 0]))
        for tail, decoded, codes, metadata, bits in (
            (layer.key_tail, decoded_keys, layer.key_codes, layer.key_metadata, layer.key_bits),
            (layer.value_tail, decoded_values, layer.value_codes, layer.value_metadata, layer.value_bits),
        ):
            scale, zero = split_group_metadata(metadata)
            block_two = dequantize_groups(QuantizedGroups(codes[2], scale[2], zero[2], bits, 16))
            torch.testing.assert_close(decoded[0], block_two, rtol=0, atol=0)
            assert torch.equal(tail[1, 4:8], decoded[0].half()) and torch.equal(tail[1, 8:12], decoded[1].half())
            assert not tail[1, :4].any() and not tail[0].any()  # ring block 0 and the other slot: untouched
    with pytest.raises(ValueError, match="do not fit a tail ring of 3 blocks"):
        cache.seed_tail(0, torch.tensor([0, 1, 2, 3]), first_block_index=0)


def _planner_model_and_calibration():
    """A small model's config and a uniform K4V3 calibration for it, for the pool planner tests."""
    from tests.unit.memory.shapes import model_config

    model = model_config()
    return model, TkvCalibration.uniform(
        "tkvfp1:test", TkvSpec(4, 3, 16, 1), model.num_layers, model.num_kv_heads, model.head_dim
    )


def test_the_pool_planner_counts_tail_rings_of_e_blocks():
    model, calibration = _planner_model_and_calibration()
    base = EngineConfig(kv_cache_dtype="tkv", kv_calibration="bundle-dir", kv_cache_memory_mib=2, block_size=8,
                        max_running_requests=4)
    plans = {e: plan_kv_pool(dataclasses.replace(base, kv_exact_blocks=e), model, calibration) for e in (1, 4)}
    assert plans[4].tail_slot_bytes == 4 * plans[1].tail_slot_bytes
    assert plans[4].tail_bytes == 4 * plans[4].tail_slot_bytes  # max_running_requests x a ring of 4 blocks
    assert plans[4].num_blocks < plans[1].num_blocks
    cache = build_kv_cache(dataclasses.replace(base, kv_exact_blocks=4), model, plans[4].num_blocks, calibration)
    allocated = sum(tensor.numel() * tensor.element_size() for tensor in cache.key_caches + cache.value_caches)
    assert cache.exact_blocks == 4 and cache.layer(0).key_tail.shape[1] == 32
    assert plans[4].num_bytes == allocated <= 2 << 20 < allocated + cache.bytes_per_block


def test_the_pool_planner_sizes_a_tkv_pool_from_the_calibration_bits():
    model, calibration = _planner_model_and_calibration()
    config = EngineConfig(kv_cache_dtype="tkv", kv_calibration="bundle-dir", kv_cache_memory_mib=1, block_size=8,
                          kv_exact_blocks=1)
    pool = plan_kv_pool(config, model, calibration)  # max_running_requests auto: the floor, at this budget
    assert (pool.max_running_requests, pool.num_tail_slots) == (64, 64)
    with pytest.raises(ValueError, match="tail slot per running request"):
        build_kv_cache(config, model, pool.num_blocks, calibration)
    cache = build_kv_cache(config.with_running_requests(pool.max_running_requests), model, pool.num_blocks, calibration)
    allocated = sum(tensor.numel() * tensor.element_size() for tensor in cache.key_caches + cache.value_caches)
    assert (cache.num_sink_blocks, cache.sink_row_bytes) == (pool.num_sink_blocks, pool.sink_row_bytes)
    assert pool.num_bytes == allocated <= 1 << 20 < allocated + cache.bytes_per_block
    with pytest.raises(InvalidArgumentError, match="calibration bundle"):
        plan_kv_pool(config, model)
