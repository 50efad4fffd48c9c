"""Host-to-device copies that do not make the host wait for the device, so a step can be launched while the
previous one still runs."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def tensor_on_device_no_sync(values: Sequence[int] | Sequence[float], dtype: torch.dtype,
                             device: torch.device) -> Tensor:
    """`values` as a tensor on `device`, without making the host wait for the device.

    A copy from pageable host memory waits for the device's queue to drain; one from pinned memory is queued
    behind the work already launched (the pinned block stays reserved until that copy has run).
    """
    host = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
