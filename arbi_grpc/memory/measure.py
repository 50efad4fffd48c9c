"""Measures the budget a booted server holds: the bytes of the tensors the engine keeps (weights, KV cache,
codec scratch) plus the activation peak of its largest step, profiled once before serving; on CUDA also the
CUDA graph pool and what the caching allocator reserves beyond all of these.

On the CPU "reserved" means exactly these tensor bytes; allocator overhead and interpreter memory are not in
the budget (the process's resident memory is its own gauge). On CUDA the components add up to
`torch.cuda.memory_reserved()` read after the profile: `allocator_overhead` is that figure less the others
(cached free blocks, block rounding, library workspaces, anything else the process holds on the device).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from arbi_grpc.config import EngineConfig
from arbi_grpc.memory.activation_profile import measure_activation_peak
from arbi_grpc.memory.budget import (
    MemoryBudget,
    MemoryComponent,
    MemoryLimit,
    activations_component,
    allocator_overhead_component,
    codec_scratch_component,
    cuda_graphs_component,
    kv_cache_component,
    weights_component,
)
from arbi_grpc.memory.cuda_estimate import graph_max_batch
from arbi_grpc.memory.estimate import codec_detail, step_detail
from arbi_grpc.memory.kv_pool import KVPoolPlan
from arbi_grpc.memory.profile_step import ProfileStep
from arbi_grpc.models.decoder import CausalLM
from arbi_grpc.models.kv_cache import PagedKVCache


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (tied or viewed tensors count once)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def measure_budget(
    model: CausalLM,
    kv_cache: PagedKVCache,
    config: EngineConfig,
    kv_pool: KVPoolPlan,
    limit: MemoryLimit,
    *,
    codec_scratch_bytes: int = 0,
) -> MemoryBudget:
    """Counts the loaded weights and the allocated pool, then profiles the largest step.

    `codec_scratch_bytes` is what the KV codec holds outside the pool's blocks (0 without one). On CUDA the
    budget ends with `cuda_graphs` (0: capture them afterwards, then `with_cuda_graphs`) and `allocator_overhead`.
    """
    device = kv_cache.device
    if device.type not in ("cpu", "cuda"):
        raise NotImplementedError(f"measuring memory on {device}: only cpu and cuda are measured")
    if device.type == "cuda":
        torch.cuda.empty_cache()  # cached free blocks of the load (e.g. weights before fusion) go back first
    num_parameters = sum(parameter.numel() for parameter in model.parameters())
    step = ProfileStep.worst_case(config.max_step_tokens, kv_pool.max_model_len, config.max_running_requests)
    components = [
        weights_component(tensor_bytes([*model.parameters(), *model.buffers()]),
                          f"{num_parameters:,} parameters as loaded ({config.dtype})"),
        kv_cache_component(tensor_bytes([*kv_cache.key_caches, *kv_cache.value_caches]), kv_pool.detail),
        codec_scratch_component(codec_scratch_bytes, codec_detail(config)),
        activations_component(measure_activation_peak(model, kv_cache, step), step_detail(step)),
    ]
    if device.type == "cuda":
        components += _cuda_components(components, 0, config, device)
    return MemoryBudget(device=config.device, method="measured", components=tuple(components), limit=limit)


def with_cuda_graphs(budget: MemoryBudget, cuda_graph_bytes: int, config: EngineConfig) -> MemoryBudget:
    """A measured CUDA budget once the CUDA graphs were captured after it: `cuda_graphs` set to what the capture
    took (the growth of `torch.cuda.memory_reserved()` across it, with no `empty_cache` in between, so the
    profile's cached blocks stay reserved), `allocator_overhead` read again so the sum stays `memory_reserved()`."""
    if budget.method != "measured" or not budget.device.startswith("cuda"):
        raise ValueError(f"CUDA graphs belong to a measured CUDA budget, not a {budget.method} {budget.device} one")
    kept = [c for c in budget.components if c.name not in ("cuda_graphs", "allocator_overhead")]
    components = kept + _cuda_components(kept, cuda_graph_bytes, config, torch.device(budget.device))
    return MemoryBudget(device=budget.device, method="measured", components=tuple(components), limit=budget.limit)


def _cuda_components(
    measured: list[MemoryComponent], cuda_graph_bytes: int, config: EngineConfig, device: torch.device
) -> list[MemoryComponent]:
    """CUDA graphs as given, and the allocator's reserved bytes beyond every other component."""
    graphs = cuda_graphs_component(
        cuda_graph_bytes,
        f"decode batches up to {graph_max_batch(config)}, growth of the allocator's reserved memory at capture"
        if cuda_graph_bytes else "no CUDA graph captured",
    )
    reserved = torch.cuda.memory_reserved(device)
    overhead = reserved - sum(component.num_bytes for component in (*measured, graphs))
    return [graphs, allocator_overhead_component(
        overhead, f"torch.cuda.memory_reserved() = {reserved:,} bytes, less the other components "
                  "(cached free blocks, block rounding, cuBLAS workspaces)",
    )]
