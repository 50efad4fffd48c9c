"""Host-to-device copies that do not make the host wait for the device, so a step can be launched while the
previous one still runs: the step's inputs, attention metadata and sampling parameters all go through here."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def to_device_no_sync(host: Tensor, device: torch.device | str) -> Tensor:
    """`host` (a CPU tensor) on `device`, without making the host wait for the device.

    A copy from pageable host memory waits for the device's queue to drain; one from pinned memory is queued
    behind the work already launched (the pinned block stays reserved until that copy has run).
    """
    device = torch.device(device)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def tensor_on_device_no_sync(values: Sequence[int] | Sequence[float], dtype: torch.dtype,
                             device: torch.device | str) -> Tensor:
    """`values` as a tensor on `device`, copied as `to_device_no_sync` does."""
    return to_device_no_sync(torch.tensor(values, dtype=dtype), device)
