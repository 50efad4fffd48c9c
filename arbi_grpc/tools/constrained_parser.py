"""The output of a `required` or named tool choice: the tool-call JSON the output constraint allows (one
call object, or an array of them when parallel calls are allowed; `constraint_schema.py`). The calls are
released once the JSON value is complete; output that never completes one (cut by `max_tokens`) is text.
"""

from __future__ import annotations

from arbi_grpc.tools.call_json import call_of, decode_prefix
from arbi_grpc.tools.events import ParseEvent, TextPiece


class ConstrainedToolCallParser:
    def __init__(self) -> None:
        self._buffer = ""
        self._done = False

    def feed(self, text: str) -> list[ParseEvent]:
        if self._done:
            return [TextPiece(text)] if text else []
        self._buffer += text
        decoded = decode_prefix(self._buffer)
        if decoded is None:
            return []
        value, end = decoded
        raw, rest = self._buffer[:end], self._buffer[end:]
        self._buffer, self._done = "", True
        calls = [call_of(item, raw) for item in (value if isinstance(value, list) else [value])]
        if not calls or any(call is None for call in calls):
            return [TextPiece(raw + rest)]
        return [*calls, *([TextPiece(rest)] if rest.strip() else [])]

    def finish(self) -> list[ParseEvent]:
        rest, self._buffer = self._buffer, ""
        return [TextPiece(rest)] if rest else []
