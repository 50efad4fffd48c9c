"""GPU observability without a GPU, through fakes: the caching allocator's gauges (registered only for a
model served on CUDA, promtool-clean), NVML's per-GPU memory in the gauges and in `doctor`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from prometheus_client import CollectorRegistry, generate_latest

from arbi_grpc.commands import doctor
from arbi_grpc.config import MIB
from arbi_grpc.engine.engine import EngineStats
from arbi_grpc.memory.budget import MemoryBudget, MemoryLimit, weights_component
from arbi_grpc.observability.cuda_allocator_metrics import AllocatorStats, CudaAllocatorCollector
from arbi_grpc.observability.gpu import GpuMemoryCollector
from arbi_grpc.observability.metrics import ModelMetrics
from arbi_grpc.observability.nvml import GpuMemory, gpu_memory
from tests.unit.observability.promtool import check_metrics

GIB = 1024 * MIB
FAKE_NVML = SimpleNamespace(
    nvmlDeviceGetCount=lambda: 2,
    nvmlDeviceGetHandleByIndex=lambda index: index,
    nvmlDeviceGetName=lambda handle: b"NVIDIA H200" if handle == 0 else "NVIDIA L4",
    nvmlDeviceGetMemoryInfo=lambda handle: SimpleNamespace(used=(handle + 1) * GIB, free=10 * GIB,
                                                            total=(handle + 11) * GIB),
    nvmlSystemGetDriverVersion=lambda: b"580.95",
)


class _Engine:
    def stats(self) -> EngineStats:
        return EngineStats(num_running=0, num_waiting=0, num_free_blocks=1, num_total_blocks=1, num_preemptions=0,
                           num_cached_blocks=0, num_evictions=0, prefix_cache_hit_tokens=0,
                           prefix_cache_query_tokens=0)


def test_allocator_gauges_read_at_scrape_time() -> None:
    reading = [AllocatorStats(300 * MIB, 200 * MIB, 250 * MIB)]
    registry = CollectorRegistry()
    registry.register(CudaAllocatorCollector(lambda: reading[0]))
    check_metrics(generate_latest(registry))
    assert registry.get_sample_value("arbi_cuda_allocator_reserved_bytes") == 300 * MIB
    reading[0] = AllocatorStats(400 * MIB, 100 * MIB, 350 * MIB)
    assert registry.get_sample_value("arbi_cuda_allocator_allocated_bytes") == 100 * MIB
    assert registry.get_sample_value("arbi_cuda_allocator_peak_allocated_bytes") == 350 * MIB


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_allocator_gauges_exist_only_for_a_model_on_cuda(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 7 * MIB)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 5 * MIB)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 6 * MIB)
    budget = MemoryBudget(device=device, method="measured", components=(weights_component(5 * MIB, "w"),),
                          limit=MemoryLimit(8 * MIB, "test"))
    metrics = ModelMetrics()
    metrics.watch(_Engine(), budget, {"model": "m", "architecture": "a", "dtype": "d", "device": device}, False)
    reserved = metrics.registry.get_sample_value("arbi_cuda_allocator_reserved_bytes")
    assert reserved == (7 * MIB if device == "cuda" else None)
    if device == "cuda":
        assert metrics.registry.get_sample_value("arbi_cuda_allocator_peak_allocated_bytes") == 6 * MIB


def test_nvml_memory_per_gpu_in_the_gauges() -> None:
    assert gpu_memory(FAKE_NVML) == [GpuMemory(0, "NVIDIA H200", GIB, 10 * GIB, 11 * GIB),
                                     GpuMemory(1, "NVIDIA L4", 2 * GIB, 10 * GIB, 12 * GIB)]
    registry = CollectorRegistry()
    registry.register(GpuMemoryCollector(FAKE_NVML))
    check_metrics(generate_latest(registry))
    assert registry.get_sample_value("arbi_gpu_memory_total_bytes", {"gpu": "1", "name": "NVIDIA L4"}) == 12 * GIB


def test_doctor_lists_the_driver_and_each_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "open_nvml", lambda: FAKE_NVML)
    checks = {check.name: check for check in doctor.run_checks()}
    assert checks["nvidia driver"].detail == "580.95 (NVML)"
    assert checks["gpu 0"].detail == "NVIDIA H200: 10.0 GiB free of 11.0 GiB"
    assert checks["gpu 1"].detail == "NVIDIA L4: 10.0 GiB free of 12.0 GiB"
