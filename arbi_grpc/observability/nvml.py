"""Read-only NVML access (the NVIDIA driver's management library, through the optional `nvidia-ml-py`
package, `import pynvml`): the GPUs the driver sees, their memory and the driver version.

Imports neither torch nor prometheus_client, so `doctor` and `plan` can use it on any install.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GpuMemory:
    """One GPU as NVML reports it (memory of all processes, in bytes)."""

    index: int
    name: str
    used_bytes: int
    free_bytes: int
    total_bytes: int


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


def gpu_memory(nvml: Any) -> list[GpuMemory]:
    """Every GPU NVML sees, by NVML index (which ignores CUDA_VISIBLE_DEVICES)."""
    gpus = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        gpus.append(GpuMemory(index, _text(nvml.nvmlDeviceGetName(handle)), int(info.used), int(info.free),
                              int(info.total)))
    return gpus


def driver_version(nvml: Any) -> str:
    return _text(nvml.nvmlSystemGetDriverVersion())


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
