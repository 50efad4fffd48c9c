"""The gateway's graceful shutdown: on SIGTERM or SIGINT new HTTP requests are answered 503 (OpenAI error
object, code "draining") while those in flight, streams included, finish within the drain timeout; then
uvicorn shuts down and the process exits 0. A second signal exits at once with 128 + its number.

`DrainGate` is the ASGI middleware that counts requests in flight and refuses new ones while draining;
`DrainingServer` is uvicorn's server with that first signal turned into a drain.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from types import FrameType

import uvicorn

log = logging.getLogger(__name__)

_SIGNALLED_EXIT_BASE = 128
_REFUSAL = json.dumps({"error": {
    "message": "the gateway is draining (shutting down) and accepts no new requests; retry on another replica",
    "type": "server_error", "param": None, "code": "draining",
}}).encode()


class DrainGate:
    """ASGI middleware: counts HTTP requests in flight; while `draining`, answers new ones 503."""

    def __init__(self, app) -> None:
        self.app = app
        self.draining = False
        self.in_flight = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.draining:
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"application/json"), (b"connection", b"close"), (b"retry-after", b"1")]})
            await send({"type": "http.response.body", "body": _REFUSAL})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


class DrainingServer(uvicorn.Server):
    """A uvicorn server whose first stop signal drains `gate` for up to `drain_timeout_s` before exiting."""

    def __init__(self, config: uvicorn.Config, gate: DrainGate, drain_timeout_s: float) -> None:
        super().__init__(config)
        self._gate = gate
        self._drain_timeout_s = drain_timeout_s
        self._drain_deadline: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._drain_deadline is not None:
            log.warning("%s during the drain: exiting now", signal.Signals(sig).name)
            os._exit(_SIGNALLED_EXIT_BASE + sig)
        log.info("%s: draining (up to %.0f s, %d requests in flight); new requests get 503",
                 signal.Signals(sig).name, self._drain_timeout_s, self._gate.in_flight)
        self._gate.draining = True
        self._drain_deadline = time.monotonic() + self._drain_timeout_s

    async def on_tick(self, counter: int) -> bool:
        if self._drain_deadline is not None and (self._gate.in_flight == 0
                                                 or time.monotonic() >= self._drain_deadline):
            log.info("drained (%d requests still in flight)", self._gate.in_flight)
            self.should_exit = True
        return await super().on_tick(counter)
