"""The prompt of a chat with tools: the model's own chat template when it renders tools (it reads
`tools`), else the generic tool prompt (`generic_prompt.py`) through the template. With tool choice
`none` the tools stay out of the prompt; earlier calls and results are rendered either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from arbi_grpc.text.chat_template import ChatTemplate
from arbi_grpc.tools.definitions import ToolChoiceMode, ToolSet
from arbi_grpc.tools.families import ToolCallFamily, family_of_template
from arbi_grpc.tools.generic_prompt import generic_messages


def tool_call_family(template: ChatTemplate) -> ToolCallFamily:
    """The parser family of the model's output: the template's own, or Hermes for the generic prompt."""
    return family_of_template(template.source) if template.supports_tools else ToolCallFamily.HERMES


def render_with_tools(template: ChatTemplate, messages: Sequence[Mapping[str, Any]], tool_set: ToolSet) -> str:
    tools = tool_set.tools if tool_set.choice.mode is not ToolChoiceMode.NONE else ()
    if template.supports_tools:
        return template.render(messages, tools=[tool.openai_json() for tool in tools] or None)
    return template.render(generic_messages(messages, tools))
