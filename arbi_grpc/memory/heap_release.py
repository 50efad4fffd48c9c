"""Hands the C heap's free pages back to the system (glibc's `malloc_trim`).

torch's CPU tensors come from malloc. After a large step frees its activations, glibc keeps most of those pages in
its arenas (its mmap threshold rises to the largest block freed, so later large blocks come from the arenas too),
and the process stays as large as its largest step: on SmolLM2 the boot's activation profile alone left ~130 MiB
resident. `release_free_heap` returns them; the next large step takes fresh pages. Elsewhere than glibc it
does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():  # -> the C function, or None without glibc
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return None


def release_free_heap() -> bool:
    """Returns the heap's free pages to the system; True when glibc released some."""
    trim = _malloc_trim()
    return bool(trim is not None and trim(0))
