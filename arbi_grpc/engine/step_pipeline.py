"""The engine's steps, overlapped: schedule and launch step N+1, then read and stream step N while the device
runs N+1, so the device never waits for the host's bookkeeping. Owns the one launched step not yet read.

A sequence counts the token a launched step sampled until the host reads it (`Sequence.num_in_flight_tokens`):
the scheduler plans its next decode with it and the model runner takes it from the device. A sequence that
ends when its tokens are read was scheduled once more: it is finished at once (blocks freed, nothing more
streamed) and its row of the later step is discarded. A step with a sequence that needs its tokens on the
host before sampling again (`Sequence.needs_host_history`) is read before the next one is scheduled. Without
overlap every step is read right after its launch.

A step that samples a constrained sequence is launched in two parts: its forward pass first; then, while the
device runs it, the host reads and streams the step before it (each constrained matcher accepts its tokens there),
fills the new step's masks (`ModelRunner.fill_masks`) and only then queues its sampling, which alone waits for them.
The forward passes and the other rows keep their overlap; a step without a constrained row queues its sampling
with its forward pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from arbi_grpc.engine.fault_injection import StepFaults
from arbi_grpc.engine.model_runner import LaunchedStep, ModelRunner, StepResult
from arbi_grpc.engine.output_processor import OutputProcessor
from arbi_grpc.engine.request import RequestOutput
from arbi_grpc.engine.scheduler import ScheduledStep, Scheduler
from arbi_grpc.engine.sequence import Sequence, SequenceStatus
from arbi_grpc.errors import ArbiError, EngineStepError
from arbi_grpc.observability.engine_observer import EngineObserver

log = logging.getLogger(__name__)

FinishSequence = Callable[[Sequence, RequestOutput], None]


@dataclass(frozen=True)
class _InFlightStep:
    """A step launched on the device whose tokens the host has not read yet."""

    step: ScheduledStep
    launched: LaunchedStep
    started_s: float  # time.monotonic() when it was scheduled


class StepPipeline:
    """Runs the engine's steps on its thread; `finish` ends a sequence (the engine frees it and tells its sink)."""

    def __init__(self, scheduler: Scheduler, runner: ModelRunner, outputs: OutputProcessor,
                 observer: EngineObserver, finish: FinishSequence, overlap_steps: bool) -> None:
        self.scheduler = scheduler
        self.runner = runner
        self.outputs = outputs
        self.observer = observer
        self.overlap_steps = overlap_steps  # read each step: switching takes effect at the next one
        self._finish = finish
        self._in_flight: _InFlightStep | None = None
        self._faults = StepFaults.from_environment()  # debug faults, off unless ARBI_DEBUG_FAULTS is set

    @property
    def has_step_in_flight(self) -> bool:
        return self._in_flight is not None

    def step(self) -> None:
        """Schedules and launches the next step, then reads and streams the one launched before it (then fills the
        new step's masks and queues its sampling, if it waited for them)."""
        previous, self._in_flight = self._in_flight, None
        if previous is not None and any(chunk.sequence.needs_host_history for chunk in previous.step.chunks):
            self._complete(previous)
            previous = None
        launched = self._schedule_and_launch(previous)
        if previous is not None:
            self._complete(previous)
        if launched is not None and launched.launched.awaits_sampling and not self._sample_with_masks(launched):
            launched = None
        if launched is not None and not self.overlap_steps:
            self._complete(launched)
        elif launched is not None:
            self._in_flight = launched

    def read_step_in_flight(self) -> None:
        """Reads and streams the launched step now (before a call that must see every token)."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            self._complete(in_flight)

    def drop_step_in_flight(self) -> None:
        """Forgets the launched step unread (shutdown ends its requests anyway)."""
        self._in_flight = None

    def _schedule_and_launch(self, previous: _InFlightStep | None) -> _InFlightStep | None:
        started_s = time.monotonic()
        step = self.scheduler.schedule()
        for sequence in step.preempted:
            if not sequence.prompt_logprobs_sent:
                sequence.prompt_logprobs = None  # recomputed from the start
        if not step.chunks:
            return None
        for chunk in step.chunks:
            self.observer.request_scheduled(chunk.sequence.request_id)
        self._faults.before_launch(step)
        try:
            self._faults.in_launch(step)
            launched = self.runner.launch(step, None if previous is None else previous.launched)
        except Exception as error:  # a failed step must not take the server down
            self._fail(step, error)
            return None
        for chunk in step.chunks:
            sequence = chunk.sequence
            sequence.num_computed_tokens += chunk.num_tokens  # written before any later step reads it
            if sequence in launched.sampled_rows:
                sequence.num_in_flight_tokens += 1
            self._index_known_blocks(sequence)
        return _InFlightStep(step, launched, started_s)

    def _sample_with_masks(self, in_flight: _InFlightStep) -> bool:
        """Fills a launched step's masks (every earlier token of its sequences has been read) and queues its
        sampling; False when that failed the step."""
        try:
            self.runner.fill_masks(in_flight.launched)
            self.runner.queue_sampling(in_flight.launched)
        except Exception as error:
            self._fail(in_flight.step, error)
            return False
        return True

    def _index_known_blocks(self, sequence: Sequence) -> None:
        """Offers the prefix cache the blocks that launched steps fill and whose token ids the host holds (a
        later step that reuses them reads them after they are written, in the device's queue)."""
        self.scheduler.block_manager.index_full_blocks(sequence, min(sequence.num_computed_tokens, len(sequence.token_ids)))

    def _complete(self, in_flight: _InFlightStep) -> None:
        """Reads a launched step's tokens, indexes the blocks it filled and streams its outputs."""
        step = in_flight.step
        try:
            self._stream(step, in_flight.launched.result())
        except Exception as error:  # as a failed launch: fails this step's requests, not the server
            self._fail(step, error)
            return
        self.observer.step_finished(len(step.chunks), step.num_tokens, time.monotonic() - in_flight.started_s)

    def _stream(self, step: ScheduledStep, result: StepResult) -> None:
        """Appends a read step's tokens to its sequences and streams (or finishes) each."""
        for chunk in step.chunks:
            sequence = chunk.sequence
            if sequence.status is SequenceStatus.FINISHED:
                continue  # finished or cancelled after this step was launched: its row is discarded
            logprobs = result.prompt_logprobs.get(sequence)
            if logprobs is not None:
                self.outputs.add_prompt_logprobs(sequence, logprobs)
            token = result.sampled.get(sequence)
            if token is None:
                continue
            sequence.num_in_flight_tokens -= 1
            output = self.outputs.append_token(sequence, token)
            self._index_known_blocks(sequence)  # the token may complete a block a later launched step wrote
            self.observer.token_emitted(sequence.request_id)
            if output.finished:
                self._finish(sequence, output)
            else:
                sequence.sink(output)

    def _fail(self, step: ScheduledStep, error: Exception) -> None:
        log.exception("engine step failed; failing its %d requests", len(step.chunks))
        failure = error if isinstance(error, ArbiError) else EngineStepError(
            f"the engine step serving this request failed ({error!r}); other requests go on, retry")
        for chunk in step.chunks:
            if chunk.sequence.status is not SequenceStatus.FINISHED:
                self._finish(chunk.sequence, RequestOutput(chunk.sequence.request_id, error=failure))
