"""Hermes tool calls, as Qwen2/Qwen3 (and arbi-serve's generic tool prompt) write them:
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number of them, with text around.

Streaming: text outside calls is released as soon as it cannot be the start of `<tool_call>`; a call is
released when its closing tag arrives (or at the end of output when the closing tag never came and the
JSON is complete). A tagged span that is not a call object is released as text.
"""

from __future__ import annotations

from arbi_grpc.tools.call_json import call_of, decode_prefix
from arbi_grpc.tools.events import ParseEvent, TextPiece

OPEN_TAG, CLOSE_TAG = "<tool_call>", "</tool_call>"


def held_prefix_length(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for length in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:length]):
            return length
    return 0


class HermesToolCallParser:
    def __init__(self) -> None:
        self._buffer = ""
        self._in_call = False

    def feed(self, text: str) -> list[ParseEvent]:
        self._buffer += text
        events: list[ParseEvent] = []
        while True:
            if self._in_call:
                end = self._buffer.find(CLOSE_TAG)
                if end < 0:
                    return events
                body, self._buffer = self._buffer[:end], self._buffer[end + len(CLOSE_TAG):]
                self._in_call = False
                events.append(self._call_or_text(body, OPEN_TAG + body + CLOSE_TAG))
                continue
            start = self._buffer.find(OPEN_TAG)
            if start < 0:
                keep = held_prefix_length(self._buffer, OPEN_TAG)
                released, self._buffer = self._buffer[:len(self._buffer) - keep], self._buffer[len(self._buffer) - keep:]
                if released:
                    events.append(TextPiece(released))
                return events
            if start:
                events.append(TextPiece(self._buffer[:start]))
            self._buffer = self._buffer[start + len(OPEN_TAG):]
            self._in_call = True

    def finish(self) -> list[ParseEvent]:
        rest, self._buffer = self._buffer, ""
        if not self._in_call:
            return [TextPiece(rest)] if rest else []
        self._in_call = False
        return [self._call_or_text(rest, OPEN_TAG + rest)]

    @staticmethod
    def _call_or_text(body: str, raw: str) -> ParseEvent:
        decoded = decode_prefix(body)
        if decoded is not None and not body[decoded[1]:].strip():
            call = call_of(decoded[0], raw)
            if call is not None:
                return call
        return TextPiece(raw)
