"""The default KV pool budget: an explicit --kv-cache-memory-mib wins; on the CPU the context x concurrency need
within a share of what the other components leave; on CUDA what they leave under --gpu-memory-utilization."""

from __future__ import annotations

import pytest

from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.errors import InvalidArgumentError, ResourceExhaustedError
from arbi_grpc.memory.budget import MemoryLimit
from arbi_grpc.memory.estimate import estimate_budget
from arbi_grpc.memory.kv_pool import kv_block_bytes, plan_kv_pool
from arbi_grpc.memory.kv_pool_default import CPU_FREE_MEMORY_SHARE, choose_kv_pool_budget, plan_default_kv_pool
from tests.unit.memory.shapes import model_config

GIB = 1024 * MIB


def test_explicit_flag_wins_on_every_device() -> None:
    for device in ("cpu", "cuda"):
        config = EngineConfig(device=device, kv_cache_memory_mib=7)
        budget = choose_kv_pool_budget(config, MemoryLimit(100 * GIB, "test"), 10 * GIB, 1 * MIB)
        assert (budget.num_bytes, budget.source) == (7 * MIB, "kv_cache_memory_mib=7")


def test_cpu_takes_what_the_running_batch_of_full_contexts_needs_when_it_fits() -> None:
    config = EngineConfig(max_running_requests=16)
    budget = choose_kv_pool_budget(config, MemoryLimit(8 * GIB, "test"), 1 * GIB, 3 * MIB)
    assert budget.num_bytes == 16 * 3 * MIB
    assert "max_running_requests=16" in budget.source


def test_cpu_is_capped_by_a_share_of_the_memory_the_others_leave() -> None:
    config = EngineConfig(max_running_requests=64)
    budget = choose_kv_pool_budget(config, MemoryLimit(4 * GIB, "MemAvailable"), 1 * GIB, 360 * MIB)
    assert budget.num_bytes == int(3 * GIB * CPU_FREE_MEMORY_SHARE)
    assert "MemAvailable" in budget.source


def test_cuda_fills_the_utilization_fraction_minus_the_other_components() -> None:
    config = EngineConfig(device="cuda", gpu_memory_utilization=0.8)
    budget = choose_kv_pool_budget(config, MemoryLimit(100 * GIB, "free"), 30 * GIB, 1 * MIB)
    assert budget.num_bytes == int(100 * GIB * 0.8) - 30 * GIB
    assert "gpu_memory_utilization=0.8" in budget.source


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_no_room_left_is_refused_naming_the_flags(device: str) -> None:
    with pytest.raises(ResourceExhaustedError, match="--kv-cache-memory-mib"):
        choose_kv_pool_budget(EngineConfig(device=device), MemoryLimit(2 * GIB, "test"), 2 * GIB, MIB)


@pytest.mark.parametrize("fraction", [0.0, 1.5])
def test_utilization_outside_the_unit_interval_is_refused(fraction: float) -> None:
    with pytest.raises(InvalidArgumentError, match="gpu_memory_utilization"):
        EngineConfig(gpu_memory_utilization=fraction)


def test_plan_kv_pool_without_a_budget_needs_the_explicit_flag() -> None:
    with pytest.raises(InvalidArgumentError, match="kv_cache_memory_mib"):
        plan_kv_pool(EngineConfig(), model_config())


def test_default_cpu_pool_holds_the_running_batch_at_the_context_limit() -> None:
    model = model_config()
    config = EngineConfig(max_running_requests=4, max_model_len=64, block_size=16)
    limit = MemoryLimit(64 * GIB, "test")
    pool = plan_default_kv_pool(config, model, limit)
    assert pool.num_blocks == 4 * 64 // 16
    assert pool.num_bytes == 4 * 4 * kv_block_bytes(config, model)
    assert "max_running_requests=4" in pool.detail
    budget = estimate_budget(config, model, pool, limit)
    assert budget.component("kv_cache").num_bytes == pool.num_bytes


def test_chat_models_still_to_load_split_the_room_and_residents_count_as_others() -> None:
    from arbi_grpc.memory.budget import MemoryComponent
    from arbi_grpc.memory.residents import pending_model_component

    cuda = EngineConfig(device="cuda", gpu_memory_utilization=0.8)
    first = choose_kv_pool_budget(cuda, MemoryLimit(100 * GIB, "free"), 10 * GIB, 1 * MIB, share=2)
    assert first.num_bytes == (int(100 * GIB * 0.8) - 10 * GIB) // 2
    assert "split 1/2 among the chat models still to load" in first.source
    cpu = choose_kv_pool_budget(EngineConfig(max_running_requests=64), MemoryLimit(4 * GIB, "test"), 1 * GIB,
                                360 * MIB, share=3)
    assert cpu.num_bytes == int(3 * GIB * CPU_FREE_MEMORY_SHARE) // 3
    # plan_default_kv_pool counts the residents among the other components and names the model when they fill it.
    model = model_config()
    resident = MemoryComponent("model other", 8 * GIB, "resident chat model", "unload it")
    with pytest.raises(ResourceExhaustedError, match="of model 'next' does not fit: model other 8,192.0 MiB"):
        plan_default_kv_pool(EngineConfig(), model, MemoryLimit(8 * GIB, "test"), residents=(resident,),
                             subject="model 'next'")

    # Two models of one shape at boot: the first leaves room for the second (estimated without its pool) and
    # takes half; the second, with the first resident, takes what is left: equal pools.
    config, limit = EngineConfig(device="cuda", max_model_len=256, kv_cache_dtype="bfloat16"), MemoryLimit(4 * GIB, "t")
    pending = pending_model_component("second", config, model, limit)
    first_pool = plan_default_kv_pool(config, model, limit, pending=(pending,))
    first_resident = MemoryComponent("model first", pending.num_bytes + first_pool.num_bytes, "resident", "")
    second_pool = plan_default_kv_pool(config, model, limit, residents=(first_resident,))
    assert first_pool.num_blocks == second_pool.num_blocks > 0
    # Beside each other, both take the auto floor the second was estimated at (alone, this pool would buy 256).
    assert first_pool.max_running_requests == second_pool.max_running_requests == 64
    assert plan_default_kv_pool(config, model, limit).max_running_requests == 256
