"""What one engine step's flattened varlen batch looks like to attention: where new tokens go in the paged cache
and which cached context each sequence attends over. Shared by every attention backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from arbi_grpc.engine.host_to_device import tensor_on_device_no_sync, to_device_no_sync


@dataclass(frozen=True)
class AttentionMetadata:
    """Batch layout of one step: B sequences whose T new tokens are concatenated, sequence by sequence.

    Sequence b owns flat tokens `query_start_loc[b] : query_start_loc[b + 1]`, at positions
    `seq_lens[b] - query_lens[b] .. seq_lens[b] - 1`; its earlier tokens are already in the cache.
    The `*_host` tuples mirror the device tensors as Python ints so backends can plan without a device sync.
    """

    slot_mapping: Tensor  # [T] int64: flat cache slot (block_id * block_size + offset) of each new token
    query_start_loc: Tensor  # [B + 1] int32: offsets of each sequence's new tokens in the flat batch
    seq_lens: Tensor  # [B] int32: context length of each sequence after this step (cached + new)
    block_tables: Tensor  # [B, max_blocks_per_seq] int32, padded with 0 beyond a sequence's blocks
    # [B] int32: each sequence's batch slot (unique among running sequences, stable while one runs), for storages
    # that keep state per running sequence (`KVStorage.num_batch_slots`); others ignore it
    batch_slots: Tensor
    query_lens_host: tuple[int, ...]  # [B] new tokens of each sequence this step (>= 1)
    seq_lens_host: tuple[int, ...]  # [B] same values as `seq_lens`
    # An upper bound on seq_lens for kernels that size their launch from it; None means max(seq_lens_host).
    # A captured CUDA graph pins it to the longest context served, since its replays see other lengths.
    seq_len_bound: int | None = None
    # Derived. Decode sequences (exactly one new token), by increasing seq_len so that backends can batch
    # neighbours with little padding; prefill sequences (more than one new token) in batch order.
    decode_sequence_indices: Tensor = field(init=False)  # [B_decode] int64, on the metadata's device
    decode_seq_lens_host: tuple[int, ...] = field(init=False)  # [B_decode] their seq_lens, non-decreasing
    prefill_sequence_indices: tuple[int, ...] = field(init=False)  # sequences with more than one new token
    # What a backend derives from this layout alone (the same in every layer), computed at the first layer and
    # kept here for the others, keyed by the backend (`TorchPagedAttention.decode_plan`).
    plans: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        num_seqs = len(self.query_lens_host)
        if len(self.seq_lens_host) != num_seqs:
            raise ValueError(f"{len(self.seq_lens_host)} seq_lens_host for {num_seqs} query_lens_host")
        for query_len, seq_len in zip(self.query_lens_host, self.seq_lens_host):
            if not 1 <= query_len <= seq_len:
                raise ValueError(f"need 1 <= query_len <= seq_len, got query_len={query_len}, seq_len={seq_len}")
        expected_shapes = {
            "slot_mapping": (sum(self.query_lens_host),),
            "query_start_loc": (num_seqs + 1,),
            "seq_lens": (num_seqs,),
            "batch_slots": (num_seqs,),
        }
        for name, shape in expected_shapes.items():
            if tuple(getattr(self, name).shape) != shape:
                raise ValueError(f"{name} has shape {tuple(getattr(self, name).shape)}, expected {shape}")
        if self.block_tables.dim() != 2 or self.block_tables.shape[0] != num_seqs:
            raise ValueError(f"block_tables has shape {tuple(self.block_tables.shape)}, expected [{num_seqs}, N]")
        decode = sorted(
            (index for index, query_len in enumerate(self.query_lens_host) if query_len == 1),
            key=lambda index: self.seq_lens_host[index],
        )
        prefill = tuple(index for index, query_len in enumerate(self.query_lens_host) if query_len > 1)
        device = self.slot_mapping.device
        object.__setattr__(self, "decode_sequence_indices", tensor_on_device_no_sync(decode, torch.int64, device))
        object.__setattr__(self, "decode_seq_lens_host", tuple(self.seq_lens_host[index] for index in decode))
        object.__setattr__(self, "prefill_sequence_indices", prefill)

    @property
    def num_sequences(self) -> int:
        return len(self.query_lens_host)

    @property
    def num_tokens(self) -> int:
        return self.slot_mapping.shape[0]

    @property
    def is_decode_only(self) -> bool:
        """Every sequence brings exactly one new token (a pure decode step)."""
        return len(self.decode_seq_lens_host) == self.num_sequences

    @property
    def max_seq_len(self) -> int:
        return self.seq_len_bound if self.seq_len_bound is not None else max(self.seq_lens_host, default=0)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens_host, default=0)

    @classmethod
    def build(
        cls,
        *,
        query_lens: Sequence[int],
        seq_lens: Sequence[int],
        block_tables: Sequence[Sequence[int]],
        block_size: int,
        device: torch.device | str = "cpu",
        batch_slots: Sequence[int] | None = None,
    ) -> AttentionMetadata:
        """Build the metadata from host lists; each block table must cover its sequence's `seq_len` tokens.

        `batch_slots` None gives each sequence its row index: right for one-step callers whose batch rows are their
        sequences (calibration, profiling, tests), not for an engine whose batches change between steps.
        """
        if len(block_tables) != len(query_lens):
            raise ValueError(f"{len(block_tables)} block tables for {len(query_lens)} sequences")
        batch_slots = range(len(query_lens)) if batch_slots is None else batch_slots
        if len(batch_slots) != len(query_lens):
            raise ValueError(f"{len(batch_slots)} batch slots for {len(query_lens)} sequences")
        for index, (table, seq_len) in enumerate(zip(block_tables, seq_lens)):
            if len(table) * block_size < seq_len:
                raise ValueError(f"sequence {index}: {len(table)} blocks of {block_size} cannot hold {seq_len} tokens")
        max_blocks = max((len(table) for table in block_tables), default=0)
        padded_tables = torch.tensor(
            [list(table) + [0] * (max_blocks - len(table)) for table in block_tables], dtype=torch.int64
        ).reshape(len(block_tables), max_blocks)
        positions = token_positions(query_lens, seq_lens)  # [T]
        sequence_of_token = torch.repeat_interleave(
            torch.arange(len(query_lens)), torch.tensor(query_lens, dtype=torch.int64)
        )  # [T]
        block_ids = padded_tables[sequence_of_token, positions // block_size]  # [T]
        slot_mapping = block_ids * block_size + positions % block_size
        query_start_loc = torch.zeros(len(query_lens) + 1, dtype=torch.int32)
        query_start_loc[1:] = torch.cumsum(torch.tensor(query_lens, dtype=torch.int32), dim=0)
        return cls(
            slot_mapping=to_device_no_sync(slot_mapping, device),
            query_start_loc=to_device_no_sync(query_start_loc, device),
            seq_lens=to_device_no_sync(torch.tensor(seq_lens, dtype=torch.int32), device),
            block_tables=to_device_no_sync(padded_tables.to(torch.int32), device),
            batch_slots=to_device_no_sync(torch.tensor(list(batch_slots), dtype=torch.int32), device),
            query_lens_host=tuple(int(n) for n in query_lens),
            seq_lens_host=tuple(int(n) for n in seq_lens),
        )


def token_positions(
    query_lens: Sequence[int], seq_lens: Sequence[int], device: torch.device | str = "cpu"
) -> Tensor:
    """Positions of the new tokens of a flattened batch: `seq_len - query_len .. seq_len - 1` per sequence."""
    query_lens_tensor = torch.tensor(query_lens, dtype=torch.int64)
    first_positions = torch.tensor(seq_lens, dtype=torch.int64) - query_lens_tensor  # [B]
    starts = torch.cumsum(query_lens_tensor, dim=0) - query_lens_tensor  # [B] flat offset of each sequence
    total = int(query_lens_tensor.sum())
    offsets_in_sequence = torch.arange(total) - torch.repeat_interleave(starts, query_lens_tensor)  # [T]
    positions = torch.repeat_interleave(first_positions, query_lens_tensor) + offsets_in_sequence  # [T]
    return to_device_no_sync(positions, device)
