"""The gateway's reading of structured-output and tool parameters: one constraint from any spelling
(response_format, guided_*, structured_outputs), each bad input a 400 naming its parameter, and the
request schema's checks of tools, tool choice, tool messages and logit_bias."""

from __future__ import annotations

import pytest
from arbi_gateway.config import GatewayConfig
from arbi_gateway.errors import ApiError
from arbi_gateway.json_schema import check
from arbi_gateway.openai_schemas import chat_request_schema
from arbi_gateway.openai_structured import OutputConstraint, logit_bias, output_constraint
from arbi_gateway.openai_tools import HistoryCall, history_message, tool_request

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}


def _checked(**body) -> dict:
    return check({"model": "m", "messages": [{"role": "user", "content": "hi"}], **body},
                 chat_request_schema(GatewayConfig()), "")


@pytest.mark.parametrize(("body", "expected"), [
    ({"response_format": {"type": "json_object"}}, OutputConstraint("json_object", "response_format")),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA, "strict": True}}},
     OutputConstraint("json_schema", "response_format.json_schema.schema", json_schema=SCHEMA, strict=True)),
    ({"guided_json": '{"type": "object"}'}, OutputConstraint("json_schema", "guided_json",
                                                              json_schema={"type": "object"})),
    ({"guided_regex": r"\d+"}, OutputConstraint("regex", "guided_regex", text=r"\d+")),
    ({"guided_choice": ["yes", "no"]}, OutputConstraint("choice", "guided_choice", choices=("yes", "no"))),
    ({"structured_outputs": {"grammar": "root ::= \"a\""}},
     OutputConstraint("grammar", "structured_outputs.grammar", text='root ::= "a"')),
    ({"response_format": {"type": "text"}}, None),
])
def test_every_spelling_gives_one_constraint(body, expected) -> None:
    assert output_constraint(_checked(**body)) == expected


@pytest.mark.parametrize(("body", "param"), [
    ({"guided_choice": []}, "guided_choice"),
    ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
    ({"guided_json": "{not json"}, "guided_json"),
    ({"guided_regex": ""}, "guided_regex"),
    ({"guided_regex": "a", "response_format": {"type": "json_object"}}, "guided_regex"),
])
def test_bad_constraints_name_their_parameter(body, param) -> None:
    with pytest.raises(ApiError) as raised:
        output_constraint(_checked(**body))
    assert raised.value.status == 400 and raised.value.param == param


@pytest.mark.parametrize(("body", "param"), [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
    ({"parallel_tool_calls": False}, "parallel_tool_calls"),
])
def test_bad_tool_requests_name_their_parameter(body, param) -> None:
    with pytest.raises(ApiError) as raised:
        tool_request(_checked(**body))
    assert raised.value.param == param


def test_tool_request_and_schema_checks() -> None:
    request = tool_request(_checked(tools=[WEATHER], tool_choice={"type": "function",
                                                                 "function": {"name": "get_weather"}},
                                    parallel_tool_calls=False))
    assert (request.choice, request.name, request.parallel_calls) == ("named", "get_weather", False)
    assert tool_request(_checked(tools=[WEATHER])).choice == "auto"
    for body, param in (({"tool_choice": "sometimes"}, "tool_choice"),
                        ({"logit_bias": {"5": 101}}, "logit_bias.5"),
                        ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name")):
        with pytest.raises(ApiError) as raised:
            _checked(**body)
        assert raised.value.param == param


def test_logit_bias_keys_are_token_ids() -> None:
    assert logit_bias(_checked(logit_bias={"17": -100, "3": 2.5})) == {17: -100.0, 3: 2.5}
    with pytest.raises(ApiError) as raised:
        logit_bias(_checked(logit_bias={"abc": 1}))
    assert raised.value.param == "logit_bias.abc"


def test_history_messages_with_tool_calls_and_results() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"a": 1}'}}
    assistant = history_message({"role": "assistant", "content": None, "tool_calls": [call]}, 1)
    assert assistant.tool_calls == (HistoryCall("call_1", "get_weather", {"a": 1}),) and assistant.content == ""
    assert history_message({"role": "tool", "content": "7", "tool_call_id": "call_1"}, 2).tool_call_id == "call_1"
    for message, param in (({"role": "tool", "content": "7"}, "messages[0].tool_call_id"),
                           ({"role": "user", "content": None}, "messages[0].content"),
                           ({"role": "user", "content": "x", "tool_calls": [call]}, "messages[0].tool_calls"),
                           ({"role": "assistant", "content": None, "tool_calls": [
                               {**call, "function": {"name": "f", "arguments": "{"}}]},
                            "messages[0].tool_calls[0].function.arguments")):
        with pytest.raises(ApiError) as raised:
            history_message(message, 0)
        assert raised.value.param == param
