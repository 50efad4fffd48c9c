"""Turns a scheduled step into one forward pass over a flattened varlen batch, then samples.

Owns the model, its paged KV cache, the sampler and, on CUDA, the captured decode graphs. For every chunk it
lays out input ids, positions and KV slots; for chunks that reach the end of their sequence it samples the
next token, and for prompt positions of requests that asked for them it computes prompt log-probabilities.
A step where every sequence brings one token replays a CUDA graph when one was captured for its size.
Before a step runs, the KV storage brings the per-slot state of each sequence (re)admitted with a prefix hit up to
date with its reused blocks (`KVStorage.seed_reused_blocks`).

Under tensor parallelism (`arbi_grpc.parallel`) the runner is rank 0's: `ranks` broadcasts each eager step's
inputs to the other ranks before the forward pass, whose collectives they join.

`launch` queues a step on the device and returns without waiting for it; a token that the previous launched
step sampled and the host has not read yet is taken from that step's device tensor. `LaunchedStep.result()`
waits for the step's one device-to-host copy.

Output constraints: once the forward pass is queued, each constrained sequence's matcher accepts its tokens not yet
accepted (one still in flight is read from the previous step's result, which the device wrote before this step's
forward pass, so the host waits for no more than that step), then `token_masks` fills their bitmask rows while the
device runs the forward pass, and the sampler applies them to the logits outside any CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from arbi_grpc.attention.kv_storage import KVStorage
from arbi_grpc.engine.carried_tokens import CarriedTokens
from arbi_grpc.engine.cuda_graphs import DecodeBatch, DecodeGraphs
from arbi_grpc.engine.host_to_device import tensor_on_device_no_sync
from arbi_grpc.engine.request import TokenOutput
from arbi_grpc.engine.sampler import SampleInFlight, Sampler, TokenMask
from arbi_grpc.engine.sampler import prompt_logprobs as score_prompt
from arbi_grpc.engine.scheduler import ScheduledChunk, ScheduledStep
from arbi_grpc.engine.sequence import Sequence
from arbi_grpc.engine.step_inputs import StepInputs, forward_logits, seed_reused_blocks, select_rows

if TYPE_CHECKING:
    from arbi_grpc.engine.grammar.token_masks import TokenMaskBuilder


@dataclass(frozen=True)
class StepResult:
    """Per sequence: the sampled token (if the chunk completed it) and new prompt log-probabilities."""

    sampled: dict[Sequence, TokenOutput]
    prompt_logprobs: dict[Sequence, list[float]]


class LaunchedStep:
    """A step queued on the device: its sampled tokens stay there (`sampled_rows` says whose row is which)
    until `result()` reads them."""

    def __init__(self, sequences: list[Sequence], sample: SampleInFlight | None,
                 prompt_logprobs: dict[Sequence, list[float]]) -> None:
        self.sampled_rows = {sequence: row for row, sequence in enumerate(sequences)}
        self._sequences = sequences
        self._sample = sample
        self._prompt_logprobs = prompt_logprobs
        self._result: StepResult | None = None

    @property
    def sampled_token_ids(self) -> Tensor:
        """[S] int64 on the device, row `sampled_rows[sequence]` for each sequence that sampled."""
        if self._sample is None:
            raise ValueError("this step sampled no token")
        return self._sample.token_ids

    def result(self) -> StepResult:
        """Waits for the step's device-to-host copy and returns the tokens and log-probabilities (read once)."""
        if self._result is not None:
            return self._result
        sampled: dict[Sequence, TokenOutput] = {}
        if self._sample is not None:
            result = self._sample.result()
            for i, sequence in enumerate(self._sequences):
                sampled[sequence] = TokenOutput(
                    token_id=result.token_ids[i],
                    logprob=result.logprobs[i],
                    top_logprobs=tuple(result.top_logprobs[i]),
                )
        self._result = StepResult(sampled, self._prompt_logprobs)
        return self._result


@dataclass(frozen=True)
class _BatchLayout:
    input_ids: list[int]  # [T]; a carried row holds a placeholder
    carried_rows: list[tuple[int, Sequence]]  # (row, sequence) whose input id the previous step sampled
    query_lens: list[int]  # [B] new tokens per chunk
    seq_lens: list[int]  # [B] context length after the step
    block_tables: list[list[int]]  # [B] block ids
    batch_slots: list[int]  # [B] each sequence's batch slot
    logit_rows: list[int]  # rows of the flat batch whose logits are needed
    sample_rows: list[tuple[ScheduledChunk, int]]  # (chunk, index into logit_rows)
    prompt_rows: list[tuple[ScheduledChunk, int, int]]  # (chunk, first index into logit_rows, count)


class StepSender(Protocol):
    """The other tensor-parallel ranks, as rank 0's runner sees them (`parallel.launch.WorkerRanks`)."""

    def send_step(self, inputs: StepInputs, input_ids: Tensor) -> None: ...

    def abandon(self, error: Exception) -> None: ...

    def close(self) -> None: ...


class ModelRunner:
    def __init__(self, model: torch.nn.Module, kv_cache: KVStorage, block_size: int, device: torch.device,
                 ranks: StepSender | None = None) -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.device = device
        self.sampler = Sampler()
        self.decode_graphs: DecodeGraphs | None = None
        self.token_masks: TokenMaskBuilder | None = None  # set when the engine serves output constraints
        self.ranks = ranks

    def close(self) -> None:
        """Stops the other tensor-parallel ranks, if any (the engine has stopped stepping)."""
        if self.ranks is not None:
            self.ranks.close()

    def capture_decode_graphs(self, max_batch: int, max_model_len: int) -> None:
        """Capture CUDA graphs of decode steps of up to `max_batch` sequences (replacing earlier ones)."""
        if self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, the runner is on {self.device}")
        if self.ranks is not None:
            raise NotImplementedError("CUDA graphs under tensor parallelism: the worker ranks replay no graph")
        self.decode_graphs = None  # the old graphs' pool goes before the new capture
        graphs = DecodeGraphs(self.model, self.kv_cache, max_batch=max_batch, max_model_len=max_model_len)
        graphs.capture()
        self.decode_graphs = graphs

    def replace_kv_cache(self, kv_cache: KVStorage) -> None:
        """The storage the next steps read and write; decode graphs, which captured the old one, are captured again."""
        self.kv_cache = kv_cache
        if self.decode_graphs is not None:
            self.capture_decode_graphs(self.decode_graphs.max_batch, self.decode_graphs.max_model_len)

    @torch.inference_mode()
    def launch(self, step: ScheduledStep, previous: LaunchedStep | None) -> LaunchedStep:
        """Queues the forward pass and sampling of `step`; `previous` is the launched step whose tokens the
        host has not read yet (None when every input token is on the host)."""
        reused_blocks = [(_batch_slot(chunk.sequence), chunk.sequence.block_table, chunk.num_reused_blocks)
                         for chunk in step.chunks if chunk.num_reused_blocks]
        layout = self._lay_out(step.chunks)
        inputs = StepInputs(layout.query_lens, layout.seq_lens, layout.block_tables, layout.batch_slots,
                            layout.logit_rows, reused_blocks)
        seed_reused_blocks(self.kv_cache, inputs)
        carried = self._carried(layout, previous)
        if self._replays_graph(step.chunks):
            decode = self._decode_batch(layout, carried)
            # [B, V] float32, one row per sequence; a chunk mid-prompt samples nothing and drops out.
            logits = select_rows(self.decode_graphs.run(decode), layout.logit_rows)
        else:
            input_ids = tensor_on_device_no_sync(layout.input_ids, torch.int64, self.device)
            if carried is not None:
                carried.write_into(input_ids)
            logits = self._forward_logits(inputs, input_ids)  # [N, V] float32
        sequences = [chunk.sequence for chunk, _ in layout.sample_rows]
        sample = None
        if layout.sample_rows:
            sample_logits = select_rows(logits, [index for _, index in layout.sample_rows])
            states = [s.sampling_state for s in sequences]
            mask = self._token_masks(sequences, previous)
            sample = self.sampler.sample_without_sync(sample_logits, states, mask)
        prompt_logprobs: dict[Sequence, list[float]] = {}  # read at once: such steps are not overlapped
        for chunk, first, count in layout.prompt_rows:
            tokens = chunk.sequence.token_ids[chunk.start: chunk.start + count + 1]
            prompt_logprobs[chunk.sequence] = score_prompt(logits[first: first + count], tokens)
        return LaunchedStep(sequences, sample, prompt_logprobs)

    def _token_masks(self, sequences: list[Sequence], previous: LaunchedStep | None) -> TokenMask | None:
        """The masks of the constrained rows, their matchers brought up to date first (None without any)."""
        constrained = [sequence for sequence in sequences if sequence.grammar is not None]
        if not constrained:
            return None
        if self.token_masks is None:
            raise RuntimeError("a constrained sequence reached a model runner without token masks")
        in_flight = {}
        if previous is not None and any(sequence.num_in_flight_tokens for sequence in constrained):
            in_flight = previous.result().sampled
        for sequence in constrained:
            token = in_flight.get(sequence) if sequence.num_in_flight_tokens else None
            sequence.grammar.advance(sequence.token_ids, sequence.num_prompt_tokens,
                                     None if token is None else token.token_id)
        return self.token_masks.build([sequence.grammar for sequence in sequences],
                                      [sequence.sampling_state for sequence in sequences], self.device)

    def _forward_logits(self, inputs: StepInputs, input_ids: Tensor) -> Tensor:
        """`forward_logits`, on every tensor-parallel rank when there are others: a failure partway leaves them
        out of step, so it abandons them (and the engine) before it fails the step."""
        if self.ranks is None:
            return forward_logits(self.model, self.kv_cache, self.block_size, inputs, input_ids)
        try:
            self.ranks.send_step(inputs, input_ids)
            return forward_logits(self.model, self.kv_cache, self.block_size, inputs, input_ids)
        except Exception as error:
            self.ranks.abandon(error)
            raise

    @staticmethod
    def _carried(layout: _BatchLayout, previous: LaunchedStep | None) -> CarriedTokens | None:
        if not layout.carried_rows:
            return None
        if previous is None or any(s not in previous.sampled_rows for _, s in layout.carried_rows):
            raise RuntimeError("a token in flight was not sampled by the previous launched step")
        return CarriedTokens(
            source=previous.sampled_token_ids,
            rows=[row for row, _ in layout.carried_rows],
            source_rows=[previous.sampled_rows[sequence] for _, sequence in layout.carried_rows],
        )

    def _lay_out(self, chunks: list[ScheduledChunk]) -> _BatchLayout:
        input_ids: list[int] = []
        logit_rows: list[int] = []
        sample_rows: list[tuple[ScheduledChunk, int]] = []
        prompt_rows: list[tuple[ScheduledChunk, int, int]] = []
        carried_rows: list[tuple[int, Sequence]] = []
        for chunk in chunks:
            sequence = chunk.sequence
            start, end = chunk.start, chunk.end
            first_row = len(input_ids)
            input_ids.extend(sequence.token_ids[start:end])
            if end > len(sequence.token_ids):  # its last input is still on the device
                carried_rows.append((len(input_ids), sequence))
                input_ids.append(0)
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
            carried_rows=carried_rows,
            query_lens=[chunk.num_tokens for chunk in chunks],
            seq_lens=[chunk.start + chunk.num_tokens for chunk in chunks],
            block_tables=[chunk.sequence.block_table for chunk in chunks],
            batch_slots=[_batch_slot(chunk.sequence) for chunk in chunks],
            logit_rows=logit_rows,
            sample_rows=sample_rows,
            prompt_rows=prompt_rows,
        )

    def _decode_batch(self, layout: _BatchLayout, carried: CarriedTokens | None) -> DecodeBatch:
        """The one-token-per-sequence layout as a graph replay's inputs: the token sits at seq_len - 1."""
        positions = [seq_len - 1 for seq_len in layout.seq_lens]
        slots = [
            table[position // self.block_size] * self.block_size + position % self.block_size
            for table, position in zip(layout.block_tables, positions)
        ]
        return DecodeBatch(layout.input_ids, positions, slots, layout.seq_lens, layout.block_tables,
                           layout.batch_slots, carried)

    def _replays_graph(self, chunks: list[ScheduledChunk]) -> bool:
        return (
            self.decode_graphs is not None
            and len(chunks) <= self.decode_graphs.max_batch
            and all(chunk.num_tokens == 1 for chunk in chunks)
        )


def _batch_slot(sequence: Sequence) -> int:
    if sequence.batch_slot is None:
        raise RuntimeError(f"request {sequence.request_id!r} was scheduled without a batch slot")
    return sequence.batch_slot
