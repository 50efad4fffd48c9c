"""The ASGI response of a stream (server-sent events or newline-delimited JSON): sends each chunk as it
is produced and, when the client disconnects, cancels the producer at once, so its `finally` cancels the
upstream gRPC calls even while no chunk is due (a request still waiting in the server's queue).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.types import Receive, Scope, Send


class StreamResponse:
    """Streams `chunks` with `media_type`; the producer is cancelled when the client goes away."""

    def __init__(self, chunks: AsyncIterator[bytes], media_type: str,
                 headers: dict[str, str] | None = None) -> None:
        self._chunks = chunks
        self._headers = [(b"content-type", media_type.encode()), (b"cache-control", b"no-cache"),
                         (b"x-accel-buffering", b"no")]
        self._headers += [(name.encode(), value.encode()) for name, value in (headers or {}).items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self._headers})
        producer = asyncio.create_task(self._produce(send))
        watcher = asyncio.create_task(wait_for_disconnect(receive))
        try:
            await asyncio.wait({producer, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (producer, watcher):
                task.cancel()
            await asyncio.gather(producer, watcher, return_exceptions=True)
            await self._chunks.aclose()
        failure = None if producer.cancelled() else producer.exception()
        if failure is not None and not isinstance(failure, OSError):  # OSError: the client went away
            raise failure

    async def _produce(self, send: Send) -> None:
        async for chunk in self._chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def wait_for_disconnect(receive: Receive) -> None:
    """Returns when the client has gone away (the request body must have been read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass
