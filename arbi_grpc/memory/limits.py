"""How much memory a server may use: `memory_limit_mib` when set, else what the machine offers at boot
(the smaller of MemAvailable and the cgroup's remaining allowance on Linux).
"""

from __future__ import annotations

import os
from pathlib import Path

from arbi_grpc.config import MIB, EngineConfig
from arbi_grpc.memory.budget import MemoryLimit

_MEMINFO = Path("/proc/meminfo")
_CGROUP = Path("/sys/fs/cgroup")


def memory_limit(config: EngineConfig) -> MemoryLimit:
    """The limit a budget for `config` is checked against; read once, before anything is loaded."""
    if config.memory_limit_mib:
        return MemoryLimit(config.memory_limit_mib * MIB, f"memory_limit_mib={config.memory_limit_mib}")
    if config.device != "cpu":
        raise NotImplementedError(
            f"reading the free memory of device {config.device!r}: only the CPU's is read; set --memory-limit-mib"
        )
    return available_cpu_memory()


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
