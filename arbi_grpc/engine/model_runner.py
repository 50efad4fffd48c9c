"""Turns a scheduled step into one forward pass over a flattened varlen batch, then samples.

Owns the model, its paged KV cache, the sampler and, on CUDA, the captured decode graphs. For every chunk it
lays out input ids, positions and KV slots; for chunks that reach the end of their sequence it samples the
next token, and for prompt positions of requests that asked for them it computes prompt log-probabilities.
A step where every sequence brings one token replays a CUDA graph when one was captured for its size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arbi_grpc.engine.cuda_graphs import DecodeBatch, DecodeGraphs
from arbi_grpc.engine.sampler import Sampler, prompt_logprobs as score_prompt
from arbi_grpc.engine.scheduler import ScheduledChunk, ScheduledStep
from arbi_grpc.engine.request import TokenOutput
from arbi_grpc.engine.sequence import Sequence
from arbi_grpc.models.attention_metadata import AttentionMetadata, token_positions
from arbi_grpc.models.kv_cache import PagedKVCache


@dataclass(frozen=True)
class StepResult:
    """Per sequence: the sampled token (if the chunk completed it) and new prompt log-probabilities."""

    sampled: dict[Sequence, TokenOutput]
    prompt_logprobs: dict[Sequence, list[float]]


@dataclass(frozen=True)
class _BatchLayout:
    input_ids: list[int]  # [T]
    query_lens: list[int]  # [B] new tokens per chunk
    seq_lens: list[int]  # [B] context length after the step
    block_tables: list[list[int]]  # [B] block ids
    logit_rows: list[int]  # rows of the flat batch whose logits are needed
    sample_rows: list[tuple[ScheduledChunk, int]]  # (chunk, index into logit_rows)
    prompt_rows: list[tuple[ScheduledChunk, int, int]]  # (chunk, first index into logit_rows, count)


class ModelRunner:
    def __init__(self, model: torch.nn.Module, kv_cache: PagedKVCache, block_size: int,
                 device: torch.device) -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.device = device
        self.sampler = Sampler()
        self.decode_graphs: DecodeGraphs | None = None

    def capture_decode_graphs(self, max_batch: int, max_model_len: int) -> None:
        """Capture CUDA graphs of decode steps of up to `max_batch` sequences (replacing earlier ones)."""
        if self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, the runner is on {self.device}")
        self.decode_graphs = None  # the old graphs' pool goes before the new capture
        graphs = DecodeGraphs(self.model, self.kv_cache, max_batch=max_batch, max_model_len=max_model_len)
        graphs.capture()
        self.decode_graphs = graphs

    @torch.inference_mode()
    def execute(self, step: ScheduledStep) -> StepResult:
        layout = self._lay_out(step.chunks)
        if self._replays_graph(step.chunks):
            logits = self.decode_graphs.run(self._decode_batch(layout))  # [B, V] float32, one row per sequence
            if layout.logit_rows != list(range(logits.shape[0])):  # a chunk that samples nothing (mid-prompt)
                logits = logits[layout.logit_rows]
        else:
            metadata = AttentionMetadata.build(
                query_lens=layout.query_lens, seq_lens=layout.seq_lens, block_tables=layout.block_tables,
                block_size=self.block_size, device=self.device,
            )
            input_ids = torch.tensor(layout.input_ids, dtype=torch.int64, device=self.device)
            positions = token_positions(layout.query_lens, layout.seq_lens, self.device)
            hidden = self.model(input_ids, positions, metadata, self.kv_cache)
            logits = self.model.compute_logits(hidden[layout.logit_rows])  # [N, V] float32
        sampled: dict[Sequence, TokenOutput] = {}
        if layout.sample_rows:
            rows = [index for _, index in layout.sample_rows]
            sequences = [chunk.sequence for chunk, _ in layout.sample_rows]
            result = self.sampler.sample(logits[rows], [s.sampling_state for s in sequences])
            for i, sequence in enumerate(sequences):
                sampled[sequence] = TokenOutput(
                    token_id=result.token_ids[i],
                    logprob=result.logprobs[i],
                    top_logprobs=tuple(result.top_logprobs[i]),
                )
        prompt_logprobs: dict[Sequence, list[float]] = {}
        for chunk, first, count in layout.prompt_rows:
            tokens = chunk.sequence.token_ids[chunk.start: chunk.start + count + 1]
            prompt_logprobs[chunk.sequence] = score_prompt(logits[first: first + count], tokens)
        return StepResult(sampled, prompt_logprobs)

    def _lay_out(self, chunks: list[ScheduledChunk]) -> _BatchLayout:
        input_ids: list[int] = []
        logit_rows: list[int] = []
        sample_rows: list[tuple[ScheduledChunk, int]] = []
        prompt_rows: list[tuple[ScheduledChunk, int, int]] = []
        for chunk in chunks:
            sequence = chunk.sequence
            start, end = chunk.start, chunk.start + chunk.num_tokens
            first_row = len(input_ids)
            input_ids.extend(sequence.token_ids[start:end])
            if sequence.wants_prompt_logprobs:
                # Logits at position p score prompt token p + 1.
                count = min(end, sequence.num_prompt_tokens - 1) - start
                if count > 0:
                    prompt_rows.append((chunk, len(logit_rows), count))
                    logit_rows.extend(range(first_row, first_row + count))
            if chunk.completes_sequence:
                sample_rows.append((chunk, len(logit_rows)))
                logit_rows.append(len(input_ids) - 1)
        return _BatchLayout(
            input_ids=input_ids,
            query_lens=[chunk.num_tokens for chunk in chunks],
            seq_lens=[chunk.start + chunk.num_tokens for chunk in chunks],
            block_tables=[chunk.sequence.block_table for chunk in chunks],
            logit_rows=logit_rows,
            sample_rows=sample_rows,
            prompt_rows=prompt_rows,
        )

    def _decode_batch(self, layout: _BatchLayout) -> DecodeBatch:
        """The one-token-per-sequence layout as a graph replay's inputs: the token sits at seq_len - 1."""
        positions = [seq_len - 1 for seq_len in layout.seq_lens]
        slots = [
            table[position // self.block_size] * self.block_size + position % self.block_size
            for table, position in zip(layout.block_tables, positions)
        ]
        return DecodeBatch(layout.input_ids, positions, slots, layout.seq_lens, layout.block_tables)

    def _replays_graph(self, chunks: list[ScheduledChunk]) -> bool:
        return (
            self.decode_graphs is not None
            and len(chunks) <= self.decode_graphs.max_batch
            and all(chunk.num_tokens == 1 for chunk in chunks)
        )
