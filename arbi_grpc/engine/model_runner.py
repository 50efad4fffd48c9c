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

Output constraints (`docs/structured_output.md`): a step that samples a constrained sequence queues its forward pass
only; its sampling waits on the host, not on the device. The step pipeline reads the previous step while the device
runs the forward pass, so every earlier token of the step's sequences is on the host and their matchers have
accepted it; `fill_masks` then fills the bitmask of the constrained rows, and `queue_sampling` queues the mask's
copy and the sampling behind the forward pass. A step without a constrained row queues its sampling at once.
"""

from __future__ import annotations

import time
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
from arbi_grpc.engine.sequence import Sequence, SequenceStatus
from arbi_grpc.engine.step_inputs import StepInputs, forward_logits, seed_reused_blocks, select_rows
from arbi_grpc.engine.step_timings import StepTiming, StepTimings, mark
from arbi_grpc.engine.warm_up import warm_up_steps

if TYPE_CHECKING:
    from arbi_grpc.engine.grammar.token_masks import TokenMaskBuilder


@dataclass(frozen=True)
class StepResult:
    """Per sequence: the sampled token (if the chunk completed it) and new prompt log-probabilities."""

    sampled: dict[Sequence, TokenOutput]
    prompt_logprobs: dict[Sequence, list[float]]


@dataclass
class PendingSampling:
    """The sampling of a launched step not queued yet: its logits on the device and, once filled, its masks."""

    logits: Tensor  # [S, V] float32, one row per sampled sequence
    num_constrained: int  # sampled sequences with an output constraint
    timing: StepTiming | None
    masks: TokenMask | None = None
    masks_filled: bool = False


class LaunchedStep:
    """A step queued on the device: its sampled tokens stay there (`sampled_rows` says whose row is which)
    until `result()` reads them. While `pending` is set its sampling is not queued yet (`ModelRunner.queue_sampling`)."""

    def __init__(self, sequences: list[Sequence], pending: PendingSampling | None,
                 prompt_logprobs: dict[Sequence, list[float]]) -> None:
        self.sampled_rows = {sequence: row for row, sequence in enumerate(sequences)}
        self.sequences = sequences
        self.pending = pending
        self._sample: SampleInFlight | None = None
        self._prompt_logprobs = prompt_logprobs
        self._result: StepResult | None = None

    @property
    def awaits_sampling(self) -> bool:
        return self.pending is not None

    @property
    def sampled_token_ids(self) -> Tensor:
        """[S] int64 on the device, row `sampled_rows[sequence]` for each sequence that sampled."""
        if self._sample is None:
            raise ValueError("this step sampled no token" if self.pending is None else "this step's sampling is not queued")
        return self._sample.token_ids

    def sampling_queued(self, sample: SampleInFlight) -> None:
        self.pending = None
        self._sample = sample

    def result(self) -> StepResult:
        """Waits for the step's device-to-host copy and returns the tokens and log-probabilities (read once)."""
        if self._result is not None:
            return self._result
        if self.pending is not None:
            raise RuntimeError("a step is read before its sampling was queued")
        sampled: dict[Sequence, TokenOutput] = {}
        if self._sample is not None:
            result = self._sample.result()
            for i, sequence in enumerate(self.sequences):
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
        self.ranks = ranks
        self.token_masks: TokenMaskBuilder | None = None  # set when the engine serves output constraints
        self.timings: StepTimings | None = None  # set by benchmarks that break steps down

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

    @torch.inference_mode()
    def warm_up_eager_steps(self, max_model_len: int) -> int:
        """Runs the forward passes of `warm_up_steps` (sampling nothing) and waits for the device, so that their
        kernels compile at boot and not under load; returns how many steps ran."""
        steps = warm_up_steps(self.kv_cache, max_model_len)
        for inputs in steps:
            self._forward_logits(inputs, torch.zeros(inputs.num_tokens, dtype=torch.int64, device=self.device))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return len(steps)

    def replace_kv_cache(self, kv_cache: KVStorage) -> None:
        """The storage the next steps read and write; decode graphs, which captured the old one, are captured again."""
        self.kv_cache = kv_cache
        if self.decode_graphs is not None:
            self.capture_decode_graphs(self.decode_graphs.max_batch, self.decode_graphs.max_model_len)

    @torch.inference_mode()
    def launch(self, step: ScheduledStep, previous: LaunchedStep | None) -> LaunchedStep:
        """Queues the forward pass of `step`, and its sampling unless it samples a constrained sequence (then
        `fill_masks` and `queue_sampling` follow); `previous` is the launched step whose tokens the host has not
        read yet (None when every input token is on the host)."""
        reused_blocks = [(_batch_slot(chunk.sequence), chunk.sequence.block_table, chunk.num_reused_blocks)
                         for chunk in step.chunks if chunk.num_reused_blocks]
        layout = self._lay_out(step.chunks)
        inputs = StepInputs(layout.query_lens, layout.seq_lens, layout.block_tables, layout.batch_slots,
                            layout.logit_rows, reused_blocks)
        sequences = [chunk.sequence for chunk, _ in layout.sample_rows]
        num_constrained = sum(sequence.grammar is not None for sequence in sequences)
        timing = None
        if self.timings is not None and sequences:
            timing = self.timings.start(step.num_tokens, len(sequences), num_constrained, self.device)
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
        mark(timing, self.device)
        pending = None
        if layout.sample_rows:
            sample_logits = select_rows(logits, [index for _, index in layout.sample_rows])
            pending = PendingSampling(sample_logits, num_constrained, timing)
        prompt_logprobs: dict[Sequence, list[float]] = {}
        launched = LaunchedStep(sequences, pending, prompt_logprobs)
        if pending is not None and not num_constrained:
            self.queue_sampling(launched)
        for chunk, first, count in layout.prompt_rows:  # read at once: such steps are not overlapped
            tokens = chunk.sequence.token_ids[chunk.start: chunk.start + count + 1]
            prompt_logprobs[chunk.sequence] = score_prompt(logits[first: first + count], tokens)
        return launched

    def fill_masks(self, launched: LaunchedStep) -> None:
        """Fills the masks of a launched step's constrained rows on the host, while the device runs its forward
        pass. Every earlier token of theirs must have been read (the matchers accept any they have not yet)."""
        pending = launched.pending
        if pending is None or pending.masks_filled:
            raise RuntimeError("fill_masks needs a launched step whose sampling waits for its masks")
        if self.token_masks is None:
            raise RuntimeError("a constrained sequence reached a model runner without token masks")
        started_s = time.perf_counter()
        grammars = []
        for sequence in launched.sequences:
            grammar = sequence.grammar
            if grammar is not None and sequence.status is SequenceStatus.FINISHED:
                grammar = None  # ended when the previous step was read: its row is discarded
            if grammar is not None:
                if sequence.num_in_flight_tokens > 1:
                    raise RuntimeError(f"request {sequence.request_id!r} has an earlier token in flight: its mask "
                                       "would miss it")
                grammar.advance(sequence.token_ids, sequence.num_prompt_tokens)
            grammars.append(grammar)
        pending.masks = self.token_masks.build(grammars, [sequence.sampling_state for sequence in launched.sequences],
                                               self.device)
        pending.masks_filled = True
        if pending.timing is not None:
            pending.timing.fill_s = time.perf_counter() - started_s

    @torch.inference_mode()
    def queue_sampling(self, launched: LaunchedStep) -> None:
        """Queues a launched step's sampling (with its masks' copy) behind its forward pass; the host does not wait."""
        pending = launched.pending
        if pending is None:
            raise RuntimeError("this step's sampling is queued already, or it samples nothing")
        if pending.num_constrained and not pending.masks_filled:
            raise RuntimeError("a constrained step's sampling is queued before its masks were filled")
        started_s = time.perf_counter()
        mark(pending.timing, self.device)
        sample = self.sampler.sample_without_sync(pending.logits, [s.sampling_state for s in launched.sequences],
                                                  pending.masks)
        mark(pending.timing, self.device)
        if pending.timing is not None:
            pending.timing.queue_s = time.perf_counter() - started_s
        launched.sampling_queued(sample)

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
