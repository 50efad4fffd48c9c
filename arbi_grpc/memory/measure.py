"""Measures the budget a booted server holds: the bytes of the tensors the engine keeps (weights, KV cache)
plus the activation peak of its largest step, profiled once before serving.

On the CPU "reserved" means exactly these tensor bytes; allocator overhead and interpreter memory are not
in the budget (the process's resident memory is its own gauge). CUDA's counterpart,
torch.cuda.memory_reserved(), is not read here because the CUDA engine path is not wired.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from arbi_grpc.config import EngineConfig
from arbi_grpc.memory.activation_profile import measure_activation_peak
from arbi_grpc.memory.budget import (
    MemoryBudget,
    MemoryLimit,
    activations_component,
    kv_cache_component,
    weights_component,
)
from arbi_grpc.memory.estimate import step_detail
from arbi_grpc.memory.kv_pool import KVPoolPlan
from arbi_grpc.memory.profile_step import ProfileStep
from arbi_grpc.models.decoder import CausalLM
from arbi_grpc.models.kv_cache import PagedKVCache


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (tied or viewed tensors count once)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def measure_budget(model: CausalLM, kv_cache: PagedKVCache, config: EngineConfig, kv_pool: KVPoolPlan,
                   limit: MemoryLimit) -> MemoryBudget:
    """Counts the loaded weights and the allocated pool, then profiles the largest step."""
    if kv_cache.device.type != "cpu":
        raise NotImplementedError(
            f"measuring memory on {kv_cache.device}: only the CPU is measured (the CUDA engine path is not wired)"
        )
    weights = tensor_bytes([*model.parameters(), *model.buffers()])
    num_parameters = sum(parameter.numel() for parameter in model.parameters())
    step = ProfileStep.worst_case(config.max_step_tokens, kv_pool.max_model_len, config.max_running_requests)
    return MemoryBudget(
        device=config.device,
        method="measured",
        components=(
            weights_component(weights, f"{num_parameters:,} parameters as loaded ({config.dtype})"),
            kv_cache_component(tensor_bytes([*kv_cache.key_caches, *kv_cache.value_caches]), kv_pool.detail),
            activations_component(measure_activation_peak(model, kv_cache, step), step_detail(step)),
        ),
        limit=limit,
    )
