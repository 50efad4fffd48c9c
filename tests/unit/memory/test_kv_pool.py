"""KV pool sizing: exact bytes per block, TKV sink rows and tail slots, the context limit, and refusals that name
the KV cache."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.config import EngineConfig
from arbi_grpc.errors import InvalidArgumentError, ResourceExhaustedError
from arbi_grpc.kv_codec import TkvCalibration, TkvSpec
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache
from arbi_grpc.memory.kv_pool import num_sink_blocks, plan_kv_pool
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.reference_shapes import model_config_for_shape
from tests.unit.memory.shapes import model_config


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_block_bytes_match_the_allocated_cache(dtype: str) -> None:
    model = model_config()
    pool = plan_kv_pool(EngineConfig(dtype=dtype, kv_cache_memory_mib=1, block_size=8), model)
    cache = PagedKVCache.for_model(model, num_blocks=pool.num_blocks, block_size=8,
                                   dtype=getattr(torch, dtype), device="cpu")
    allocated = sum(t.numel() * t.element_size() for t in (*cache.key_caches, *cache.value_caches))
    assert pool.num_bytes == allocated
    assert pool.bytes_per_block == cache.bytes_per_block
    assert pool.num_blocks == (1 << 20) // pool.bytes_per_block


def test_context_defaults_to_the_model_capped_by_the_pool() -> None:
    model = model_config(max_position_embeddings=100_000)
    pool = plan_kv_pool(EngineConfig(kv_cache_memory_mib=1, block_size=16), model)
    assert pool.max_model_len == pool.capacity_tokens < 100_000
    roomy = plan_kv_pool(EngineConfig(kv_cache_memory_mib=64, block_size=16), model_config())
    assert roomy.max_model_len == 512  # the model's own context


def test_a_max_length_sequence_that_cannot_fit_is_refused_with_numbers() -> None:
    model = model_config(max_position_embeddings=100_000)
    with pytest.raises(ResourceExhaustedError) as refused:
        plan_kv_pool(EngineConfig(kv_cache_memory_mib=1, block_size=16, max_model_len=50_000), model)
    message = str(refused.value)
    assert "KV cache" in message and "max_model_len=50000" in message and "kv_cache_memory_mib=1" in message
    assert "--kv-cache-memory-mib" in message


def test_a_pool_without_one_block_and_a_context_beyond_the_model_are_refused() -> None:
    big = model_config(hidden_size=4096, num_attention_heads=32, num_key_value_heads=32, num_hidden_layers=64)
    with pytest.raises(ResourceExhaustedError, match="holds no block"):
        plan_kv_pool(EngineConfig(kv_cache_memory_mib=1, block_size=64), big)
    with pytest.raises(InvalidArgumentError, match="max_model_len"):
        plan_kv_pool(EngineConfig(kv_cache_memory_mib=1, max_model_len=513), model_config())


def _tkv_calibration(model: ModelConfig, key_bits: int, value_bits: int) -> TkvCalibration:
    spec = TkvSpec(key_bits, value_bits, 32, 1)
    return TkvCalibration.uniform("tkvfp1:test", spec, model.num_layers, model.num_kv_heads, model.head_dim)


@pytest.mark.parametrize("num_blocks,max_running,expected",
                         [(800, 64, 100), (801, 64, 101), (100, 64, 65), (40, 64, 40)])
def test_sink_rows_are_one_block_in_eight_but_cover_a_full_running_batch(num_blocks, max_running, expected) -> None:
    assert num_sink_blocks(num_blocks, max_running) == expected


@pytest.mark.parametrize("budget_mib,max_running", [(1, 4), (12, 64), (7, 1)])
def test_a_tkv_pool_is_the_most_blocks_whose_blocks_sink_rows_and_tail_slots_fit_the_budget(
        budget_mib, max_running) -> None:
    model = model_config(num_hidden_layers=4, hidden_size=256)  # head_dim 64
    calibration = _tkv_calibration(model, 4, 3)
    config = EngineConfig(kv_cache_dtype="tkv", kv_calibration="bundle-dir", kv_cache_memory_mib=budget_mib,
                          block_size=16, max_running_requests=max_running)
    pool = plan_kv_pool(config, model, calibration)
    window = config.kv_exact_window_blocks
    assert pool.num_sink_blocks == num_sink_blocks(pool.num_blocks, max_running)
    assert pool.num_tail_slots == max_running
    assert pool.tail_bytes == max_running * TkvPagedKVCache.tail_slot_bytes_for(calibration, 16, window) > 0
    assert pool.num_bytes == TkvPagedKVCache.num_bytes_for(
        calibration, 16, pool.num_blocks, pool.num_sink_blocks, max_running, window)
    one_more = pool.num_blocks + 1
    assert pool.num_bytes <= budget_mib << 20 < TkvPagedKVCache.num_bytes_for(
        calibration, 16, one_more, num_sink_blocks(one_more, max_running), max_running, window)
    assert f"{pool.num_sink_blocks} sink rows" in pool.detail
    assert f"{max_running} tail slots" in pool.detail


def test_a_tkv_plan_counts_the_bytes_the_allocated_cache_holds() -> None:
    model = model_config(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, num_key_value_heads=2)
    calibration = _tkv_calibration(model, 4, 4)
    config = EngineConfig(kv_cache_dtype="tkv", kv_calibration="bundle-dir", kv_cache_memory_mib=1, block_size=16,
                          max_running_requests=3)
    pool = plan_kv_pool(config, model, calibration)
    cache = TkvPagedKVCache(calibration, num_blocks=pool.num_blocks, block_size=16, device="cpu",
                            num_sink_blocks=pool.num_sink_blocks, num_tail_slots=pool.num_tail_slots,
                            exact_blocks=config.kv_exact_window_blocks)
    assert pool.num_bytes == sum(t.numel() * t.element_size() for t in (*cache.key_caches, *cache.value_caches))


def test_a_budget_the_tail_slots_fill_holds_no_block_and_says_so() -> None:
    model = model_config(num_hidden_layers=4, hidden_size=256)
    calibration = _tkv_calibration(model, 4, 4)
    tail_bytes = 512 * TkvPagedKVCache.tail_slot_bytes_for(calibration, 16)
    assert tail_bytes >= 1 << 20  # 512 running sequences' tail slots alone fill 1 MiB
    config = EngineConfig(kv_cache_dtype="tkv", kv_calibration="bundle-dir", kv_cache_memory_mib=1, block_size=16,
                          max_running_requests=512)
    with pytest.raises(ResourceExhaustedError, match="holds no block.*tail slots of 512 running sequences"):
        plan_kv_pool(config, model, calibration)


BUDGET_MIB = 8192


def _capacity_vs_bf16(shape: str, key_bits: int, value_bits: int, max_running: int = 1) -> float:
    model = model_config_for_shape(shape)
    budget = {"kv_cache_memory_mib": BUDGET_MIB, "block_size": 16, "max_running_requests": max_running}
    bf16 = plan_kv_pool(EngineConfig(kv_cache_dtype="bfloat16", **budget), model)
    tkv = plan_kv_pool(EngineConfig(kv_cache_dtype="tkv", kv_calibration="bundle-dir", **budget), model,
                       _tkv_calibration(model, key_bits, value_bits))
    return tkv.capacity_tokens / bf16.capacity_tokens


@pytest.mark.parametrize("shape", ["smollm2-135m", "llama3-8b"])  # head_dim 64 and 128
def test_k4v4_g32_holds_over_3_1_times_the_tokens_of_bf16_at_equal_memory(shape: str) -> None:
    # Without any sink row K4V4 G32 would hold 3.2x (240 of 768 bytes per token and layer at D=64); sink rows for
    # one block in eight cost 1/128 of a bf16 token per token at block 16. One running sequence: one tail slot.
    assert 3.1 <= _capacity_vs_bf16(shape, 4, 4) < 3.2
    assert _capacity_vs_bf16(shape, 4, 3) > _capacity_vs_bf16(shape, 4, 4)


@pytest.mark.parametrize("shape", ["smollm2-135m", "llama3-8b"])
def test_tail_slots_take_their_bytes_off_the_blocks(shape: str) -> None:
    # 63 more running sequences cost 63 more tail slots (the default window: 4 fp16 blocks): at Llama-3-8B's shape
    # 8 MiB each, so 64 running sequences leave 2.93x instead of 3.12x of bf16's tokens in 8 GiB.
    model = model_config_for_shape(shape)
    window = EngineConfig(kv_cache_dtype="tkv", kv_calibration="bundle-dir", block_size=16).kv_exact_window_blocks
    tail_share = 63 * TkvPagedKVCache.tail_slot_bytes_for(_tkv_calibration(model, 4, 4), 16, window) / (BUDGET_MIB << 20)
    assert _capacity_vs_bf16(shape, 4, 4, max_running=64) == pytest.approx(
        _capacity_vs_bf16(shape, 4, 4) * (1 - tail_share), rel=1e-3)
