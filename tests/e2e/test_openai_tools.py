"""Tool calling and structured output through the official `openai` SDK against the gateway in front of the
real SmolLM2 (its template renders no tools, so the generic tool prompt and the Hermes parser serve it):
tool calls come back typed and valid for their schema, streamed tool-call deltas in OpenAI's shape
concatenate to the non-streamed call (greedy), a round trip with the tool's result gets a final answer,
and every bad input answers 400 naming its parameter with the KV pool free afterwards."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

from tests.conftest import wait_for_idle_pool
from tests.e2e.helpers import chat_request, generate, stub_for

WEATHER_PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The current weather of a city.",
                                            "parameters": WEATHER_PARAMETERS}}
ASK = [{"role": "user", "content": "What is the weather in Paris? Call the tool."}]


def _copy_request(call_text: str) -> list[dict[str, str]]:
    """A request this small model answers with exactly `call_text` under greedy sampling."""
    return [{"role": "user", "content": f"Output this text exactly:\n{call_text}"}]


PARIS_CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def test_auto_tool_call_is_typed_and_valid(client: openai.OpenAI, model: str) -> None:
    completion = client.chat.completions.create(model=model, messages=_copy_request(PARIS_CALL), tools=[WEATHER],
                                                temperature=0, max_tokens=64)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_PARAMETERS)


def test_streamed_tool_call_deltas_concatenate_to_the_call(client: openai.OpenAI, model: str) -> None:
    arguments = {"model": model, "messages": _copy_request(PARIS_CALL), "tools": [WEATHER], "temperature": 0,
                 "max_tokens": 64}
    (whole,) = client.chat.completions.create(**arguments).choices[0].message.tool_calls
    chunks = list(client.chat.completions.create(**arguments, stream=True))
    deltas = [call for chunk in chunks for call in chunk.choices[0].delta.tool_calls or ()]
    first, *rest = deltas
    assert (first.index, first.type, first.function.name, first.function.arguments) == (0, "function",
                                                                                       "get_weather", "")
    assert first.id.startswith("call_") and all(delta.id is None and delta.index == 0 for delta in rest)
    assert "".join(delta.function.arguments for delta in rest) == whole.function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("call_text", [
    '<tool_call>{"name": "launch_rockets", "arguments": {"city": "Paris"}}</tool_call>',  # no such tool
    '<tool_call>{"name": "get_weather", "arguments": {"town": "Paris"}}</tool_call>',  # fails the schema
])
def test_invalid_calls_come_back_as_text(client: openai.OpenAI, model: str, call_text: str) -> None:
    choice = client.chat.completions.create(model=model, messages=_copy_request(call_text), tools=[WEATHER],
                                            temperature=0, max_tokens=64).choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    assert choice.message.content == call_text


def test_round_trip_with_the_tool_result(client: openai.OpenAI, model: str) -> None:
    first = client.chat.completions.create(model=model, messages=_copy_request(PARIS_CALL), tools=[WEATHER],
                                           temperature=0, max_tokens=64).choices[0].message
    (call,) = first.tool_calls
    history = [{"role": "user", "content": "What is the weather in Paris?"}, first.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 degrees Celsius."}]
    final = client.chat.completions.create(model=model, messages=history, tools=[WEATHER], temperature=0,
                                           max_tokens=64).choices[0]
    assert (final.finish_reason, final.message.tool_calls) == ("stop", None), final.message.content
    assert "21" in final.message.content


BAD_INPUTS = [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "strin"}}}}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools"),
    ({"messages": [*ASK, {"role": "tool", "content": "7"}]}, "messages[1].tool_call_id"),
    ({"guided_choice": []}, "guided_choice"),
    ({"response_format": {"type": "json_object"}, "guided_regex": "a+"}, "guided_regex"),
    ({"logit_bias": {"x": 1}}, "logit_bias.x"),
    ({"logit_bias": {"49152": 1}}, "logit_bias"),  # one past SmolLM2's vocabulary
]


@pytest.mark.parametrize(("extra", "param"), BAD_INPUTS)
def test_bad_input_answers_400_naming_the_parameter(client: openai.OpenAI, model: str, extra: dict,
                                                    param: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=model, messages=ASK, max_tokens=4, extra_body=extra)
    assert raised.value.status_code == 400 and raised.value.body["param"] == param


def test_logit_bias_bans_and_forces_tokens(client: openai.OpenAI, model: str, smollm2_dir) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(smollm2_dir / "tokenizer.json"))
    question = [{"role": "user", "content": "What is the capital of France?"}]

    def answer(bias: dict[str, float]) -> str:
        return client.chat.completions.create(model=model, messages=question, temperature=0, max_tokens=8,
                                              logit_bias=bias).choices[0].message.content

    plain = answer({})
    first = tokenizer.encode(plain, add_special_tokens=False).ids[0]
    assert not answer({str(first): -100}).startswith(tokenizer.decode([first]))
    forced = tokenizer.encode(" Berlin", add_special_tokens=False).ids
    assert answer({str(forced[0]): 100}).startswith(tokenizer.decode(forced[:1]) * 2)


def test_grpc_clients_get_typed_tool_calls(served_smollm2) -> None:
    """The same call straight from GenerateService: a ToolCallDelta and FINISH_REASON_TOOL_CALLS, no text."""
    request = chat_request(_copy_request(PARIS_CALL)[0]["content"], max_output_tokens=64)
    request.chat.tools.add(name="get_weather", parameters_json_schema=json.dumps(WEATHER_PARAMETERS))
    channel, stub = stub_for(served_smollm2.target)
    try:
        completion = generate(stub, request)
    finally:
        channel.close()
    (call,) = [call for response in completion.responses for call in response.tool_calls]
    assert (call.index, call.name, json.loads(call.arguments)) == (0, "get_weather", {"city": "Paris"})
    assert completion.text == "" and completion.responses[-1].finish_reason == types_pb.FINISH_REASON_TOOL_CALLS
    wait_for_idle_pool(served_smollm2.served.engine)
