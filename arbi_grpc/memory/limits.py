"""How much memory a server may use: `memory_limit_mib` when set, else what the device offers at boot: on the
CPU the smaller of MemAvailable and the cgroup's remaining allowance (Linux); on CUDA the device's free memory
plus what this process's caching allocator already reserved (torch.cuda.mem_get_info), or, where torch sees
no GPU (`plan` on another machine, or without torch), NVML's free memory of the first GPU.
"""

from __future__ import annotations

import os
from pathlib import Path

from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.memory.budget import MemoryLimit
from arbi_grpc.observability.nvml import gpu_memory, open_nvml

_MEMINFO = Path("/proc/meminfo")
_CGROUP = Path("/sys/fs/cgroup")


def memory_limit(config: EngineConfig) -> MemoryLimit:
    """The limit a budget for `config` is checked against; read once, before anything is loaded."""
    if config.memory_limit_mib:
        return MemoryLimit(config.memory_limit_mib * MIB, f"memory_limit_mib={config.memory_limit_mib}")
    if config.device == "cuda":
        return available_cuda_memory()
    return available_cpu_memory()


def available_cuda_memory() -> MemoryLimit:
    """Free memory of the current CUDA device plus what this process already reserved on it (torch), else
    NVML's free memory of GPU 0; InvalidArgumentError naming --memory-limit-mib when neither sees a GPU."""
    limit = _torch_cuda_memory()
    if limit is not None:
        return limit
    nvml = open_nvml()
    if nvml is not None:
        gpu = gpu_memory(nvml)[0]
        return MemoryLimit(gpu.free_bytes, f"NVML free memory of GPU {gpu.index} ({gpu.name}) now")
    raise InvalidArgumentError(
        "memory_limit_mib", "device 'cuda': no GPU is visible here to read its free memory from (neither torch nor "
        "NVML sees one); set --memory-limit-mib to the memory the server may use"
    )


def _torch_cuda_memory() -> MemoryLimit | None:
    try:
        import torch
    except ImportError:  # `plan` runs without torch
        return None
    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    free, _ = torch.cuda.mem_get_info(device)
    reserved = torch.cuda.memory_reserved(device)
    return MemoryLimit(free + reserved, f"free + reserved memory of cuda:{device} at boot")


def available_cpu_memory() -> MemoryLimit:
    """Physical memory available to a new allocation now."""
    limits = []
    meminfo = _read_meminfo()
    if "MemAvailable" in meminfo:
        limits.append(MemoryLimit(meminfo["MemAvailable"], "MemAvailable at boot"))
    else:
        limits.append(MemoryLimit(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "physical memory"))
    cgroup_room = _cgroup_room()
    if cgroup_room is not None:
        limits.append(MemoryLimit(cgroup_room, "cgroup memory.max minus memory.current at boot"))
    return min(limits, key=lambda limit: limit.num_bytes)


def _read_meminfo() -> dict[str, int]:
    try:
        lines = _MEMINFO.read_text().splitlines()
    except OSError:
        return {}
    values = {}
    for line in lines:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[name] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return values


def _cgroup_room() -> int | None:
    """Bytes left under a cgroup v2 memory.max, or None without one (or when it is 'max')."""
    try:
        maximum = (_CGROUP / "memory.max").read_text().strip()
        current = (_CGROUP / "memory.current").read_text().strip()
    except OSError:
        return None
    if not (maximum.isdigit() and current.isdigit()):
        return None
    return max(0, int(maximum) - int(current))
