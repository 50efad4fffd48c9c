"""SIGTERM and SIGINT for a serving process: the first asks for a graceful shutdown (a drain), a second one
exits at once.

`ShutdownSignals` is installed on the main thread; `wait_for_stop` blocks until a first signal arrives or
`failed()` reports a fault the process cannot serve through (the engine thread died), so the caller drains
and exits 0 on a signal, or exits non-zero on a fault and lets an orchestrator restart it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# The exit status of a second signal, as a shell reports a process killed by that signal.
_SIGNALLED_EXIT_BASE = 128
_POLL_S = 0.2


class ShutdownSignals:
    """Counts stop signals: the first sets `requested`, the second ends the process with 128 + its number."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.signal_name = ""

    def install(self) -> ShutdownSignals:
        for number in STOP_SIGNALS:
            signal.signal(number, self._on_signal)
        return self

    def _on_signal(self, number: int, _frame: FrameType | None) -> None:
        name = signal.Signals(number).name
        if self.requested.is_set():
            log.warning("%s during the drain: exiting now, requests in flight are dropped", name)
            logging.shutdown()
            os._exit(_SIGNALLED_EXIT_BASE + number)
        self.signal_name = name
        self.requested.set()

    def wait_for_stop(self, failed: Callable[[], str | None]) -> str | None:
        """Blocks until a stop signal (returns None) or until `failed()` returns a reason (returned)."""
        while not self.requested.wait(_POLL_S):
            reason = failed()
            if reason is not None:
                return reason
        return None
