"""Turns a scheduled step into one forward pass over a flattened varlen batch, then samples.

Owns the model, its paged KV cache and the sampler. For every chunk it lays out input ids, positions and
KV slots; for chunks that reach the end of their sequence it samples the next token, and for prompt
positions of requests that asked for them it computes prompt log-probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

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
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    metadata: AttentionMetadata
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

    @torch.inference_mode()
    def execute(self, step: ScheduledStep) -> StepResult:
        layout = self._lay_out(step.chunks)
        hidden = self.model(layout.input_ids, layout.positions, layout.metadata, self.kv_cache)
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
        metadata = AttentionMetadata.build(
            query_lens=[chunk.num_tokens for chunk in chunks],
            seq_lens=[chunk.start + chunk.num_tokens for chunk in chunks],
            block_tables=[chunk.sequence.block_table for chunk in chunks],
            block_size=self.block_size,
            device=self.device,
        )
        return _BatchLayout(
            input_ids=torch.tensor(input_ids, dtype=torch.int64, device=self.device),
            positions=token_positions(metadata.query_lens_host, metadata.seq_lens_host, self.device),
            metadata=metadata,
            logit_rows=logit_rows,
            sample_rows=sample_rows,
            prompt_rows=prompt_rows,
        )
