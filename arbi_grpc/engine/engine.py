"""The engine loop: one thread that owns the scheduler and the model runner.

Other threads talk to it only through `submit`, `cancel` and `call`, which post tasks to a queue (a cancel
is a task too; a call may ask to run after the next step, `after_step`); once `shutdown` began, new submits and
calls are refused with UnavailableError. An unexpected
error inside the loop ends every request with INTERNAL, refuses everything after it (`failure`) and calls
`on_failure`, so the server stops reporting ready instead of leaving streams hanging. Each
step the loop takes new tasks, schedules, launches the model once, and streams outputs back through each
request's sink. With overlapped steps (the default, `StepPipeline`) a step is scheduled and launched before
the host reads the previous one's tokens, so the device never waits for the host's bookkeeping. Outputs are
delivered on the engine thread: sinks must be cheap and thread-safe (the gRPC servicer hands them to its
event loop).

A request with an output constraint waits outside the scheduler while its grammar compiles on the compiler's threads
(`GrammarGate`); the compile's end comes back as a task, so the loop never waits for it.

Other threads read the engine only through snapshots the engine thread publishes (`stats()`, after every step and
task) or takes on request (`list_requests`); the KV storage is swapped by an engine call (`replace_kv_storage`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from arbi_grpc.attention.kv_storage import KVStorage, check_same_shape
from arbi_grpc.config import SchedulingLimits
from arbi_grpc.engine.grammar_gate import GrammarGate, GrammarSource
from arbi_grpc.engine.model_runner import ModelRunner
from arbi_grpc.engine.output_processor import OutputProcessor
from arbi_grpc.engine.request import FinishReason, GenerationRequest, RequestOutput
from arbi_grpc.engine.sampler import SamplingState
from arbi_grpc.engine.scheduler import Scheduler
from arbi_grpc.engine.sequence import OutputSink, Sequence, SequenceStatus
from arbi_grpc.engine.snapshots import EngineStats, RequestSnapshot, engine_stats, request_snapshots
from arbi_grpc.engine.step_pipeline import StepPipeline
from arbi_grpc.errors import ArbiError, FailedPreconditionError, ResourceExhaustedError, UnavailableError
from arbi_grpc.observability.engine_observer import EngineObserver, NoEngineObserver
from arbi_grpc.text.detokenizer import IncrementalDetokenizer
from arbi_grpc.text.stop_strings import StopStringMatcher
from arbi_grpc.text.tokenizer import TextTokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Submit:
    request: GenerationRequest
    sink: OutputSink
    arrival_s: float  # time.monotonic() at submit, for queue time and latencies


@dataclass(frozen=True)
class _Cancel:
    request_id: str
    future: Future  # True when the request was in the engine


@dataclass(frozen=True)
class _Call:
    """Runs `function` on the engine thread between steps and resolves `future` with its result; `after_step`:
    not before the engine's next step when one is due."""

    function: Callable[[], Any]
    future: Future
    after_step: bool = False


@dataclass(frozen=True)
class _GrammarReady:
    request_id: str  # its grammar compiled (or failed to)


@dataclass(frozen=True)
class _Shutdown:
    error: ArbiError  # ends every request still in the engine


@dataclass(frozen=True)
class _Fail:
    error: Exception  # raised in the loop, which then fails as on a defect of its own


class Engine:
    """Continuous batching over a paged KV cache, driven by a background thread."""

    def __init__(self, scheduler: Scheduler, runner: ModelRunner, tokenizer: TextTokenizer,
                 output_processor: OutputProcessor, observer: EngineObserver | None = None,
                 overlap_steps: bool = True, grammars: GrammarSource | None = None) -> None:
        self.scheduler = scheduler
        self.observer: EngineObserver = observer or NoEngineObserver()  # called on the engine thread only
        self.runner = runner
        self.tokenizer = tokenizer
        self.outputs = output_processor
        self.pipeline = StepPipeline(scheduler, runner, output_processor, self.observer, self._finish,
                                     overlap_steps)
        self._tasks: queue.SimpleQueue[_Submit | _Cancel | _Call | _GrammarReady | _Shutdown] = queue.SimpleQueue()
        self._grammar_gate = GrammarGate(grammars, self._post_grammar_ready)
        self._after_step: list[_Call] = []  # taken calls that run once this turn's step is done
        self._sequences: dict[str, Sequence] = {}
        self._lock = threading.Lock()
        self._num_pending = 0  # submitted, not yet taken by the loop
        self._num_held = 0  # taken by the loop and not finished: len(_sequences), kept under the lock
        self._num_waiting = 0  # in the scheduler's waiting queue after the last step
        self._closed = False  # shutdown began (or the loop failed): no new submits or calls
        self._failure: UnavailableError | None = None
        self.on_failure: Callable[[UnavailableError], None] | None = None  # called on the engine thread
        self._thread: threading.Thread | None = None
        self._max_running_capacity = scheduler.batch_slots.num_slots
        self._stats = engine_stats(scheduler)  # replaced (never mutated) by the engine thread

    # -- called from any thread -------------------------------------------------------------------

    def submit(self, request: GenerationRequest, sink: OutputSink) -> None:
        """Queues a request; raises ResourceExhaustedError when the waiting queue is full."""
        with self._lock:
            if self._closed:
                raise self._failure or UnavailableError("the model's engine is shutting down; retry")
            queued = self._num_pending + self._num_waiting
            max_waiting_requests = self.scheduler.limits.max_waiting_requests
            if queued >= max_waiting_requests:
                raise ResourceExhaustedError(
                    f"the waiting queue is full: {queued} requests wait, the limit max_waiting_requests is "
                    f"{max_waiting_requests}; retry later"
                )
            self._num_pending += 1
            # Under the lock, so a submit is never queued behind a _Shutdown.
            self._tasks.put(_Submit(request, sink, time.monotonic()))

    def cancel(self, request_id: str) -> Future:
        """Stops a request at the next step and frees its KV blocks; unknown ids are ignored.

        The future holds True when the request was in the engine (its stream ends FINISH_REASON_CANCELLED).
        """
        future: Future = Future()
        with self._lock:
            if self._closed:
                future.set_result(False)  # shutdown ends every request anyway
                return future
            self._tasks.put(_Cancel(request_id, future))
        return future

    def _post_grammar_ready(self, request_id: str) -> None:
        with self._lock:
            if not self._closed:
                self._tasks.put(_GrammarReady(request_id))

    def call(self, function: Callable[[], Any], after_step: bool = False) -> Future:
        """Runs `function` on the engine thread between two steps; the future holds its result. With `after_step`
        it runs after the next step when requests are in the engine (at once when none is), so a chain of such
        calls, each posting the next, leaves a step between any two (the decoder embedder's rounds)."""
        future: Future = Future()
        with self._lock:
            if self._closed:
                future.set_exception(self._failure or UnavailableError("the model's engine is shutting down"))
                return future
            self._tasks.put(_Call(function, future, after_step))
        return future

    def list_requests(self) -> Future[list[RequestSnapshot]]:
        """The requests in the engine, running ones first, then waiting ones in admission order."""
        return self.call(lambda: request_snapshots(self.scheduler))

    def update_limits(self, limits: SchedulingLimits) -> Future:
        """Replaces the scheduling limits from the next step on."""
        def apply() -> None:
            self.scheduler.limits = limits
        return self.call(apply)

    def set_overlap_steps(self, enabled: bool) -> Future:
        """Switches overlapped steps on or off from the next step on (benchmarks time both loops)."""
        def apply() -> None:
            self.pipeline.overlap_steps = enabled
        return self.call(apply)

    @property
    def failure(self) -> UnavailableError | None:
        """Why the loop stopped by itself (an unexpected error inside it), or None: what new calls are refused with."""
        return self._failure

    @property
    def max_running_capacity(self) -> int:
        """The most running sequences this engine can hold: its batch slots, sized at construction."""
        return self._max_running_capacity

    @property
    def num_requests(self) -> int:
        """Requests submitted and not yet finished (queued as tasks, waiting or running)."""
        with self._lock:
            return self._num_pending + self._num_held

    def flush_prefix_cache(self, tenant: str | None = None) -> Future:
        """Drops cached prefixes (all, or one tenant's) between steps; the future holds the block count."""
        return self.call(lambda: self.scheduler.block_manager.flush_prefix_cache(tenant))

    def stats(self) -> EngineStats:
        """The snapshot the engine thread published last: after every step, and after every task before the task's
        caller hears back (a finished request's last output, a call's or a cancel's future)."""
        return self._stats

    @property
    def kv_storage(self) -> KVStorage:
        """The KV storage in force. Replaced only by `replace_kv_storage`; a storage's sizes never change."""
        return self.runner.kv_cache

    def replace_kv_storage(self, storage: KVStorage) -> Future[int]:
        """Swaps the KV storage between steps (a recalibrated one, of the same shape): the decode graphs are captured
        again over it and the prefix cache is emptied (its blocks hold the old storage's contents); the future holds
        the cached blocks dropped. Refused, changing nothing, while a request is in the engine (FailedPrecondition)
        or when the shapes differ (InvalidArgument)."""
        def swap() -> int:
            if self.scheduler.num_unfinished:
                raise FailedPreconditionError("requests are still in the engine; the KV storage was not changed")
            check_same_shape(self.runner.kv_cache, storage)
            self.runner.replace_kv_cache(storage)
            return self.scheduler.block_manager.flush_prefix_cache(None)
        return self.call(swap)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="arbi-engine", daemon=True)
        self._thread.start()

    def shutdown(self, error: ArbiError | None = None) -> None:
        """Ends every request still in the engine with `error` (UNAVAILABLE by default) and stops."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._tasks.put(_Shutdown(error or UnavailableError("the server is shutting down")))
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._grammar_gate.close()

    def fail(self, error: Exception) -> None:
        """From any thread: the loop fails with `error` once it takes its next task (a lost tensor-parallel
        rank): every request ends, `failure` is set and `on_failure` called, as on a defect of the loop."""
        self._tasks.put(_Fail(error))

    # -- the engine thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                idle = self.scheduler.num_unfinished == 0 and not self.pipeline.has_step_in_flight
                if not self._take_tasks(block=idle):
                    return
                if self.scheduler.num_unfinished or self.pipeline.has_step_in_flight:
                    self.step()
                self._run_after_step()
        except Exception as error:  # a defect in the loop itself: end everything loudly, never leave a stream hanging
            self._fail(error)
        finally:
            self.runner.close()  # the other tensor-parallel ranks, if any, stop with the loop

    def _fail(self, error: Exception) -> None:
        """Ends every request (INTERNAL), answers every queued task, and refuses new ones (UNAVAILABLE)."""
        log.exception("the engine loop failed; ending %d requests", len(self._sequences))
        with self._lock:
            self._closed = True
            self._failure = UnavailableError(
                f"the model's engine stopped after an internal error ({error!r}); reload the model"
            )
        ended = ArbiError(f"the engine failed while serving this request: {error!r}")
        self._abort_all(ended)
        while True:
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                break
            if isinstance(task, _Submit):
                task.sink(RequestOutput(task.request.request_id, error=ended))
            elif isinstance(task, _Cancel):
                task.future.set_result(False)
            elif isinstance(task, _Call):
                task.future.set_exception(self._failure)
        self._drop_after_step(self._failure)
        if self.on_failure is not None:
            self.on_failure(self._failure)

    def _take_tasks(self, block: bool) -> bool:
        """Applies queued tasks (waiting for one if `block`); False when asked to shut down.

        Publishes the state once after the tasks it took; none taken (most steps) leaves the state as the last step
        or task published it."""
        took_any = False
        while True:
            try:
                task = self._tasks.get(block=block)
            except queue.Empty:
                if took_any:
                    self._publish_state()
                return True
            block, took_any = False, True
            if isinstance(task, _Shutdown):
                self._abort_all(task.error)
                self._drop_after_step(UnavailableError("the model's engine is shutting down"))
                return False
            if isinstance(task, _Fail):
                raise task.error
            if isinstance(task, _Submit):
                with self._lock:  # before _add, which may end the request at once
                    self._num_pending -= 1
                    self._num_held += 1
                self._add(task)
            elif isinstance(task, _GrammarReady):
                self._admit_compiled(task.request_id)
            elif isinstance(task, _Cancel):
                cancelled = self._cancel(task.request_id)
                self._publish_state()
                task.future.set_result(cancelled)
            elif task.after_step and (self.scheduler.num_unfinished or self.pipeline.has_step_in_flight):
                self._after_step.append(task)
            else:
                self.pipeline.read_step_in_flight()  # a call sees every token read (and may swap the KV storage)
                self._run_call(task)

    def _run_after_step(self) -> None:
        calls, self._after_step = self._after_step, []
        for task in calls:
            self.pipeline.read_step_in_flight()
            self._run_call(task)

    def _drop_after_step(self, error: ArbiError) -> None:
        calls, self._after_step = self._after_step, []
        for task in calls:
            task.future.set_exception(error)

    def _add(self, task: _Submit) -> None:
        request = task.request
        sequence = Sequence(
            request=request,
            sink=task.sink,
            sampling_state=SamplingState(
                request.sampling, request.stopping, request.prompt_token_ids, self.outputs.eos_token_ids
            ),
            detokenizer=IncrementalDetokenizer(self.tokenizer, list(request.prompt_token_ids)),
            stop_matcher=StopStringMatcher(request.stopping.stop_strings),
        )
        self._sequences[request.request_id] = sequence
        self.observer.request_added(request.request_id, task.arrival_s, len(request.prompt_token_ids),
                                    request.scheduling.tenant)
        if request.sampling.output_constraint is None:
            self.scheduler.add(sequence)
            return
        try:
            self._grammar_gate.hold(sequence)
        except ArbiError as error:
            sequence.status = SequenceStatus.FINISHED  # it never reached the scheduler
            self._finish(sequence, RequestOutput(request.request_id, error=error))

    def _admit_compiled(self, request_id: str) -> None:
        taken = self._grammar_gate.take(request_id)
        if taken is None:
            return  # cancelled or ended while compiling
        sequence, error = taken
        if error is not None:
            sequence.status = SequenceStatus.FINISHED  # it never reached the scheduler
            self._finish(sequence, RequestOutput(request_id, error=error))
        else:
            self.scheduler.add(sequence)

    def _run_call(self, task: _Call) -> None:
        if not task.future.set_running_or_notify_cancel():
            return
        try:
            result = task.function()
        except Exception as error:  # handed to the caller through the future
            self._publish_state()
            task.future.set_exception(error)
        else:
            self._publish_state()
            task.future.set_result(result)

    def _cancel(self, request_id: str) -> bool:
        sequence = self._release(request_id)
        if sequence is None:
            return False
        self._end(sequence)
        output = RequestOutput(
            request_id=request_id,
            finish_reason=FinishReason.CANCELLED,
            prompt_token_count=sequence.num_prompt_tokens,
            output_token_count=sequence.num_output_tokens,
        )
        self.observer.request_finished(request_id, output)
        self._publish_state()
        sequence.sink(output)
        return True

    def step(self) -> None:
        """One turn of the loop: schedule and launch a step, read the one before it (`StepPipeline.step`)."""
        self.pipeline.step()
        self._publish_state()

    def _end(self, sequence: Sequence) -> None:
        """Takes a sequence out of the grammar gate or the scheduler (freeing its blocks and batch slot)."""
        if self._grammar_gate.release(sequence.request_id):
            sequence.status = SequenceStatus.FINISHED
        elif sequence.status is not SequenceStatus.FINISHED:
            self.scheduler.finish(sequence)

    def _finish(self, sequence: Sequence, output: RequestOutput) -> None:
        self._release(sequence.request_id)
        self._end(sequence)
        self.observer.request_finished(sequence.request_id, output)
        self._publish_state()  # before the sink: whoever hears of the end sees its blocks freed
        sequence.sink(output)

    def _abort_all(self, error: ArbiError) -> None:
        self.pipeline.drop_step_in_flight()
        for sequence in list(self._sequences.values()):
            output = RequestOutput(sequence.request_id, error=error)
            try:
                self._finish(sequence, output)
            except Exception:  # after a failed loop the engine's state may be what broke: the stream still ends
                log.exception("could not release request %s", sequence.request_id)
                sequence.sink(output)

    def _release(self, request_id: str) -> Sequence | None:
        """Forgets a request the engine holds (None when it holds none by that id)."""
        sequence = self._sequences.pop(request_id, None)
        if sequence is not None:
            with self._lock:
                self._num_held -= 1
        return sequence

    def _publish_state(self) -> None:
        """The waiting count submit checks (requests whose grammar compiles count as waiting), and the stats
        snapshot."""
        self._stats = engine_stats(self.scheduler)
        with self._lock:
            self._num_waiting = self._stats.num_waiting + len(self._grammar_gate)
