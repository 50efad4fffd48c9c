"""Input ids that never visit the host: tokens sampled by the previous step, copied on the device into the
next step's input ids."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from arbi_grpc.engine.host_to_device import tensor_on_device_no_sync


@dataclass(frozen=True)
class CarriedTokens:
    """Row `rows[i]` of a step's input ids is `source[source_rows[i]]`: a token the previous step sampled."""

    source: Tensor  # [S] int64 on the device, the previous step's sampled token ids
    rows: list[int]
    source_rows: list[int]

    def write_into(self, input_ids: Tensor) -> None:
        """Overwrites the carried rows of `input_ids` ([T] int64, same device) in the device's queue."""
        count = len(self.rows)
        if self.rows == self.source_rows == list(range(count)):
            input_ids[:count].copy_(self.source[:count])  # steady decode: same sequences, same order
            return
        device = input_ids.device
        rows = tensor_on_device_no_sync(self.rows, torch.int64, device)
        source_rows = tensor_on_device_no_sync(self.source_rows, torch.int64, device)
        input_ids.index_copy_(0, rows, self.source.index_select(0, source_rows))
