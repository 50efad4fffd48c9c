"""Runs requests through an engine from Python, without a server: submit them all, wait, and collect each
one's tokens and timings. Benchmarks and GPU tests use it; serving goes through the gRPC servicers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.request import FinishReason, GenerationRequest, RequestOutput
from arbi_grpc.errors import ArbiError


@dataclass
class CompletedRequest:
    """What one request produced, with monotonic timestamps of its submission, first token and end."""

    request_id: str
    submitted_s: float
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_logprobs: tuple[float | None, ...] | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    finish_reason: FinishReason | None = None
    error: ArbiError | None = None
    _done: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def time_to_first_token_s(self) -> float:
        if self.first_token_s is None:
            raise ValueError(f"request {self.request_id} produced no token")
        return self.first_token_s - self.submitted_s

    def receive(self, output: RequestOutput) -> None:
        """The engine's sink: called on the engine thread with each output of this request."""
        if output.tokens and self.first_token_s is None:
            self.first_token_s = time.monotonic()
        self.token_ids.extend(token.token_id for token in output.tokens)
        self.logprobs.extend(token.logprob for token in output.tokens)
        if output.prompt_logprobs is not None:
            self.prompt_logprobs = output.prompt_logprobs
        if output.finished:
            self.finished_s = time.monotonic()
            self.finish_reason = output.finish_reason
            self.error = output.error
            self._done.set()


def generate(engine: Engine, requests: Sequence[GenerationRequest], timeout_s: float = 600.0,
             arrival_offsets_s: Sequence[float] | None = None) -> list[CompletedRequest]:
    """Submits every request (at once, or each `arrival_offsets_s[i]` seconds after the call) and blocks until
    all have finished; results in request order.

    Raises the first request's error if any failed, TimeoutError if `timeout_s` passes first.
    """
    if arrival_offsets_s is not None and len(arrival_offsets_s) != len(requests):
        raise ValueError(f"{len(arrival_offsets_s)} arrival offsets for {len(requests)} requests")
    started = time.monotonic()
    completed = []
    for index, request in enumerate(requests):
        if arrival_offsets_s is not None:
            time.sleep(max(0.0, started + arrival_offsets_s[index] - time.monotonic()))
        result = CompletedRequest(request.request_id, submitted_s=time.monotonic())
        engine.submit(request, result.receive)
        completed.append(result)
    deadline = started + timeout_s
    for result in completed:
        if not result._done.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"request {result.request_id} did not finish within {timeout_s} s")
        if result.error is not None:
            raise result.error
    return completed
