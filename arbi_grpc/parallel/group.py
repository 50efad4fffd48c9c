"""`TensorParallelGroup`: what the decoder asks of tensor parallelism (its share of a split dimension, the
all-reduce after a row-parallel projection, the vocabulary-parallel embedding and the logits gather to rank 0),
and `init_tensor_parallel_group`, which joins this process to the ranks' `torch.distributed` process group.

`SINGLE_RANK` is the group of one process: every collective is the identity, so the decoder runs unchanged.
The backend follows the device: NCCL for CUDA, gloo for the CPU; every collective is bounded by the process
group's timeout, so a lost peer raises instead of hanging.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

COLLECTIVE_TIMEOUT_S = 120.0  # any collective (and the rendezvous) waiting longer for a peer raises


class TensorParallelGroup:
    """Rank `rank` of `world_size` ranks splitting one model; `world_size` 1 runs no collective."""

    def __init__(self, rank: int = 0, world_size: int = 1) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside [0, {world_size})")
        self.rank = rank
        self.world_size = world_size

    def split(self, size: int) -> int:
        """This rank's share of a dimension split evenly (heads, KV heads, intermediate size, vocabulary)."""
        if size % self.world_size:
            raise ValueError(f"{size} does not split over {self.world_size} ranks")
        return size // self.world_size

    def all_reduce(self, states: Tensor) -> Tensor:
        """The sum over ranks of each rank's partial `states` (in place), after a row-parallel projection."""
        if self.world_size > 1:
            dist.all_reduce(states)
        return states

    def embed(self, embedding: nn.Embedding, input_ids: Tensor) -> Tensor:
        """input_ids [T] -> [T, hidden]: each rank looks up the ids of its vocabulary slice (zeros for the
        others), and the all-reduce assembles the rows."""
        if self.world_size == 1:
            return embedding(input_ids)
        rows = embedding.weight.shape[0]
        local_ids = input_ids - self.rank * rows
        outside = (local_ids < 0) | (local_ids >= rows)
        states = F.embedding(local_ids.masked_fill(outside, 0), embedding.weight)
        return self.all_reduce(states.masked_fill_(outside[:, None], 0))

    def gather_vocab(self, logits: Tensor) -> Tensor:
        """logits [N, V / world_size] of this rank's vocabulary slice -> [N, V] on rank 0 (ranks in vocabulary
        order); other ranks get their own slice back."""
        if self.world_size == 1:
            return logits
        logits = logits.contiguous()
        slices = [torch.empty_like(logits) for _ in range(self.world_size)] if self.rank == 0 else None
        dist.gather(logits, slices, dst=0)
        return torch.cat(slices, dim=-1) if slices is not None else logits


SINGLE_RANK = TensorParallelGroup()


def backend_for(device: torch.device) -> str:
    """The collective backend of `device`: NCCL on CUDA, gloo on the CPU."""
    return "nccl" if device.type == "cuda" else "gloo"


def rank_device(device: torch.device, rank: int) -> torch.device:
    """The device of `rank`: GPU `rank` of the host on CUDA (made the current one), the CPU otherwise."""
    if device.type != "cuda":
        return device
    torch.cuda.set_device(rank)
    return torch.device("cuda", rank)


def init_tensor_parallel_group(rank: int, world_size: int, init_address: str,
                               device: torch.device) -> TensorParallelGroup:
    """Joins the process group of `world_size` ranks meeting at `init_address` (host:port of rank 0's TCP store)
    on `device`'s backend; the rendezvous and every later collective time out after COLLECTIVE_TIMEOUT_S."""
    check_no_tensor_parallel_group()
    options = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend_for(device), init_method=f"tcp://{init_address}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S), **options)
    return TensorParallelGroup(rank, world_size)


def check_no_tensor_parallel_group() -> None:
    """Raises NotImplementedError when this process is in a process group already: one tensor-parallel model
    per server process."""
    if dist.is_initialized():
        raise NotImplementedError(
            "one tensor-parallel model per server process: its ranks are up already (a SwitchModel to another "
            "tensor-parallel model is not supported; unload the resident model, then LoadModel)"
        )


def close_tensor_parallel_group() -> None:
    """Leaves the process group (if joined), so another tensor-parallel model may start in this process."""
    if dist.is_initialized():
        dist.destroy_process_group()
