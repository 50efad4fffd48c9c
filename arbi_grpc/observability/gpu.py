"""GPU memory gauges read through NVML at scrape time, exported only where NVML works.

NVML comes from the optional `nvidia-ml-py` package (`import pynvml`) and the NVIDIA driver. Without either,
or without a GPU, nothing is registered: the `arbi_gpu_*` series are absent, never zero-filled.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from arbi_grpc.observability.nvml import gpu_memory, open_nvml


class GpuMemoryCollector(Collector):
    """Used and total memory of every GPU NVML sees, labelled by index and model name."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml

    def collect(self) -> Iterator[GaugeMetricFamily]:
        used = GaugeMetricFamily("arbi_gpu_memory_used_bytes", "GPU memory in use (all processes), from NVML",
                                 labels=["gpu", "name"])
        total = GaugeMetricFamily("arbi_gpu_memory_total_bytes", "GPU memory installed, from NVML",
                                  labels=["gpu", "name"])
        for gpu in gpu_memory(self._nvml):
            used.add_metric([str(gpu.index), gpu.name], float(gpu.used_bytes))
            total.add_metric([str(gpu.index), gpu.name], float(gpu.total_bytes))
        yield used
        yield total

    def describe(self) -> list[GaugeMetricFamily]:
        return []


def register_gpu_collector(registry: CollectorRegistry) -> bool:
    """Registers the GPU memory gauges when NVML works here; returns whether it did."""
    nvml = open_nvml()
    if nvml is None:
        return False
    registry.register(GpuMemoryCollector(nvml))
    return True
