"""How many CPU threads torch uses in each rank of a tensor-parallel model."""

from __future__ import annotations

import os

import torch

from arbi_grpc.config import EngineConfig


def set_rank_threads(config: EngineConfig, world_size: int) -> None:
    """--torch-threads in every rank when set; else, on the CPU, the cores shared evenly among the ranks (each
    rank's own default would take every core, and the ranks would contend for them at every all-reduce)."""
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    elif config.device == "cpu" and world_size > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
