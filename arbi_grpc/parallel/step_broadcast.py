"""The messages rank 0 broadcasts to the worker ranks over the tensor-parallel process group, in the order the
workers act on them: a step (its `StepInputs` as an object, then its input ids as a tensor on the device), a
keepalive while the engine idles (so a worker's wait for the next step stays within the collective timeout), and
the stop. Every rank takes part in every broadcast, so all ranks see the same sequence of steps.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from arbi_grpc.engine.step_inputs import StepInputs

KEEPALIVE = "keepalive"
STOP = "stop"
Message = StepInputs | str  # a step, KEEPALIVE or STOP


def broadcast_message(message: Message, input_ids: Tensor | None = None) -> None:
    """Rank 0: sends `message` to every rank; a step's `input_ids` [T] int64 follow it."""
    if isinstance(message, StepInputs) != (input_ids is not None):
        raise ValueError("a step message goes with its input ids, and only a step message")
    dist.broadcast_object_list([message], src=0)
    if input_ids is not None:
        dist.broadcast(input_ids, src=0)


def receive_message(device: torch.device) -> tuple[Message, Tensor | None]:
    """A worker rank: the next message from rank 0, with a step's input ids on `device`."""
    holder: list[Message | None] = [None]
    dist.broadcast_object_list(holder, src=0)
    message = holder[0]
    if isinstance(message, StepInputs):
        input_ids = torch.empty(message.num_tokens, dtype=torch.int64, device=device)
        dist.broadcast(input_ids, src=0)
        return message, input_ids
    if message not in (KEEPALIVE, STOP):
        raise RuntimeError(f"unexpected tensor-parallel message from rank 0: {message!r}")
    return message, None
