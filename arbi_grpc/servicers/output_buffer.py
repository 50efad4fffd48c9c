"""The bounded hand-off of one request's outputs from the engine thread to an RPC's event loop.

The engine never waits on a client: its sink must return at once. So the buffer holds at most one pending
output per request; when the RPC has not taken it yet, the outputs of later engine steps are merged into
it (tokens and text appended, the finish reason and counts of the latest kept). A slow reader therefore
receives fewer, larger messages, nothing is dropped, and the memory a request can hold here is bounded by
its own output length. HTTP/2 flow control then holds the RPC's writes until the client reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from arbi_grpc.engine.request import RequestOutput


def merge_outputs(earlier: RequestOutput, later: RequestOutput) -> RequestOutput:
    """One output equivalent to `earlier` followed by `later`."""
    return replace(
        later,
        tokens=earlier.tokens + later.tokens,
        text=earlier.text + later.text,
        prompt_logprobs=earlier.prompt_logprobs if earlier.prompt_logprobs is not None
        else later.prompt_logprobs,
    )


class OutputBuffer:
    """At most one pending (merged) output; `on_ready` runs on the loop when one becomes pending."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_ready: Callable[[], None]) -> None:
        self._loop = loop
        self._on_ready = on_ready
        self._pending: RequestOutput | None = None

    def sink(self, output: RequestOutput) -> None:
        """The engine's sink (engine thread): hands the output to the loop, never blocks."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._put, output)

    def _put(self, output: RequestOutput) -> None:
        if self._pending is None:
            self._pending = output
            self._on_ready()
        else:
            self._pending = merge_outputs(self._pending, output)

    def take(self) -> RequestOutput | None:
        """The pending output (everything since the last take), or None."""
        output, self._pending = self._pending, None
        return output
