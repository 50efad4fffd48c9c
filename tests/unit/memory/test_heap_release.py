"""release_free_heap gives freed heap pages back to the system, which free() alone keeps while a live block sits
above them (glibc)."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import torch

from arbi_grpc.memory.heap_release import release_free_heap

MIB = 2**20


def _resident_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _free_then_release() -> tuple[int, int, int, bool, float]:
    """(resident before the free, after it, after the release, whether glibc released, a live block's sum)."""
    blocks = [torch.ones(16_384) for _ in range(2_048)]  # 64 KiB each, under malloc's mmap threshold: 128 MiB of heap
    pin = torch.ones(16)  # a live block above them: free() cannot shrink the heap's top
    before = _resident_bytes()
    del blocks
    kept = _resident_bytes()
    released = release_free_heap()
    return before, kept, _resident_bytes(), released, pin.sum().item()


def test_freed_heap_pages_go_back_to_the_system() -> None:
    # In a fresh process: in this one, earlier tests leave free chunks where `pin` may land, below the blocks,
    # and free() then trims the heap's top by itself.
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        before, kept, after, released, pin_sum = pool.submit(_free_then_release).result(timeout=120)
    assert released
    assert before - kept < 32 * MIB  # free() alone kept most of them
    assert kept - after > 96 * MIB
    assert pin_sum == 16
