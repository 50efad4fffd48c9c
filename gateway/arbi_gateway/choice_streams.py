"""The upstream Generate calls of one OpenAI request, one per choice, read as one interleaved stream.

`open` waits for every call's first message, so a request the server refuses fails before the gateway
answers (with the right HTTP status); `cancel` ends every call still running, which makes the server free
their KV cache blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
from arbi_client.arbi.v1 import generate_service_pb2 as pb

from arbi_gateway.upstream import RpcKind, Upstream

GENERATE_METHOD = "/arbi.v1.GenerateService/Generate"


@dataclass(frozen=True)
class ChoiceResponse:
    """One upstream message of choice `index`."""

    index: int
    response: pb.GenerateResponse


class ChoiceStreams:
    """One Generate call per request; use `open`, then `responses`, and always `cancel` at the end."""

    def __init__(self, upstream: Upstream, requests: list[pb.GenerateRequest],
                 metadata: tuple[tuple[str, str], ...]) -> None:
        self._calls = [
            upstream.method(GENERATE_METHOD, RpcKind.UNARY_STREAM, pb.GenerateRequest.SerializeToString,
                            pb.GenerateResponse.FromString)(request, metadata=metadata)
            for request in requests
        ]
        self._firsts: list[pb.GenerateResponse] = []

    async def open(self) -> None:
        """Waits for each call's first message; raises grpc.RpcError after cancelling every call."""
        try:
            self._firsts = list(await asyncio.gather(*(call.read() for call in self._calls)))
        except BaseException:
            self.cancel()
            raise

    async def responses(self) -> AsyncIterator[ChoiceResponse]:
        """Every message of every call as it arrives; raises grpc.RpcError when a call fails."""
        if len(self._calls) == 1:
            call, response = self._calls[0], self._firsts[0]
            while response is not grpc.aio.EOF:
                yield ChoiceResponse(0, response)
                response = await call.read()
            return
        queue: asyncio.Queue[ChoiceResponse | int | grpc.RpcError] = asyncio.Queue()
        pumps = [asyncio.create_task(self._pump(index, queue)) for index in range(len(self._calls))]
        try:
            running = len(pumps)
            while running:
                item = await queue.get()
                if isinstance(item, ChoiceResponse):
                    yield item
                elif isinstance(item, int):
                    running -= 1
                else:
                    raise item
        finally:
            for pump in pumps:
                pump.cancel()

    async def _pump(self, index: int, queue: asyncio.Queue) -> None:
        call, response = self._calls[index], self._firsts[index]
        try:
            while response is not grpc.aio.EOF:
                queue.put_nowait(ChoiceResponse(index, response))
                response = await call.read()
        except grpc.RpcError as error:
            queue.put_nowait(error)
            return
        queue.put_nowait(index)

    def cancel(self) -> None:
        """Cancels every call that has not finished (a no-op for finished ones)."""
        for call in self._calls:
            call.cancel()
