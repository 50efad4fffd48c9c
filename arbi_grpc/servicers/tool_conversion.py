"""ChatInput's tools, tool choice and tool turns -> the tools package's types, the prompt text and, for a
`required` or named choice, the output constraint; and the tool-call reading of a generation's responses
(text -> text and ToolCallDeltas, finish reason TOOL_CALLS).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from arbi_grpc.engine.output_constraint import FIELD as CONSTRAINT_FIELD
from arbi_grpc.engine.output_constraint import ConstraintKind, OutputConstraint
from arbi_grpc.engine.sampling_params import SamplingParams
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.text.chat_template import ChatTemplate
from arbi_grpc.tools.constraint_schema import tool_call_schema
from arbi_grpc.tools.definitions import ToolChoice, ToolChoiceMode, ToolDefinition, ToolSet
from arbi_grpc.tools.tool_call_stream import ToolCallStream
from arbi_grpc.tools.tool_prompt import render_with_tools, tool_call_family

ResponseShaper = Callable[[pb.GenerateResponse], pb.GenerateResponse]
MAX_TOOLS = 128
_MODES = {
    types_pb.TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode.AUTO,
    types_pb.TOOL_CHOICE_MODE_NONE: ToolChoiceMode.NONE,
    types_pb.TOOL_CHOICE_MODE_AUTO: ToolChoiceMode.AUTO,
    types_pb.TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode.REQUIRED,
}
# The engine's own ends; a generation with calls that ended so finishes with TOOL_CALLS.
_NATURAL_ENDS = frozenset({types_pb.FINISH_REASON_EOS_TOKEN, types_pb.FINISH_REASON_STOP_TOKEN,
                           types_pb.FINISH_REASON_STOP_STRING})


def uses_tools(chat: types_pb.ChatInput) -> bool:
    """Whether the chat defines tools or holds tool turns (then the servicer renders its prompt)."""
    return bool(chat.tools) or chat.HasField("tool_choice") or any(
        message.tool_calls or message.tool_call_id for message in chat.messages)


def _parameters(tool: types_pb.ToolDefinition, index: int) -> dict[str, Any]:
    if not tool.parameters_json_schema:
        return {"type": "object", "properties": {}}
    try:
        return json.loads(tool.parameters_json_schema)
    except json.JSONDecodeError as error:
        raise InvalidArgumentError(f"chat.tools[{index}].parameters_json_schema", f"is not JSON: {error}") from None


def tool_set_from_proto(chat: types_pb.ChatInput) -> ToolSet:
    if len(chat.tools) > MAX_TOOLS:
        raise InvalidArgumentError("chat.tools", f"at most {MAX_TOOLS} tools, got {len(chat.tools)}")
    choice = chat.tool_choice
    which = choice.WhichOneof("choice")
    if which == "function_name":
        tool_choice = ToolChoice(ToolChoiceMode.NAMED, choice.function_name)
    elif choice.mode in _MODES:
        tool_choice = ToolChoice(_MODES[choice.mode])
    else:
        raise InvalidArgumentError("chat.tool_choice.mode", f"unknown tool choice mode {choice.mode}")
    tools = tuple(ToolDefinition(tool.name, tool.description, _parameters(tool, index))
                  for index, tool in enumerate(chat.tools))
    parallel = chat.parallel_tool_calls if chat.HasField("parallel_tool_calls") else True
    return ToolSet(tools, tool_choice, parallel)


def tool_call_constraint(tool_set: ToolSet, sampling: SamplingParams) -> OutputConstraint:
    """The output constraint of a `required` or named tool choice: the tool-call JSON schema. The request's
    own output constraint may not be set as well."""
    if sampling.output_constraint is not None:
        raise InvalidArgumentError(CONSTRAINT_FIELD, f"tool choice {tool_set.choice.mode.value!r} constrains the "
                                                     "output to tool calls; leave output_constraint unset")
    return OutputConstraint(ConstraintKind.JSON_SCHEMA, json.dumps(tool_call_schema(tool_set)))


def messages_from_proto(chat: types_pb.ChatInput) -> list[dict[str, Any]]:
    """The messages in HF's form: tool calls with decoded arguments, tool results with their call id."""
    messages = []
    for index, message in enumerate(chat.messages):
        entry: dict[str, Any] = {"role": message.role, "content": message.content}
        calls = []
        for call_index, call in enumerate(message.tool_calls):
            try:
                arguments = json.loads(call.arguments or "{}")
            except json.JSONDecodeError as error:
                raise InvalidArgumentError(f"chat.messages[{index}].tool_calls[{call_index}].arguments",
                                           f"is not JSON: {error}") from None
            calls.append({"id": call.id, "type": "function", "function": {"name": call.name,
                                                                           "arguments": arguments}})
        if calls:
            entry["tool_calls"] = calls
        if message.tool_call_id:
            entry["tool_call_id"] = message.tool_call_id
        messages.append(entry)
    return messages


def render_chat_with_tools(template: ChatTemplate, chat: types_pb.ChatInput, tool_set: ToolSet) -> str:
    return render_with_tools(template, messages_from_proto(chat), tool_set)


def tool_call_shaper(template: ChatTemplate, tool_set: ToolSet) -> ResponseShaper:
    """Reads each response's text for tool calls (none: the identity)."""
    if not tool_set.calls_expected:
        return lambda response: response
    stream = ToolCallStream(tool_set, tool_call_family(template))

    def shape(response: pb.GenerateResponse) -> pb.GenerateResponse:
        steps = [stream.feed(response.text)]
        if response.finish_reason != types_pb.FINISH_REASON_UNSPECIFIED:
            steps.append(stream.finish())
            if stream.call_count and response.finish_reason in _NATURAL_ENDS:
                response.finish_reason = types_pb.FINISH_REASON_TOOL_CALLS
        response.text = "".join(step.text for step in steps)
        for step in steps:
            for call in step.calls:
                response.tool_calls.add(index=call.index, id=call.call_id, name=call.name,
                                        arguments=call.arguments_json)
        return response

    return shape
