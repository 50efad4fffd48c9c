"""KV pool sizing: exact bytes per block, the context limit, and refusals that name the KV cache."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.config import EngineConfig
from arbi_grpc.errors import InvalidArgumentError, ResourceExhaustedError
from arbi_grpc.memory.kv_pool import plan_kv_pool
from arbi_grpc.models.kv_cache import PagedKVCache
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
        plan_kv_pool(EngineConfig(max_model_len=513), model_config())
