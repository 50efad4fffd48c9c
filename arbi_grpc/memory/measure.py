"""Measures the budget a booted server holds: the bytes of the tensors the engine keeps (weights, KV cache,
codec scratch) plus the activation peak of its largest step, profiled once before serving; on CUDA also the
CUDA graph pool and what the caching allocator reserves beyond all of these.

On the CPU "reserved" means exactly these tensor bytes; allocator overhead and interpreter memory are not in
the budget (the process's resident memory is its own gauge). On CUDA the components add up to
`torch.cuda.memory_reserved()` read after the profile: `allocator_overhead` is that figure less the others
(cached free blocks, block rounding, library workspaces, anything else the process holds on the device).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from arbi_grpc.attention.kv_storage import KVStorage
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
from arbi_grpc.memory.estimate import codec_detail, parameter_count, step_detail
from arbi_grpc.memory.kv_pool import KVPoolPlan
from arbi_grpc.memory.profile_step import ProfileStep
from arbi_grpc.models.decoder import CausalLM


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (tied or viewed tensors count once)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def reserved_growth(action: Callable[[], None], device: torch.device) -> int:
    """Bytes the CUDA caching allocator keeps reserved for good after `action` (capturing the CUDA graphs): its
    reserved memory after less before, each read once the cached free blocks went back to the driver, so
    `action`'s transient allocations do not count (capturing a graph empties the cache anyway)."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved(device)
    action()
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved(device) - before


def measure_budget(
    model: CausalLM,
    kv_cache: KVStorage,
    config: EngineConfig,
    kv_pool: KVPoolPlan,
    limit: MemoryLimit,
    *,
    cuda_graph_bytes: int = 0,
    host_components: tuple[MemoryComponent, ...] = (),
    resident_bytes: int = 0,
) -> MemoryBudget:
    """Counts the loaded weights and the allocated pool, then profiles the largest step.

    On CUDA, capture the graphs first and pass `cuda_graph_bytes = reserved_growth(capture, device)`: capturing
    a graph empties the allocator's cache (torch.cuda.graph does), which would release the profile's cached
    blocks if it came after. `host_components` (the audio models) are counted on the CPU, as in
    `estimate_budget`. `resident_bytes`: what the server's other models hold, which on CUDA the allocator's
    reserved bytes include and the allocator overhead leaves out.
    """
    device = kv_cache.device
    if device.type not in ("cpu", "cuda"):
        raise NotImplementedError(f"measuring memory on {device}: only cpu and cuda are measured")
    if device.type == "cpu" and cuda_graph_bytes:
        raise ValueError(f"cuda_graph_bytes={cuda_graph_bytes} on the CPU, where no CUDA graph is captured")
    if device.type == "cuda":
        torch.cuda.empty_cache()  # cached free blocks of the load (e.g. weights before fusion) go back first
    num_parameters = parameter_count(model.config)  # block-quantized matrices are buffers, not parameters
    step = ProfileStep.worst_case(config.max_step_tokens, kv_pool.max_model_len, config.max_running_requests)
    components = [
        weights_component(tensor_bytes([*model.parameters(), *model.buffers()]),
                          f"{num_parameters:,} parameters as loaded ({config.dtype})"),
        kv_cache_component(tensor_bytes([*kv_cache.key_caches, *kv_cache.value_caches]), kv_pool.detail),
        codec_scratch_component(codec_tensor_bytes(kv_cache), codec_detail(config)),
        activations_component(measure_activation_peak(model, kv_cache, step), step_detail(step)),
    ]
    if device.type == "cuda":
        components += _cuda_components(components, cuda_graph_bytes, config, device, resident_bytes)
    else:
        components += host_components
    return MemoryBudget(device=config.device, method="measured", components=tuple(components), limit=limit)


def codec_tensor_bytes(kv_cache: KVStorage) -> int:
    """What the KV codec keeps outside the pool's blocks (`KVStorage.codec_tensors`, e.g. TKV's per-layer channel
    scales and shifts); nothing for a plain cache."""
    return tensor_bytes(kv_cache.codec_tensors)


def _cuda_components(
    measured: list[MemoryComponent], cuda_graph_bytes: int, config: EngineConfig, device: torch.device,
    resident_bytes: int,
) -> list[MemoryComponent]:
    """CUDA graphs as given, and the allocator's reserved bytes beyond every other component and the other
    resident models."""
    graphs = cuda_graphs_component(
        cuda_graph_bytes,
        f"decode batches up to {config.cuda_graph_batch}: the allocator's reserved memory grew this much at capture"
        if cuda_graph_bytes else "no CUDA graph captured",
    )
    reserved = torch.cuda.memory_reserved(device)
    overhead = max(0, reserved - resident_bytes - sum(component.num_bytes for component in (*measured, graphs)))
    return [graphs, allocator_overhead_component(
        overhead, f"torch.cuda.memory_reserved() = {reserved:,} bytes after the profile, less the other "
                  "components and resident models (cached free blocks, block rounding, cuBLAS workspaces)",
    )]
