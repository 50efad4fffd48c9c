"""Programmatic dependent launch (PDL) for the kernels of a decode step, on Hopper and newer GPUs.

A decode step at small batch is a chain of short kernels, and each boundary costs the next kernel's launch
and scheduling latency while the GPU's memory system idles. A kernel launched with PDL may be scheduled while
its predecessor in the stream still runs; it then waits (`gdc_wait`) for that predecessor to finish and its
writes to be visible before touching memory. Every kernel here waits as its first instruction, so only launch
latency overlaps, never memory traffic, and the order of the stream is kept transitively (each kernel finishes
after the one before it). It then lets its own successor be scheduled (`gdc_launch_dependents`).
Inside a CUDA graph the captured launches keep the attribute. Off under the Triton interpreter, on GPUs before
sm_90, on a Triton without the launch option, and when ARBI_PDL=0.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import triton
import triton.language as tl


@functools.cache
def pdl_supported(device_index: int) -> bool:
    """Whether kernels on CUDA device `device_index` launch with PDL (see the module docstring)."""
    if os.environ.get("TRITON_INTERPRET") == "1" or os.environ.get("ARBI_PDL", "1") == "0":
        return False
    if torch.cuda.get_device_capability(device_index)[0] < 9:
        return False
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: F401
    except ImportError:
        return False
    return "launch_pdl" in CUDAOptions.__dataclass_fields__


def pdl_launch_options(device: torch.device) -> dict[str, Any]:
    """Keyword arguments for a launch of a kernel that calls `wait_for_previous_kernel(USE_PDL)` first."""
    if device.type == "cuda" and pdl_supported(device.index if device.index is not None else torch.cuda.current_device()):
        return {"USE_PDL": True, "launch_pdl": True}
    return {"USE_PDL": False}


@triton.jit
def wait_for_previous_kernel(USE_PDL: tl.constexpr):
    """A kernel's first call: with PDL, wait until the previous kernel in the stream has finished, then let the
    next one be scheduled; without, nothing."""
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
