"""The prompt of a chat with tools: a template that reads `tools` renders them itself (with the history's
tool calls and results in HF's form) and selects its family's parser; another template gets the generic
tool prompt; tool choice none keeps the tools out."""

from __future__ import annotations

from pathlib import Path

from arbi_grpc.tools.definitions import ToolChoice, ToolChoiceMode, ToolDefinition, ToolSet
from arbi_grpc.tools.families import ToolCallFamily
from arbi_grpc.tools.tool_prompt import render_with_tools, tool_call_family
from tests.unit.text.conftest import CHATML_TEMPLATE
from tests.unit.text.test_chat_template import template_for

# A Hermes-style template in the manner of Qwen's: tools in the system turn, calls as <tool_call> lines.
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>{% for tool in tools %}{{ tool['function']['name'] }};"
    "{% endfor %}</tools><|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "{% for call in message.get('tool_calls', []) %}<tool_call>{{ call['function']['name'] }} "
    "{{ call['function']['arguments'] | tojson }}</tool_call>{% endfor %}"
    "{% if message.get('tool_call_id') %} (for {{ message['tool_call_id'] }}){% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TIME = ToolDefinition("get_time", "The time in a zone.", {"type": "object", "properties": {"zone": {"type": "string"}}})
HISTORY = [
    {"role": "user", "content": "Time in Oslo?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": {"zone": "CET"}}}]},
    {"role": "tool", "content": "12:00", "tool_call_id": "call_1"},
]


def test_template_with_tools_renders_them_itself(tmp_path: Path) -> None:
    template = template_for(tmp_path, TOOLS_TEMPLATE)
    assert template.supports_tools and tool_call_family(template) is ToolCallFamily.HERMES
    prompt = render_with_tools(template, HISTORY, ToolSet((TIME,)))
    assert prompt.startswith("<|im_start|>system\n<tools>get_time;</tools>")
    assert '<tool_call>get_time {"zone": "CET"}</tool_call>' in prompt and "12:00 (for call_1)" in prompt
    assert "<tools>" not in render_with_tools(template, HISTORY, ToolSet((TIME,), ToolChoice(ToolChoiceMode.NONE)))


def test_llama3_template_selects_the_llama3_parser(tmp_path: Path) -> None:
    template = template_for(tmp_path, "{% if tools %}<|python_tag|>{% endif %}" + CHATML_TEMPLATE)
    assert tool_call_family(template) is ToolCallFamily.LLAMA3_JSON


def test_other_templates_get_the_generic_tool_prompt(tmp_path: Path) -> None:
    template = template_for(tmp_path, CHATML_TEMPLATE)
    assert not template.supports_tools and tool_call_family(template) is ToolCallFamily.HERMES
    prompt = render_with_tools(template, HISTORY, ToolSet((TIME,)))
    assert prompt.startswith("<|im_start|>system\nYou can call the tools below.")
    assert '<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>' in prompt
    assert "<|im_start|>user\n<tool_response>\n12:00\n</tool_response>" in prompt
