"""CUDA graphs of the decode step: the model's forward pass and logits for a batch of one-token sequences,
captured once at boot for bucketed batch sizes and replayed every decode step.

A replay costs one graph launch instead of hundreds of kernel launches from Python. Inputs live in static
device buffers that each step overwrites; a batch is padded up to the next captured size with rows that
write nowhere (slot -1) and attend to nothing (context length 0, batch slot 0). Input ids sampled by the
previous step are copied on the device (`CarriedTokens`), so a replay can be queued before the host has read
them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from arbi_grpc.attention.kv_storage import KVStorage
from arbi_grpc.attention.metadata import AttentionMetadata
from arbi_grpc.engine.carried_tokens import CarriedTokens
from arbi_grpc.engine.graph_batches import graph_batch_sizes
from arbi_grpc.models.decoder import CausalLM


_PADDING = np.array([0, 0, -1], dtype=np.int64)  # input id, position, slot (-1: write nowhere)


@dataclass(frozen=True)
class DecodeBatch:
    """Host-side inputs of one decode step: one new token per sequence."""

    input_ids: list[int]
    positions: list[int]
    slots: list[int]
    seq_lens: list[int]
    block_tables: list[list[int]]
    batch_slots: list[int]
    carried: CarriedTokens | None = None  # input ids still on the device (their `input_ids` are placeholders)


class _Staging:
    """Pinned host buffers of one step's inputs, and an event recorded once their copies to the device ran."""

    def __init__(self, max_batch: int, max_blocks: int) -> None:
        self.vectors_tensor = torch.zeros(3, max_batch, dtype=torch.int64).pin_memory()
        self.vectors = self.vectors_tensor.numpy()  # input ids, positions, slots
        self.seq_lens_tensor = torch.zeros(max_batch, dtype=torch.int32).pin_memory()
        self.seq_lens = self.seq_lens_tensor.numpy()
        self.batch_slots_tensor = torch.zeros(max_batch, dtype=torch.int32).pin_memory()
        self.batch_slots = self.batch_slots_tensor.numpy()
        self.tables_tensor = torch.zeros(max_batch * max_blocks, dtype=torch.int32).pin_memory()
        self.tables = self.tables_tensor.numpy()
        self.copied = torch.cuda.Event()
        self.copied.record()


class DecodeGraphs:
    """Captured decode steps of `model` over `kv_cache` for every size of `graph_batch_sizes(max_batch)`."""

    def __init__(self, model: CausalLM, kv_cache: KVStorage, *, max_batch: int, max_model_len: int) -> None:
        if max_batch <= 0:
            raise ValueError(f"max_batch must be > 0, got {max_batch}")
        self.model = model
        self.kv_cache = kv_cache
        self.max_model_len = max_model_len
        self.batch_sizes = graph_batch_sizes(max_batch)
        device = kv_cache.device
        max_blocks = -(-max_model_len // kv_cache.block_size)
        self._input_ids = torch.zeros(max_batch, dtype=torch.int64, device=device)
        self._positions = torch.zeros(max_batch, dtype=torch.int64, device=device)
        self._slots = torch.full((max_batch,), -1, dtype=torch.int64, device=device)
        self._seq_lens = torch.zeros(max_batch, dtype=torch.int32, device=device)
        self._batch_slots = torch.zeros(max_batch, dtype=torch.int32, device=device)
        self._block_tables = torch.zeros(max_batch, max_blocks, dtype=torch.int32, device=device)
        self._query_start_loc = torch.arange(max_batch + 1, dtype=torch.int32, device=device)
        # Two sets, used in turn: a step stages its inputs while the previous step's copies may still be queued.
        self._stagings = (_Staging(max_batch, max_blocks), _Staging(max_batch, max_blocks))
        self._num_runs = 0
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._logits: dict[int, Tensor] = {}

    @property
    def max_batch(self) -> int:
        return self.batch_sizes[-1]

    def capture(self) -> None:
        """Capture every batch size, largest first so that the smaller graphs reuse its memory pool.

        Each size first runs once on one side stream (Triton compiles there, outside any capture); one stream
        for all sizes keeps one cuBLAS workspace.
        """
        pool = None
        warm_up_stream = torch.cuda.Stream()
        with torch.inference_mode():
            for batch_size in reversed(self.batch_sizes):
                metadata = self._metadata(batch_size)
                warm_up_stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(warm_up_stream):
                    self._forward(batch_size, metadata)
                torch.cuda.current_stream().wait_stream(warm_up_stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    self._logits[batch_size] = self._forward(batch_size, metadata)
                pool = graph.pool()
                self._graphs[batch_size] = graph
        torch.cuda.synchronize()

    def run(self, batch: DecodeBatch) -> Tensor:
        """Logits [len(batch), V] (float32) of one decode step, from the smallest captured graph that fits."""
        num_seqs = len(batch.input_ids)
        batch_size = next((size for size in self.batch_sizes if size >= num_seqs), None)
        if batch_size is None or batch_size not in self._graphs:
            raise ValueError(f"no captured decode graph holds {num_seqs} sequences (largest {self.max_batch})")
        # One host-to-device copy per buffer from pinned staging memory. A staging set is rewritten only once
        # its previous copies ran (two sets: with overlapped steps the last step's copies may still be queued).
        # Padding rows write to slot -1 and attend to nothing; only the block-table columns in use are
        # refreshed (kernels read a row's blocks below its context length only).
        staging = self._stagings[self._num_runs % 2]
        self._num_runs += 1
        staging.copied.synchronize()
        vectors, seq_lens, batch_slots = staging.vectors, staging.seq_lens, staging.batch_slots
        vectors[:, :batch_size] = _PADDING[:, None]
        vectors[0, :num_seqs] = batch.input_ids
        vectors[1, :num_seqs] = batch.positions
        vectors[2, :num_seqs] = batch.slots
        seq_lens[:batch_size] = 0
        seq_lens[:num_seqs] = batch.seq_lens
        batch_slots[:batch_size] = 0
        batch_slots[:num_seqs] = batch.batch_slots
        width = max(len(table) for table in batch.block_tables)
        tables = staging.tables[: num_seqs * width].reshape(num_seqs, width)
        for row, table in enumerate(batch.block_tables):
            tables[row, : len(table)] = table
        staged = staging.vectors_tensor[:, :batch_size]
        self._input_ids[:batch_size].copy_(staged[0], non_blocking=True)
        self._positions[:batch_size].copy_(staged[1], non_blocking=True)
        self._slots[:batch_size].copy_(staged[2], non_blocking=True)
        self._seq_lens[:batch_size].copy_(staging.seq_lens_tensor[:batch_size], non_blocking=True)
        self._batch_slots[:batch_size].copy_(staging.batch_slots_tensor[:batch_size], non_blocking=True)
        self._block_tables[:num_seqs, :width].copy_(
            staging.tables_tensor[: num_seqs * width].view(num_seqs, width), non_blocking=True
        )
        staging.copied.record()
        if batch.carried is not None:
            batch.carried.write_into(self._input_ids)
        self._graphs[batch_size].replay()
        return self._logits[batch_size][:num_seqs]

    def _metadata(self, batch_size: int) -> AttentionMetadata:
        return AttentionMetadata(
            slot_mapping=self._slots[:batch_size],
            query_start_loc=self._query_start_loc[: batch_size + 1],
            seq_lens=self._seq_lens[:batch_size],
            block_tables=self._block_tables[:batch_size],
            batch_slots=self._batch_slots[:batch_size],
            query_lens_host=(1,) * batch_size,
            seq_lens_host=(1,) * batch_size,  # placeholders: a graph's kernels read only the device tensors
            seq_len_bound=self.max_model_len,
        )

    def _forward(self, batch_size: int, metadata: AttentionMetadata) -> Tensor:
        hidden = self.model(self._input_ids[:batch_size], self._positions[:batch_size], metadata, self.kv_cache)
        return self.model.compute_logits(hidden)
