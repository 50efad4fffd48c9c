"""The JSON schema that a `required` or named tool choice constrains the output to.

One call is `{"name": <the tool's name>, "arguments": <that tool's parameters schema>}`; `required` allows
any defined tool (`anyOf` over one such object per tool), a named choice only its tool. With parallel calls
allowed and more than one call possible, the output is an array of at least one call.
"""

from __future__ import annotations

from typing import Any

from arbi_grpc.tools.definitions import ToolChoiceMode, ToolDefinition, ToolSet


def _call_schema(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": [tool.name]}, "arguments": dict(tool.parameters)},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def tool_call_schema(tool_set: ToolSet) -> dict[str, Any]:
    """The schema of the whole output; only for a constrained (required or named) choice."""
    if tool_set.choice.mode is ToolChoiceMode.NAMED:  # one call of that tool
        return _call_schema(tool_set.by_name(tool_set.choice.name))
    if tool_set.choice.mode is not ToolChoiceMode.REQUIRED:
        raise ValueError(f"tool choice {tool_set.choice.mode.value!r} is not constrained")
    calls = [_call_schema(tool) for tool in tool_set.tools]
    call = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return {"type": "array", "items": call, "minItems": 1} if tool_set.parallel_calls else call
