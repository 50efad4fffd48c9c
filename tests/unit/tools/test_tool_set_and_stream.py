"""Tool definitions and choices are checked, the constraint schema of required and named choices accepts
exactly the calls it should (checked with jsonschema), and the tool-call stream returns only validated
calls: unknown tools, arguments that fail their schema and extra calls without parallel calls are text."""

from __future__ import annotations

import json

import jsonschema
import pytest

from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.tools.constraint_schema import tool_call_schema
from arbi_grpc.tools.definitions import ToolChoice, ToolChoiceMode, ToolDefinition, ToolSet
from arbi_grpc.tools.families import ToolCallFamily
from arbi_grpc.tools.generic_prompt import generic_messages
from arbi_grpc.tools.tool_call_stream import ToolCallStream

WEATHER = ToolDefinition("get_weather", "Current weather", {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"], "additionalProperties": False})
TIME = ToolDefinition("get_time", "", {"type": "object", "properties": {"zone": {"type": "string"}}})


@pytest.mark.parametrize(("tools", "choice", "field"), [
    ((WEATHER, WEATHER), ToolChoice(), "chat.tools[1].name"),
    ((ToolDefinition("bad name!"),), ToolChoice(), "chat.tools[0].name"),
    ((ToolDefinition("f", parameters={"type": "object", "properties": {"a": {"type": "strin"}}}),), ToolChoice(),
     "chat.tools[0].parameters"),
    ((ToolDefinition("f", parameters={"type": "array"}),), ToolChoice(), "chat.tools[0].parameters"),
    ((WEATHER,), ToolChoice(ToolChoiceMode.NAMED, "nope"), "chat.tool_choice"),
    ((), ToolChoice(ToolChoiceMode.REQUIRED), "chat.tool_choice"),
])
def test_bad_tools_name_their_field(tools, choice, field) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        ToolSet(tools, choice)
    assert raised.value.field == field


def test_required_schema_accepts_calls_of_defined_tools_only() -> None:
    schema = tool_call_schema(ToolSet((WEATHER, TIME), ToolChoice(ToolChoiceMode.REQUIRED)))
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid([{"name": "get_weather", "arguments": {"city": "Oslo"}},
                               {"name": "get_time", "arguments": {}}])
    assert not validator.is_valid([])
    assert not validator.is_valid([{"name": "get_weather", "arguments": {"days": 2}}])
    assert not validator.is_valid([{"name": "other", "arguments": {}}])
    single = tool_call_schema(ToolSet((WEATHER, TIME), ToolChoice(ToolChoiceMode.REQUIRED), parallel_calls=False))
    assert jsonschema.Draft202012Validator(single).is_valid({"name": "get_time", "arguments": {"zone": "UTC"}})


def test_named_schema_allows_that_tool_only() -> None:
    validator = jsonschema.Draft202012Validator(
        tool_call_schema(ToolSet((WEATHER, TIME), ToolChoice(ToolChoiceMode.NAMED, "get_time"))))
    assert validator.is_valid({"name": "get_time", "arguments": {"zone": "UTC"}})
    assert not validator.is_valid({"name": "get_weather", "arguments": {"city": "Oslo"}})


def test_stream_returns_only_valid_calls_and_the_rest_as_text() -> None:
    stream = ToolCallStream(ToolSet((WEATHER, TIME)), ToolCallFamily.HERMES)
    good = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}</tool_call>'
    unknown = '<tool_call>{"name": "launch", "arguments": {}}</tool_call>'
    failing = '<tool_call>{"name": "get_weather", "arguments": {"days": 0}}</tool_call>'
    first = stream.feed("Sure. " + good)
    rest = stream.feed(unknown + failing)
    assert first.text == "Sure. " and rest.text == unknown + failing
    (call,) = first.calls
    assert call.index == 0 and call.name == "get_weather" and call.call_id.startswith("call_")
    assert json.loads(call.arguments_json) == {"city": "Oslo", "days": 2}
    assert stream.finish().calls == () and stream.call_count == 1


def test_without_parallel_calls_only_the_first_call_is_a_call() -> None:
    stream = ToolCallStream(ToolSet((TIME,), parallel_calls=False), ToolCallFamily.HERMES)
    second = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    step = stream.feed(second + second)
    assert len(step.calls) == 1 and step.text == second


def test_generic_prompt_carries_tools_calls_and_results() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": "7 C", "tool_call_id": "call_1"},
    ]
    rewritten = generic_messages(messages, (WEATHER,))
    assert [m["role"] for m in rewritten] == ["system", "user", "assistant", "user"]
    assert rewritten[0]["content"].startswith("Be brief.\n\n") and '"name": "get_weather"' in rewritten[0]["content"]
    assert rewritten[2]["content"] == '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    assert rewritten[3]["content"] == "<tool_response>\n7 C\n</tool_response>"
    assert generic_messages(messages[1:2], ())[0] == {"role": "user", "content": "Weather in Oslo?"}
