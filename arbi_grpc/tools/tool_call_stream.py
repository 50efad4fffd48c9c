"""One request's tool-call reading: model text in, plain text and validated calls out, each call with its
index and an id (`call_` + 24 hex digits).

A call reaches the client only whole and validated (`validation.py`): its first delta holds id, name and
the complete arguments. Text around calls streams as it comes; a call that fails validation is returned
as the text the model wrote, and so is every call after the first when parallel calls are off. The finish reason becomes `tool_calls` when at least one call was returned
and the model ended by itself (EOS, a stop token or a stop string).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from arbi_grpc.tools.definitions import ToolSet
from arbi_grpc.tools.events import ParseEvent, ParsedCall
from arbi_grpc.tools.families import ToolCallFamily, parser_for
from arbi_grpc.tools.validation import validate_call


@dataclass(frozen=True)
class ToolCallOut:
    index: int
    call_id: str
    name: str
    arguments_json: str


@dataclass(frozen=True)
class ToolStreamStep:
    """What one piece of model text turned into."""

    text: str
    calls: tuple[ToolCallOut, ...]


class ToolCallStream:
    def __init__(self, tool_set: ToolSet, family: ToolCallFamily) -> None:
        self._tool_set = tool_set
        self._parser = parser_for(family, tool_set.constrained)
        self.call_count = 0

    def feed(self, text: str) -> ToolStreamStep:
        return self._step(self._parser.feed(text) if text else [])

    def finish(self) -> ToolStreamStep:
        return self._step(self._parser.finish())

    def _step(self, events: list[ParseEvent]) -> ToolStreamStep:
        text: list[str] = []
        calls: list[ToolCallOut] = []
        for event in events:
            valid = validate_call(event, self._tool_set) if isinstance(event, ParsedCall) else None
            if valid is not None and self.call_count and not self._tool_set.parallel_calls:
                valid = None  # one call per turn: later ones stay text
            if valid is None:
                text.append(event.raw if isinstance(event, ParsedCall) else event.text)
                continue
            calls.append(ToolCallOut(self.call_count, f"call_{uuid.uuid4().hex[:24]}", valid.name,
                                     valid.arguments_json))
            self.call_count += 1
        return ToolStreamStep("".join(text), tuple(calls))
