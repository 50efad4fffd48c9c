"""TkvPagedKVCache: per-layer shapes and dtypes from the calibration's bits, zeroed memory, bytes per block."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.kv_codec import TkvCalibration, TkvSpec
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache


def _calibration(layer_bits: tuple[tuple[int, int], ...], group_size: int = 16, sink_tokens: int = 2):
    base = TkvCalibration.uniform("tkvfp1:test", TkvSpec(4, 4, group_size, sink_tokens), len(layer_bits), 2, 32)
    scales = torch.linspace(0.5, 2.0, base.key_scales.numel()).view(base.key_scales.shape)
    return TkvCalibration(
        "tkvfp1:test", group_size, True, layer_bits, scales, scales.flip(-1).contiguous(), scales - 1, 1 - scales,
        "test", sink_tokens,
    )


def test_layers_follow_their_own_bits_and_start_zeroed():
    calibration = _calibration(((8, 8), (4, 3), (2, 5)))
    cache = TkvPagedKVCache(calibration, num_blocks=6, block_size=4, device="cpu")
    for index, (key_bits, value_bits) in enumerate(calibration.layer_bits):
        layer = cache.layer(index)
        assert (layer.key_bits, layer.value_bits, layer.group_size, layer.sink_tokens) == (key_bits, value_bits, 16, 2)
        assert layer.key_codes.shape == (6, 4, 2, 32 * key_bits // 8) and layer.key_codes.dtype == torch.uint8
        assert layer.value_codes.shape == (6, 4, 2, 32 * value_bits // 8)
        for metadata in (layer.key_scale, layer.key_zero, layer.value_scale, layer.value_zero):
            assert metadata.shape == (6, 4, 2, 2) and metadata.dtype == torch.float16
        for sink in (layer.key_sink, layer.value_sink):
            assert sink.shape == (6, 2, 2, 32) and sink.dtype == torch.float16
        assert torch.equal(layer.key_channel_scale, calibration.key_scales[index])
        assert torch.equal(layer.value_shift, calibration.value_shifts[index])
        assert layer.key_channel_scale.dtype == torch.float32 and layer.rotate
        assert cache.codec(index).spec.key_bits == key_bits
    assert all(not tensor.any() for tensor in cache.key_caches + cache.value_caches)


def test_bytes_per_block_counts_every_per_block_tensor():
    calibration = _calibration(((8, 8), (4, 3), (2, 5)))
    cache = TkvPagedKVCache(calibration, num_blocks=5, block_size=8, device="cpu")
    total = sum(tensor.numel() * tensor.element_size() for tensor in cache.key_caches + cache.value_caches)
    assert total == cache.bytes_per_block * cache.num_blocks
    assert TkvPagedKVCache.bytes_per_block_for(calibration, 8) == cache.bytes_per_block
    assert cache.transform_bytes == 3 * 4 * 2 * 32 * 4  # layers x (scale, shift of K and V) x [2, 32] fp32


def test_bytes_per_token_matches_the_spec_formula_without_sinks():
    from arbi_grpc.kv_codec import bytes_per_token

    calibration = _calibration(((4, 4),) * 3, group_size=32, sink_tokens=0)
    block_bytes = TkvPagedKVCache.bytes_per_block_for(calibration, 16)
    assert block_bytes == 3 * 16 * bytes_per_token(32, 2, TkvSpec(4, 4, 32, 0))


def test_setting_name_names_uniform_bits_or_the_average():
    uniform = TkvPagedKVCache(_calibration(((4, 3),) * 2), num_blocks=1, block_size=4, device="cpu")
    assert uniform.setting_name == "tkv K4V3 G16 sink2"
    mixed = TkvPagedKVCache(_calibration(((4, 4), (3, 3))), num_blocks=1, block_size=4, device="cpu")
    assert mixed.setting_name.startswith("tkv 3.50 bits")


def test_sink_larger_than_a_block_is_refused():
    with pytest.raises(InvalidArgumentError, match="sink tokens do not fit"):
        TkvPagedKVCache(_calibration(((4, 4),), sink_tokens=8), num_blocks=2, block_size=4, device="cpu")


def test_the_pool_planner_sizes_a_tkv_pool_from_the_calibration_bits():
    from arbi_grpc.config import EngineConfig
    from arbi_grpc.memory.kv_pool import plan_kv_pool
    from tests.unit.memory.shapes import model_config

    model = model_config()
    calibration = TkvCalibration.uniform(
        "tkvfp1:test", TkvSpec(4, 3, 16, 1), model.num_layers, model.num_kv_heads, model.head_dim
    )
    config = EngineConfig(kv_cache_dtype="tkv", kv_calibration="bundle-dir", kv_cache_memory_mib=1, block_size=8)
    pool = plan_kv_pool(config, model, calibration)
    cache = TkvPagedKVCache(calibration, num_blocks=pool.num_blocks, block_size=8, device="cpu")
    allocated = sum(tensor.numel() * tensor.element_size() for tensor in cache.key_caches + cache.value_caches)
    assert pool.num_bytes == allocated <= 1 << 20 < allocated + cache.bytes_per_block
    with pytest.raises(InvalidArgumentError, match="calibration bundle"):
        plan_kv_pool(config, model)
