"""Gauges of torch's CUDA caching allocator on the serving device, read at scrape time: what it has reserved
from the driver (the figure the memory budget's components add up to at boot), what live tensors take of it,
and the highest allocation since boot. Registered only for a model served on CUDA.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


@dataclass(frozen=True)
class AllocatorStats:
    reserved_bytes: int
    allocated_bytes: int
    peak_allocated_bytes: int


def cuda_allocator_reader(device: torch.device | str) -> Callable[[], AllocatorStats]:
    """A function reading the allocator's figures for `device` now."""

    def read() -> AllocatorStats:
        return AllocatorStats(torch.cuda.memory_reserved(device), torch.cuda.memory_allocated(device),
                              torch.cuda.max_memory_allocated(device))

    return read


class CudaAllocatorCollector(Collector):
    """`arbi_cuda_allocator_{reserved,allocated,peak_allocated}_bytes` from `read()` at each scrape."""

    def __init__(self, read: Callable[[], AllocatorStats]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        stats = self._read()
        yield GaugeMetricFamily("arbi_cuda_allocator_reserved_bytes",
                                "GPU memory torch's caching allocator holds from the driver",
                                value=float(stats.reserved_bytes))
        yield GaugeMetricFamily("arbi_cuda_allocator_allocated_bytes",
                                "GPU memory held by live tensors (part of the reserved memory)",
                                value=float(stats.allocated_bytes))
        yield GaugeMetricFamily("arbi_cuda_allocator_peak_allocated_bytes",
                                "Highest GPU memory held by live tensors since the boot's memory profile",
                                value=float(stats.peak_allocated_bytes))

    def describe(self) -> list[GaugeMetricFamily]:
        return []
