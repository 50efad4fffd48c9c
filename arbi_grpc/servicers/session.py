"""One Session stream: many generations over one bidirectional RPC, each under a client-chosen id.

A reader task takes client messages (start, cancel); the RPC's generator writes server messages. Every
live generation has an `OutputBuffer` (at most one pending, merged output); when one turns non-empty its
id goes on the event queue, which therefore holds each live id at most once. Refusals of a start are
queued too, but only while one of `max_generations` refusal slots is free: otherwise the reader waits,
stops reading, and HTTP/2 flow control holds the client. So a session buffers at most
`max_generations` generations' pending outputs plus `max_generations` refusals, whatever the client does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace

import grpc

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.request import GenerationRequest, RequestOutput
from arbi_grpc.engine.sequence import OutputSink
from arbi_grpc.errors import ArbiError, InvalidArgumentError, ResourceExhaustedError
from arbi_grpc.server_config import MAX_GENERATION_ID_CHARS
from arbi_grpc.servicers.generate_conversion import response_from_output
from arbi_grpc.servicers.output_buffer import OutputBuffer
from arbi_grpc.servicers.status import abort_with, status_of
from arbi_grpc.servicers.tool_conversion import ResponseShaper

log = logging.getLogger(__name__)

StartGeneration = Callable[[pb.GenerateRequest, OutputSink], tuple[Engine, GenerationRequest, ResponseShaper]]


@dataclass(frozen=True)
class _Live:
    engine: Engine
    request: GenerationRequest
    buffer: OutputBuffer
    shape: ResponseShaper


@dataclass(frozen=True)
class _ClientDone:
    """The client closed its side (or its stream broke)."""


@dataclass(frozen=True)
class _StreamError:
    """A client message the stream cannot go on after."""

    error: ArbiError


class SessionStream:
    """The state of one Session RPC."""

    def __init__(self, start: StartGeneration, max_generations: int) -> None:
        self._start_generation = start
        self._max_generations = max_generations
        self._live: dict[str, _Live] = {}
        self._events: asyncio.Queue[str | pb.SessionResponse | _ClientDone | _StreamError] = asyncio.Queue()
        self._refusal_slots = asyncio.Semaphore(max_generations)

    async def run(self, requests: AsyncIterator[pb.SessionRequest],
                  context: grpc.aio.ServicerContext) -> AsyncIterator[pb.SessionResponse]:
        """The server's side of the stream; ends once the client is done and no generation is live."""
        reader = asyncio.create_task(self._read(requests))
        client_done = False
        try:
            while not (client_done and not self._live):
                event = await self._events.get()
                if isinstance(event, _ClientDone):
                    client_done = True
                elif isinstance(event, _StreamError):
                    await abort_with(context, event.error)
                elif isinstance(event, pb.SessionResponse):
                    yield event
                    self._refusal_slots.release()
                else:
                    for response in self._responses_of(event):
                        yield response
        finally:
            reader.cancel()
            for live in self._live.values():
                live.engine.cancel(live.request.request_id)

    def _responses_of(self, generation_id: str) -> Iterator[pb.SessionResponse]:
        """The messages for the pending output of one generation; forgets the generation at its end."""
        live = self._live[generation_id]
        output = live.buffer.take()
        if output is None:
            return
        if output.finished:
            del self._live[generation_id]
        if output.error is None:
            yield self._output_response(generation_id, output, live)
            return
        if output.tokens or output.text:
            yield self._output_response(generation_id, replace(output, error=None), live)
        yield pb.SessionResponse(generation_id=generation_id, error=status_of(output.error))

    @staticmethod
    def _output_response(generation_id: str, output: RequestOutput, live: _Live) -> pb.SessionResponse:
        return pb.SessionResponse(
            generation_id=generation_id,
            output=live.shape(response_from_output(output, live.request.prompt_token_ids)),
        )

    async def _read(self, requests: AsyncIterator[pb.SessionRequest]) -> None:
        try:
            async for message in requests:
                action = message.WhichOneof("action")
                if action == "start":
                    await self._start(message.start)
                elif action == "cancel":
                    self._cancel(message.cancel.generation_id)
                else:
                    self._events.put_nowait(_StreamError(
                        InvalidArgumentError("action", "each SessionRequest sets start or cancel")))
                    return
        except Exception:  # the RPC is over; the writer side ends it
            log.debug("session stream reader stopped", exc_info=True)
        finally:
            self._events.put_nowait(_ClientDone())

    async def _start(self, start: pb.StartGeneration) -> None:
        generation_id = start.generation_id
        try:
            self._check_new_id(generation_id)
            loop = asyncio.get_running_loop()
            buffer = OutputBuffer(loop, lambda: self._events.put_nowait(generation_id))
            engine, request, shape = self._start_generation(start.request, buffer.sink)
        except ArbiError as error:
            await self._refusal_slots.acquire()
            self._events.put_nowait(pb.SessionResponse(generation_id=generation_id, error=status_of(error)))
            return
        self._live[generation_id] = _Live(engine, request, buffer, shape)

    def _check_new_id(self, generation_id: str) -> None:
        if not 0 < len(generation_id) <= MAX_GENERATION_ID_CHARS:
            raise InvalidArgumentError(
                "start.generation_id", f"must have 1 to {MAX_GENERATION_ID_CHARS} characters"
            )
        if generation_id in self._live:
            raise InvalidArgumentError(
                "start.generation_id", f"generation {generation_id!r} is still live in this session"
            )
        if len(self._live) >= self._max_generations:
            raise ResourceExhaustedError(
                f"this session already holds {self._max_generations} live generations; wait for one to "
                "end or open another session"
            )

    def _cancel(self, generation_id: str) -> None:
        live = self._live.get(generation_id)
        if live is not None:
            live.engine.cancel(live.request.request_id)
