"""What a tool-call parser produces from model output: plain text, and complete tool calls.

A call carries its raw text, so a call that fails validation can go back to the client as the text the
model wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TextPiece:
    text: str


@dataclass(frozen=True)
class ParsedCall:
    """A complete call as the model wrote it; `arguments` is the decoded JSON value (any type)."""

    name: str
    arguments: Any
    raw: str


ParseEvent = TextPiece | ParsedCall
