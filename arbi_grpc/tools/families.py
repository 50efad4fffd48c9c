"""Which parser reads a model's tool calls, from its chat template.

- Hermes (`<tool_call>` in the template: Qwen2, Qwen2.5, Qwen3, Hermes-style templates) and every model
  served with the generic tool prompt (`generic_prompt.py`, which asks for the same tags).
- Llama 3 JSON (`<|python_tag|>` or `ipython` in the template: Llama 3.1 to 3.3).
- Output under a `required` or named choice is read by the constrained parser, whatever the family.
"""

from __future__ import annotations

import enum
from typing import Protocol

from arbi_grpc.tools.constrained_parser import ConstrainedToolCallParser
from arbi_grpc.tools.events import ParseEvent
from arbi_grpc.tools.hermes_parser import HermesToolCallParser
from arbi_grpc.tools.llama3_parser import Llama3JsonToolCallParser


class ToolCallParser(Protocol):
    def feed(self, text: str) -> list[ParseEvent]: ...

    def finish(self) -> list[ParseEvent]: ...


class ToolCallFamily(enum.Enum):
    HERMES = "hermes"
    LLAMA3_JSON = "llama3_json"


def family_of_template(template_source: str | None) -> ToolCallFamily:
    if template_source and ("<|python_tag|>" in template_source or "ipython" in template_source):
        return ToolCallFamily.LLAMA3_JSON
    return ToolCallFamily.HERMES


def parser_for(family: ToolCallFamily, constrained: bool) -> ToolCallParser:
    if constrained:
        return ConstrainedToolCallParser()
    if family is ToolCallFamily.LLAMA3_JSON:
        return Llama3JsonToolCallParser()
    return HermesToolCallParser()
