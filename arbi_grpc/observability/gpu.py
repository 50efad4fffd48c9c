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


def open_nvml() -> Any | None:
    """The initialised `pynvml` module when NVML reports at least one GPU, else None."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            pynvml.nvmlShutdown()
            return None
    except pynvml.NVMLError:
        return None
    return pynvml


class GpuMemoryCollector(Collector):
    """Used and total memory of every GPU NVML sees, labelled by index and model name."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml

    def collect(self) -> Iterator[GaugeMetricFamily]:
        nvml = self._nvml
        used = GaugeMetricFamily("arbi_gpu_memory_used_bytes", "GPU memory in use (all processes), from NVML",
                                 labels=["gpu", "name"])
        total = GaugeMetricFamily("arbi_gpu_memory_total_bytes", "GPU memory installed, from NVML",
                                  labels=["gpu", "name"])
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            info = nvml.nvmlDeviceGetMemoryInfo(handle)
            used.add_metric([str(index), name], float(info.used))
            total.add_metric([str(index), name], float(info.total))
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
