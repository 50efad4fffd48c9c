"""The measured budget: exact tensor bytes on the CPU; on CUDA, graphs captured after the profile join the
budget and `allocator_overhead` keeps the sum equal to what the caching allocator reserved."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.memory.budget import (
    MemoryBudget,
    MemoryLimit,
    activations_component,
    allocator_overhead_component,
    codec_scratch_component,
    cuda_graphs_component,
    kv_cache_component,
    weights_component,
)
from arbi_grpc.memory.kv_pool import plan_kv_pool
from arbi_grpc.memory.measure import measure_budget, with_cuda_graphs
from arbi_grpc.models.kv_cache import PagedKVCache
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
    budget = measure_budget(model, cache, config, pool, LIMIT, codec_scratch_bytes=123)
    assert [c.name for c in budget.components] == ["weights", "kv_cache", "codec_scratch", "activations"]
    assert budget.component("weights").num_bytes == sum(p.numel() * 4 for p in model.parameters())
    assert budget.component("kv_cache").num_bytes == pool.num_bytes
    assert budget.component("codec_scratch").num_bytes == 123
    assert budget.component("activations").num_bytes >= 64 * model_shape.vocab_size * 4  # float32 logits


def _measured_cuda_budget(overhead: int) -> MemoryBudget:
    return MemoryBudget(device="cuda", method="measured", limit=LIMIT, components=(
        weights_component(100 * MIB, "w"), kv_cache_component(50 * MIB, "kv"), codec_scratch_component(0, "none"),
        activations_component(25 * MIB, "a"), cuda_graphs_component(0, "none"),
        allocator_overhead_component(overhead, "o"),
    ))


def test_graphs_captured_later_keep_the_sum_at_the_reserved_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 200 * MIB)  # after the capture
    budget = with_cuda_graphs(_measured_cuda_budget(overhead=5 * MIB), 12 * MIB, EngineConfig(device="cuda"))
    assert [c.name for c in budget.components] == [c.name for c in _measured_cuda_budget(0).components]
    assert budget.component("cuda_graphs").num_bytes == 12 * MIB
    assert budget.component("allocator_overhead").num_bytes == (200 - 100 - 50 - 25 - 12) * MIB
    assert budget.total_bytes == 200 * MIB


def test_graphs_join_only_a_measured_cuda_budget() -> None:
    cpu = MemoryBudget(device="cpu", method="measured", limit=LIMIT, components=(weights_component(1, "w"),))
    with pytest.raises(ValueError, match="measured CUDA budget"):
        with_cuda_graphs(cpu, 1, EngineConfig())
