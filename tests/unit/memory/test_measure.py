"""The measured budget: exact tensor bytes on the CPU; the CUDA graphs' share is what stays reserved after
their capture, never the capture's transients."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.kv_codec import TkvCalibration, TkvSpec
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache
from arbi_grpc.memory.budget import MemoryLimit
from arbi_grpc.memory.estimate import codec_scratch_bytes
from arbi_grpc.memory.kv_pool import plan_kv_pool
from arbi_grpc.memory.measure import codec_tensor_bytes, measure_budget, reserved_growth
from arbi_grpc.models.random_weights import random_causal_lm
from tests.unit.memory.shapes import model_config

LIMIT = MemoryLimit(1 << 40, "test")


def test_cpu_budget_counts_the_tensors_and_the_profile() -> None:
    model_shape = model_config()
    config = EngineConfig(kv_cache_memory_mib=1, max_step_tokens=64, max_running_requests=4)
    pool = plan_kv_pool(config, model_shape)
    model = random_causal_lm(model_shape, torch.float32, "cpu", seed=0)
    cache = PagedKVCache.for_model(model_shape, num_blocks=pool.num_blocks, block_size=config.block_size,
                                   dtype=torch.float32, device="cpu")
    budget = measure_budget(model, cache, config, pool, LIMIT)
    assert [c.name for c in budget.components] == ["weights", "kv_cache", "codec_scratch", "activations"]
    assert budget.component("weights").num_bytes == sum(p.numel() * 4 for p in model.parameters())
    assert budget.component("kv_cache").num_bytes == pool.num_bytes
    assert budget.component("codec_scratch").num_bytes == 0  # no KV codec
    assert budget.component("activations").num_bytes >= 64 * model_shape.vocab_size * 4  # float32 logits


def test_reserved_growth_keeps_what_stays_reserved(monkeypatch: pytest.MonkeyPatch) -> None:
    reserved = [100 * MIB]
    cached = [40 * MIB]  # free blocks the load left in the cache

    def empty_cache() -> None:
        reserved[0] -= cached[0]
        cached[0] = 0

    def capture() -> None:  # 30 MiB kept by the graphs, 20 MiB of transients left cached
        reserved[0] += 50 * MIB
        cached[0] = 20 * MIB

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: reserved[0])
    assert reserved_growth(capture, torch.device("cuda")) == 30 * MIB


def test_cuda_graph_bytes_are_refused_on_the_cpu() -> None:
    model_shape = model_config()
    config = EngineConfig(kv_cache_memory_mib=1)
    pool = plan_kv_pool(config, model_shape)
    model = random_causal_lm(model_shape, torch.float32, "cpu", seed=0)
    cache = PagedKVCache.for_model(model_shape, num_blocks=pool.num_blocks, block_size=config.block_size,
                                   dtype=torch.float32, device="cpu")
    with pytest.raises(ValueError, match="no CUDA graph"):
        measure_budget(model, cache, config, pool, LIMIT, cuda_graph_bytes=1)


def test_tkv_codec_tensors_are_counted_as_estimated() -> None:
    shape = model_config(num_hidden_layers=3, num_key_value_heads=2, num_attention_heads=4, hidden_size=128)
    calibration = TkvCalibration.uniform("tkvfp1:test", TkvSpec(4, 4, 16, 1), shape.num_layers, shape.num_kv_heads,
                                         shape.head_dim)
    cache = TkvPagedKVCache(calibration, num_blocks=4, block_size=16, device="cpu", num_tail_slots=2)
    counted = codec_tensor_bytes(cache)
    assert counted == 4 * shape.num_layers * shape.num_kv_heads * shape.head_dim * 4  # scale and shift of K and V
    assert counted == codec_scratch_bytes(EngineConfig(kv_cache_dtype="tkv", kv_calibration="bundle"), shape)
