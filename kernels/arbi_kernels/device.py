"""What the kernels ask of the device they launch on."""

from __future__ import annotations

import functools

import torch


@functools.cache
def multiprocessor_count(device: torch.device) -> int:
    """The device's streaming multiprocessors; 1 off CUDA (Triton's interpreter runs one program at a time)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1
