"""The generic tool prompt, for models whose chat template does not render tools (SmolLM2 among them).

The tools go into the system message (appended to the first one, or a new first message):

    You can call the tools below. Each tool's definition is one JSON line in <tools></tools>:
    <tools>
    {"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}
    </tools>
    To call tools, answer with one line per call and nothing else:
    <tool_call>{"name": "<tool name>", "arguments": {<arguments as JSON>}}</tool_call>
    When no tool is needed, answer normally.

Earlier turns are rewritten in the same format: an assistant message's tool calls become `<tool_call>`
lines after its content, and a tool result becomes a user message
`<tool_response>\n{content}\n</tool_response>` (results answer the calls in their order), so any template
renders them.
The output is read by the Hermes parser (`hermes_parser.py`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from arbi_grpc.tools.definitions import ToolDefinition
from arbi_grpc.tools.hermes_parser import CLOSE_TAG, OPEN_TAG


def tools_system_text(tools: Sequence[ToolDefinition]) -> str:
    lines = "\n".join(json.dumps(tool.openai_json(), ensure_ascii=False) for tool in tools)
    return (
        "You can call the tools below. Each tool's definition is one JSON line in <tools></tools>:\n"
        f"<tools>\n{lines}\n</tools>\n"
        "To call tools, answer with one line per call and nothing else:\n"
        f'{OPEN_TAG}{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}{CLOSE_TAG}\n'
        "When no tool is needed, answer normally."
    )


def call_line(name: str, arguments: Any) -> str:
    return f"{OPEN_TAG}{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}{CLOSE_TAG}"


def generic_messages(messages: Sequence[Mapping[str, Any]],
                     tools: Sequence[ToolDefinition]) -> list[dict[str, str]]:
    """Plain {"role", "content"} messages carrying the tools (when any) and the earlier calls and results."""
    rewritten: list[dict[str, str]] = []
    for message in messages:
        content = message.get("content") or ""
        if message["role"] == "tool":
            rewritten.append({"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"})
            continue
        calls = [call_line(call["function"]["name"], call["function"]["arguments"])
                 for call in message.get("tool_calls") or ()]
        rewritten.append({"role": message["role"], "content": "\n".join(filter(None, [content, *calls]))})
    if tools:
        system = tools_system_text(tools)
        if rewritten and rewritten[0]["role"] == "system":
            rewritten[0] = {"role": "system", "content": f"{rewritten[0]['content']}\n\n{system}"}
        else:
            rewritten.insert(0, {"role": "system", "content": system})
    return rewritten
