"""Test harness for the model code: random weights for HF reference models, and a step runner that plays a
schedule of prefill chunks and decodes through the paged path with non-contiguous block tables.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch
from torch import nn

from arbi_grpc.attention.metadata import AttentionMetadata, token_positions
from arbi_grpc.attention.paged_kv_cache import PagedKVCache


def randomize_weights(model: nn.Module, generator: torch.Generator) -> None:
    """Give every parameter a non-trivial random value (HF's init leaves norms at 1 and biases at 0)."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if parameter.dim() == 1 and name.endswith("norm.weight"):
                parameter.copy_(1.0 + 0.2 * noise)
            elif parameter.dim() == 1:
                parameter.copy_(0.2 * noise)
            elif "embed_tokens" in name:
                parameter.copy_(noise)
            else:
                parameter.copy_(noise / math.sqrt(parameter.shape[-1]))


@dataclass
class PagedStepRunner:
    """Plays a schedule of steps through the paged path, allocating blocks from a shuffled free list.

    Each step lists (sequence id, number of new tokens) in flat-batch order; sequences advance through
    their own token lists. Blocks are handed out in random order, so block tables are non-contiguous. A
    sequence's id is its batch slot (a TKV cache needs as many slots as sequences).
    """

    block_size: int
    num_blocks: int
    rng: random.Random
    device: torch.device | str = "cpu"
    free_blocks: list[int] = field(init=False)
    block_tables: dict[int, list[int]] = field(default_factory=dict)
    processed: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.free_blocks = list(range(self.num_blocks))
        self.rng.shuffle(self.free_blocks)

    def plan_step(
        self, step: list[tuple[int, int]]
    ) -> tuple[AttentionMetadata, torch.Tensor, list[tuple[int, int, int]]]:
        """Allocate blocks for the step; returns metadata, positions [T] and (sequence, start, end) spans."""
        query_lens, seq_lens, tables, spans = [], [], [], []
        for sequence, new_tokens in step:
            start = self.processed.get(sequence, 0)
            end = start + new_tokens
            table = self.block_tables.setdefault(sequence, [])
            while len(table) * self.block_size < end:
                table.append(self.free_blocks.pop())
            self.processed[sequence] = end
            query_lens.append(new_tokens)
            seq_lens.append(end)
            tables.append(list(table))
            spans.append((sequence, start, end))
        metadata = AttentionMetadata.build(
            query_lens=query_lens,
            seq_lens=seq_lens,
            block_tables=tables,
            block_size=self.block_size,
            device=self.device,
            batch_slots=[sequence for sequence, _ in step],
        )
        return metadata, token_positions(query_lens, seq_lens, self.device), spans

    def run_model(
        self,
        model: nn.Module,
        kv_cache: PagedKVCache,
        tokens: dict[int, list[int]],
        steps: list[list[tuple[int, int]]],
    ) -> dict[int, torch.Tensor]:
        """Logits of every token processed for each sequence, in position order: {sequence: [n, vocab]}."""
        logits: dict[int, list[torch.Tensor]] = {sequence: [] for sequence in tokens}
        with torch.inference_mode():
            for step in steps:
                metadata, positions, spans = self.plan_step(step)
                input_ids = torch.tensor(
                    [token for seq, start, end in spans for token in tokens[seq][start:end]], device=self.device
                )
                step_logits = model.compute_logits(model(input_ids, positions, metadata, kv_cache))
                offset = 0
                for sequence, start, end in spans:
                    logits[sequence].append(step_logits[offset : offset + end - start].cpu())
                    offset += end - start
        return {sequence: torch.cat(parts) for sequence, parts in logits.items()}


def chunked_schedule(rng: random.Random, prompt_lens: list[int], decode_steps: int) -> list[list[tuple[int, int]]]:
    """Sequence 0's prompt in two chunks, sequence 1 whole, later sequences join at step 2; then decodes.

    Batch order inside each step is shuffled, so decodes and prefills interleave in the flat batch.
    """
    first_chunk = prompt_lens[0] // 2
    step_one = [(0, first_chunk), (1, prompt_lens[1])]
    step_two = [(0, prompt_lens[0] - first_chunk), (1, 1)] + [(s, prompt_lens[s]) for s in range(2, len(prompt_lens))]
    steps = [step_one, step_two]
    for _ in range(decode_steps):
        steps.append([(sequence, 1) for sequence in range(len(prompt_lens))])
    for step in steps:
        rng.shuffle(step)
    return steps


def tokens_needed(steps: list[list[tuple[int, int]]]) -> dict[int, int]:
    totals: dict[int, int] = {}
    for step in steps:
        for sequence, new_tokens in step:
            totals[sequence] = totals.get(sequence, 0) + new_tokens
    return totals
