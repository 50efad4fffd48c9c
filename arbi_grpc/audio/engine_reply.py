"""The reply stage: the conversation so far in, the assistant's text out as it is generated.

`EngineReplies` submits one chat request per reply to the resident model's engine at interactive
priority, through the same admit/submit/cancel interface as GenerateService. `ReplyStream.cancel` tells
the engine to stop at once (its KV blocks are freed at the next step); it is also called when the
stream's reader goes away.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.input_processor import ChatPrompt
from arbi_grpc.engine.request import Priority, SchedulingParams
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.model_host import ModelHost
from arbi_grpc.servicers.output_buffer import OutputBuffer


@dataclass(frozen=True)
class ReplyUsage:
    prompt_token_count: int
    output_token_count: int
    cached_prompt_token_count: int


@dataclass(frozen=True)
class ReplyDelta:
    """New reply text; `usage` is set on the last delta."""

    text: str
    usage: ReplyUsage | None = None


class ReplyStream:
    """One engine request: iterate `deltas()` for the text; `cancel()` stops it (idempotent)."""

    def __init__(self, engine: Engine, request_id: str, buffer: OutputBuffer, ready: asyncio.Event) -> None:
        self.request_id = request_id
        self._engine = engine
        self._buffer = buffer
        self._ready = ready
        self._finished = False

    async def deltas(self) -> AsyncIterator[ReplyDelta]:
        try:
            while not self._finished:
                await self._ready.wait()
                self._ready.clear()
                output = self._buffer.take()
                if output is None:
                    continue
                self._finished = output.finished
                if output.error is not None:
                    raise output.error
                usage = None
                if output.finish_reason is not None:
                    usage = ReplyUsage(output.prompt_token_count, output.output_token_count,
                                       output.cached_prompt_token_count)
                yield ReplyDelta(output.text, usage)
        finally:
            self.cancel()

    def cancel(self) -> None:
        if not self._finished:
            self._finished = True
            self._engine.cancel(self.request_id)


class EngineReplies:
    """Starts replies on the resident model; raises ArbiError (UNAVAILABLE, NOT_FOUND, INVALID_ARGUMENT)."""

    def __init__(self, host: ModelHost) -> None:
        self._host = host

    def start(self, model: str, messages: Sequence[Mapping[str, str]], sampling: SamplingParams,
              stopping: StoppingParams, tenant: str = "") -> ReplyStream:
        served = self._host.admit(model)
        ready = asyncio.Event()
        buffer = OutputBuffer(asyncio.get_running_loop(), ready.set)
        request = served.inputs.build(
            uuid.uuid4().hex, ChatPrompt(tuple(messages)), sampling, stopping,
            SchedulingParams(priority=Priority.INTERACTIVE, tenant=tenant),
        )
        served.engine.submit(request, buffer.sink)
        return ReplyStream(served.engine, request.request_id, buffer, ready)
