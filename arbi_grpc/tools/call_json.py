"""The JSON object of one tool call, `{"name": ..., "arguments": {...}}`, as the parsers of every family
read it (`parameters` is accepted for `arguments`, as Llama 3 writes it; arguments sent as a JSON string
are decoded)."""

from __future__ import annotations

import json
from typing import Any

from arbi_grpc.tools.events import ParsedCall

_DECODER = json.JSONDecoder()


def call_of(value: Any, raw: str) -> ParsedCall | None:
    """The call a decoded JSON value describes, or None when it is not a call object."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    keys = [key for key in ("arguments", "parameters") if key in value]
    if len(keys) != 1 or set(value) - {"name", keys[0]}:
        return None
    arguments = value[keys[0]]
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    return ParsedCall(value["name"], arguments, raw)


def decode_prefix(text: str, start: int = 0) -> tuple[Any, int] | None:
    """The JSON value at `text[start:]` (leading whitespace skipped) and the index after it, or None."""
    while start < len(text) and text[start].isspace():
        start += 1
    try:
        return _DECODER.raw_decode(text, start)
    except json.JSONDecodeError:
        return None
