"""`StepInputs`: the host-side layout of one eager (not graph-replayed) forward pass, and `forward_logits`, which
runs it. The model runner builds and runs them; under tensor parallelism rank 0 broadcasts them and every
other rank runs the same `forward_logits` on its shard of the model and its KV pool.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from arbi_grpc.attention.kv_storage import KVStorage
from arbi_grpc.attention.metadata import AttentionMetadata, token_positions
from arbi_grpc.engine.host_to_device import tensor_on_device_no_sync


@dataclass(frozen=True)
class StepInputs:
    """What a forward pass needs besides its input ids (a device tensor: some may come from the last step)."""

    query_lens: list[int]  # [B] new tokens per chunk
    seq_lens: list[int]  # [B] context length after the step
    block_tables: list[list[int]]  # [B] block ids
    batch_slots: list[int]  # [B] each sequence's batch slot
    logit_rows: list[int]  # rows of the flat batch whose logits are needed
    reused_blocks: list[tuple[int, list[int], int]]  # (batch slot, block table, blocks from the prefix cache)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)


def seed_reused_blocks(kv_cache: KVStorage, inputs: StepInputs) -> None:
    """Brings the per-slot state of sequences (re)admitted with a prefix hit up to date (`KVStorage`), queued on
    the device before the step's own work."""
    for batch_slot, block_table, num_reused_blocks in inputs.reused_blocks:
        kv_cache.seed_reused_blocks(batch_slot, block_table, num_reused_blocks)


def forward_logits(model: torch.nn.Module, kv_cache: KVStorage, block_size: int, inputs: StepInputs,
                   input_ids: Tensor) -> Tensor:
    """The forward pass of `input_ids` [T] laid out by `inputs` (writing their K/V), then the float32 logits
    [N, V] of `inputs.logit_rows`."""
    device = input_ids.device
    metadata = AttentionMetadata.build(
        query_lens=inputs.query_lens, seq_lens=inputs.seq_lens, block_tables=inputs.block_tables,
        block_size=block_size, device=device, batch_slots=inputs.batch_slots,
    )
    positions = token_positions(inputs.query_lens, inputs.seq_lens, device)
    hidden = model(input_ids, positions, metadata, kv_cache)
    return model.compute_logits(select_rows(hidden, inputs.logit_rows))


def select_rows(tensor: Tensor, rows: list[int]) -> Tensor:
    """`tensor[rows]` without a host wait for the index; `tensor` itself when `rows` are all of its rows."""
    if len(rows) == tensor.shape[0] and rows == list(range(len(rows))):
        return tensor
    return tensor.index_select(0, tensor_on_device_no_sync(rows, torch.int64, tensor.device))
