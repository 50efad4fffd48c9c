"""Tools of an OpenAI chat body: `tools`, `tool_choice` and `parallel_tool_calls` checked against each other,
and the conversation's tool turns (assistant messages with `tool_calls`, `tool` messages with
`tool_call_id`). The server checks each tool's parameters schema and validates the calls it returns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

from arbi_gateway.errors import invalid

_MODES = {"none": types_pb.TOOL_CHOICE_MODE_NONE, "auto": types_pb.TOOL_CHOICE_MODE_AUTO,
          "required": types_pb.TOOL_CHOICE_MODE_REQUIRED}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolRequest:
    """`choice` is none, auto or required, or `named` with `name` set."""

    tools: tuple[Tool, ...]
    choice: str
    name: str
    parallel_calls: bool


@dataclass(frozen=True)
class HistoryCall:
    call_id: str
    name: str
    arguments: Any  # decoded JSON


@dataclass(frozen=True)
class HistoryMessage:
    role: str
    content: str
    tool_calls: tuple[HistoryCall, ...] = ()
    tool_call_id: str = ""


def tool_request(body: dict[str, Any]) -> ToolRequest | None:
    """The body's tools and choice, or None when it sets no tools (a choice then needs tools)."""
    tools = tuple(Tool(tool["function"]["name"], tool["function"].get("description") or "",
                       tool["function"].get("parameters") or {"type": "object", "properties": {}})
                  for tool in body.get("tools") or ())
    choice = body.get("tool_choice")
    name = ""
    if isinstance(choice, dict):
        name, choice = choice["function"]["name"], "named"
        if name not in {tool.name for tool in tools}:
            raise invalid("tool_choice", f"'tool_choice' names the function {name!r}, which is not in 'tools'.")
    elif choice == "required" and not tools:
        raise invalid("tool_choice", "'tool_choice' is 'required' but the request defines no 'tools'.")
    names = [tool.name for tool in tools]
    for index, tool_name in enumerate(names):
        if tool_name in names[:index]:
            raise invalid(f"tools[{index}].function.name", f"The function {tool_name!r} is defined twice.")
    if not tools:
        if body.get("parallel_tool_calls") is not None:
            raise invalid("parallel_tool_calls", "'parallel_tool_calls' is only allowed with 'tools'.")
        return None
    parallel = body.get("parallel_tool_calls")
    return ToolRequest(tools, choice or "auto", name, True if parallel is None else parallel)


def history_message(message: dict[str, Any], index: int) -> HistoryMessage:
    """One request message with its tool fields checked."""
    role = "system" if message["role"] == "developer" else message["role"]
    content = message.get("content")
    where = f"messages[{index}]"
    text = content if isinstance(content, str) else "\n".join(part["text"] for part in content or ())
    calls = message.get("tool_calls") or ()
    if calls and role != "assistant":
        raise invalid(f"{where}.tool_calls", "Only assistant messages may hold 'tool_calls'.")
    if content is None and not calls:
        raise invalid(f"{where}.content", "Missing required parameter: 'content' (only an assistant message "
                                          "with 'tool_calls' may leave it null).", "missing_required_parameter")
    if role == "tool" and not message.get("tool_call_id"):
        raise invalid(f"{where}.tool_call_id", "A message with role 'tool' needs the 'tool_call_id' it answers.",
                      "missing_required_parameter")
    if role != "tool" and message.get("tool_call_id"):
        raise invalid(f"{where}.tool_call_id", "Only messages with role 'tool' may set 'tool_call_id'.")
    history = []
    for call_index, call in enumerate(calls):
        try:
            arguments = json.loads(call["function"]["arguments"])
        except json.JSONDecodeError as error:
            raise invalid(f"{where}.tool_calls[{call_index}].function.arguments",
                          f"The arguments are not valid JSON: {error}.") from None
        history.append(HistoryCall(call["id"], call["function"]["name"], arguments))
    return HistoryMessage(role, text, tuple(history), message.get("tool_call_id") or "")


def add_tools(body: dict[str, Any], chat: types_pb.ChatInput) -> None:
    """Sets the chat's tools, tool choice and parallel calls from the body (nothing without tools)."""
    request = tool_request(body)
    if request is None:
        return
    for tool in request.tools:
        chat.tools.add(name=tool.name, description=tool.description,
                       parameters_json_schema=json.dumps(tool.parameters))
    if request.choice == "named":
        chat.tool_choice.function_name = request.name
    else:
        chat.tool_choice.mode = _MODES[request.choice]
    chat.parallel_tool_calls = request.parallel_calls
