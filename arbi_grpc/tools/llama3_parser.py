"""Llama 3 JSON tool calls: an answer that starts (after an optional `<|python_tag|>`) with a JSON object
`{"name": ..., "parameters": {...}}` is a call; several calls are separated by `;`. Any other answer is
plain text.

Streaming: the first non-space characters decide. Plain text is then released as it comes; in a call
answer each call is released once the next `;` or the end of output follows its JSON. An answer that
starts like a call and turns out not to be one is released as text at the end.
"""

from __future__ import annotations

from arbi_grpc.tools.call_json import call_of, decode_prefix
from arbi_grpc.tools.events import ParseEvent, TextPiece
from arbi_grpc.tools.hermes_parser import held_prefix_length

PYTHON_TAG = "<|python_tag|>"


class Llama3JsonToolCallParser:
    def __init__(self) -> None:
        self._buffer = ""
        self._mode: str | None = None  # None (undecided), "text" or "calls"

    def feed(self, text: str) -> list[ParseEvent]:
        self._buffer += text
        if self._mode is None:
            self._decide()
        events = self._release_calls(final=False) if self._mode == "calls" else []
        if self._mode == "text" and self._buffer:
            events.append(TextPiece(self._buffer))
            self._buffer = ""
        return events

    def finish(self) -> list[ParseEvent]:
        events = self._release_calls(final=True) if self._mode == "calls" else []
        rest, self._buffer = self._buffer, ""
        return events + [TextPiece(rest)] if rest and (rest.strip() or not events) else events

    def _decide(self) -> None:
        stripped = self._buffer.lstrip()
        if not stripped:
            return
        if stripped.startswith(PYTHON_TAG) or stripped.startswith("{"):
            self._mode = "calls"
        elif held_prefix_length(stripped, PYTHON_TAG) == len(stripped):
            return
        else:
            self._mode = "text"

    def _release_calls(self, final: bool) -> list[ParseEvent]:
        """Calls whose JSON is complete and followed by `;` (or by the end, when final). From the first part
        that is not a call on, the answer is text."""
        text = self._buffer
        position = text.index(PYTHON_TAG) + len(PYTHON_TAG) if text.lstrip().startswith(PYTHON_TAG) else 0
        events: list[ParseEvent] = []
        consumed = 0
        while True:
            decoded = decode_prefix(text, position)
            if decoded is None:
                break
            value, end = decoded
            rest = text[end:].lstrip()
            if rest.startswith(";"):
                after = end + text[end:].index(";") + 1
            elif not rest and final:
                after = len(text)
            else:
                break
            call = call_of(value, text[consumed:after])
            if call is None:
                self._mode = "text"
                break
            events.append(call)
            consumed = position = after
        self._buffer = text[consumed:]
        if final and self._buffer.strip():
            self._mode = "text"
        return events
