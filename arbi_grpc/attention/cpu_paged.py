"""The CPU attention backend: `TorchPagedAttention` with its decode queries over a float32 cache attended in one
C++ call per layer (`csrc/paged_decode.cpp`, built on first use by `cpu_extensions`), reading each context in
place through its block table instead of gathering padded copies, and the new keys and values stored by one call.
Prefill chunks and other cache dtypes go through the torch reference.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from arbi_grpc.attention.metadata import AttentionMetadata
from arbi_grpc.attention.torch_paged import TorchPagedAttention
from arbi_grpc.cpu_extensions import load_cpu_extension

log = logging.getLogger(__name__)
KERNEL_SOURCE = Path(__file__).with_name("csrc") / "paged_decode.cpp"


def cpu_paged_attention() -> TorchPagedAttention:
    """`CpuPagedAttention`, or the torch reference (with a warning that says why) where the kernel cannot be
    built."""
    try:
        kernels = load_cpu_extension(KERNEL_SOURCE)
    except RuntimeError as error:
        log.warning("CPU attention kernel unavailable, using torch's (slower decode steps): %s", error)
        return TorchPagedAttention.for_device("cpu")
    return CpuPagedAttention(kernels=kernels)


@dataclass(frozen=True)
class CpuPagedAttention(TorchPagedAttention):
    """Cache writes and decode queries over a float32 cache through the C++ kernels; everything else as
    `TorchPagedAttention`."""

    kernels: Any = field(default=None, compare=False)

    def write_cache(self, key: Tensor, value: Tensor, slot_mapping: Tensor, key_cache: Tensor,
                    value_cache: Tensor) -> None:
        if key_cache.dtype != torch.float32:
            super().write_cache(key, value, slot_mapping, key_cache, value_cache)
            return
        self.kernels.write_slots_(key_cache, value_cache, key, value, slot_mapping)

    def attend_decodes(self, query: Tensor, key_cache: Tensor, value_cache: Tensor, metadata: AttentionMetadata,
                       block_size: int) -> Tensor:
        if query.dtype != torch.float32 or key_cache.dtype != torch.float32:
            return super().attend_decodes(query, key_cache, value_cache, metadata, block_size)
        sequences = metadata.decode_sequence_indices
        token_rows = _decode_rows(metadata)
        attended = self.kernels.paged_decode(query, key_cache, value_cache, metadata.block_tables,
                                             metadata.seq_lens, sequences, token_rows,
                                             1.0 / math.sqrt(query.shape[-1]))
        if len(metadata.decode_seq_lens_host) == metadata.num_tokens and _in_order(metadata):
            return attended
        output = torch.empty_like(query)
        output.index_copy_(0, token_rows, attended)
        return output


def _decode_rows(metadata: AttentionMetadata) -> Tensor:
    """[N] int64 flat row of each decode sequence's query, planned once per step."""
    rows = metadata.plans.get("cpu decode rows")
    if rows is None:
        rows = metadata.plans["cpu decode rows"] = metadata.query_start_loc.index_select(
            0, metadata.decode_sequence_indices).long()
    return rows


def _in_order(metadata: AttentionMetadata) -> bool:
    """Whether the decode sequences, sorted by context length, are the batch's own order."""
    return metadata.decode_seq_lens_host == metadata.seq_lens_host
