"""release_free_heap gives freed heap pages back to the system, which free() alone keeps while a live block sits
above them (glibc)."""

from __future__ import annotations

from pathlib import Path

import torch

from arbi_grpc.memory.heap_release import release_free_heap

MIB = 2**20


def _resident_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_freed_heap_pages_go_back_to_the_system() -> None:
    blocks = [torch.ones(16_384) for _ in range(2_048)]  # 64 KiB each, under malloc's mmap threshold: 128 MiB of heap
    pin = torch.ones(16)  # a live block above them: free() cannot shrink the heap's top
    before = _resident_bytes()
    del blocks
    kept = _resident_bytes()
    assert release_free_heap()
    after = _resident_bytes()
    assert before - kept < 32 * MIB  # free() alone kept most of them
    assert kept - after > 96 * MIB
    assert pin.sum().item() == 16
