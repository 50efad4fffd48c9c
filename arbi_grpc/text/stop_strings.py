"""Finds stop strings in streamed text, holding back any tail that could still grow into one.

Generation stops at the first point where a stop string is complete (the earliest end; at equal ends the
longest string wins); the text before that stop string is the final output and the stop string itself is
never emitted. The result does not depend on how the text was split into pushes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from arbi_grpc.errors import InvalidArgumentError

STOP_STRINGS_FIELD = "stopping.stop_strings"


@dataclass(frozen=True)
class StopCheck:
    """Outcome of one push: text safe to send now, and whether a stop string just completed."""

    emit: str
    stopped: bool


class StopStringMatcher:
    """Per-request streaming matcher; after a stop, further pushes emit nothing and report stopped."""

    def __init__(self, stop_strings: Sequence[str]) -> None:
        if any(not stop for stop in stop_strings):
            raise InvalidArgumentError(STOP_STRINGS_FIELD, "stop strings must not be empty")
        self._stop_strings = tuple(stop_strings)
        self._held = ""
        self._stopped = False

    def push(self, text: str) -> StopCheck:
        """Feed newly decoded text; returns what may be sent to the client now."""
        if self._stopped:
            return StopCheck(emit="", stopped=True)
        buffer = self._held + text
        match_start = self._first_completed_match(buffer)
        if match_start is not None:
            self._held = ""
            self._stopped = True
            return StopCheck(emit=buffer[:match_start], stopped=True)
        held_length = self._longest_partial_suffix(buffer)
        self._held = buffer[len(buffer) - held_length :]
        return StopCheck(emit=buffer[: len(buffer) - held_length], stopped=False)

    def flush(self) -> str:
        """Release held text at the end of generation (nothing after a stop)."""
        held, self._held = self._held, ""
        return held

    def _first_completed_match(self, buffer: str) -> int | None:
        """Start index of the stop string that completes first in `buffer` (held text never holds one)."""
        best_end: int | None = None
        best_start = 0
        for stop in self._stop_strings:
            start = buffer.find(stop)
            if start < 0:
                continue
            end = start + len(stop)
            if best_end is None or end < best_end or (end == best_end and start < best_start):
                best_end, best_start = end, start
        return None if best_end is None else best_start

    def _longest_partial_suffix(self, buffer: str) -> int:
        """Length of the longest suffix of `buffer` that is a proper prefix of some stop string."""
        longest = 0
        for stop in self._stop_strings:
            for length in range(min(len(stop) - 1, len(buffer)), longest, -1):
                if buffer.endswith(stop[:length]):
                    longest = length
                    break
        return longest
