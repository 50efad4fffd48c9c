"""The KV storage protocol: what the engine (block manager, model runner, memory accounting, admin API) knows of
any KV cache kind. The bf16/fp32 `PagedKVCache` and the TKV `TkvPagedKVCache` implement it; an attention backend
is typed over the one kind it reads (`AttentionBackend[S]`) and is the only code that sees a kind's layout.

Every kind stores tokens in `num_blocks` fixed-size blocks addressed by the engine's block tables and slots
(block_id * block_size + offset). A kind may also keep state per sequence's first block (only the first
`num_first_blocks` ids may start a sequence) and per running sequence (one entry per batch slot, the scheduler's
`Sequence.batch_slot`); a kind that keeps none says so with `num_first_blocks == num_blocks` and
`num_batch_slots is None`.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from arbi_grpc.errors import InvalidArgumentError


class KVStorage(Protocol):
    """The device memory of a paged KV cache, zeroed at creation."""

    num_layers: int
    num_blocks: int
    block_size: int  # tokens per block
    num_kv_heads: int
    head_dim: int

    @property
    def device(self) -> torch.device: ...

    @property
    def bytes_per_block(self) -> int:
        """Bytes one block costs over all layers, keys and values (state per first block or slot is apart)."""
        ...

    @property
    def num_first_blocks(self) -> int:
        """How many block ids (the lowest ones) may be a sequence's first block: `num_blocks` unless the storage keeps
        state per first block."""
        ...

    @property
    def num_batch_slots(self) -> int | None:
        """How many running sequences the storage keeps state for (batch slots 0..n-1); None when it keeps none and
        any slot id is fine."""
        ...

    @property
    def key_caches(self) -> list[Tensor]:
        """Every device tensor holding keys (blocks and any per-sequence state), for memory accounting and zeroing."""
        ...

    @property
    def value_caches(self) -> list[Tensor]:
        """Every device tensor holding values, as `key_caches`."""
        ...

    @property
    def codec_tensors(self) -> list[Tensor]:
        """Device tensors a codec keeps beside the stored tokens (e.g. per-layer transforms); empty for plain tensors."""
        ...

    @property
    def codec_name(self) -> str:
        """What is stored, for people and GetServerInfo: "none" for plain tensors, else the codec's setting."""
        ...

    def seed_reused_blocks(self, batch_slot: int, block_table: list[int], num_reused_blocks: int) -> None:
        """Before the first step of a sequence (re)admitted on `batch_slot` whose first `num_reused_blocks` blocks of
        `block_table` came from the prefix cache: bring the slot's state up to date with them (queued on the device
        before the step). A storage without per-slot state does nothing."""
        ...


def check_same_shape(current: KVStorage, replacement: KVStorage) -> None:
    """Refuses a replacement storage that the block manager and batch slots, sized from `current`, cannot address."""
    shape = ("num_layers", "num_blocks", "block_size", "num_first_blocks", "num_batch_slots")
    differing = [f"{name} {getattr(replacement, name)} (now {getattr(current, name)})" for name in shape
                 if getattr(replacement, name) != getattr(current, name)]
    if differing:
        raise InvalidArgumentError("kv_storage", f"a replacement must keep the storage's shape: {', '.join(differing)}")
