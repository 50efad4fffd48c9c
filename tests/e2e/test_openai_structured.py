"""Structured output and constrained tool choices through the official `openai` SDK against the gateway in
front of the real SmolLM2 (greedy): `response_format` json_schema (strict) over the whole schema set, half
streamed and half not, each output valid for its schema; json_object; the vLLM `guided_*` spellings on chat
and completions; `logit_bias` on completions; `tool_choice="required"` and a named function give arguments
valid for the function's schema, streamed deltas concatenate to the non-streamed call, and the call's result
gets a final answer; bad constraints are 400s naming their parameter, with the KV pool free after each test."""

from __future__ import annotations

import asyncio
import json
import re

import jsonschema
import openai
import pytest
from arbi_gateway.process import GatewayProcess

from tests.structured_cases import MAX_OUTPUT_TOKENS, raw_cases

WEATHER_PARAMETERS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                      "required": ["city"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The current weather of a city.",
                                            "parameters": WEATHER_PARAMETERS}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time in a time zone.",
                                         "parameters": {"type": "object", "required": ["zone"],
                                                        "properties": {"zone": {"enum": ["UTC", "CET"]}}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def _response_format(entry: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": entry["name"], "schema": entry["schema"], "strict": True}}


def test_every_schema_through_response_format(gateway: GatewayProcess, client: openai.OpenAI, model: str) -> None:
    entries = raw_cases()["schemas"]

    async def one(sdk: openai.AsyncOpenAI, index: int, entry: dict) -> str:
        arguments = {"model": model, "temperature": 0, "max_tokens": MAX_OUTPUT_TOKENS,
                     "response_format": _response_format(entry),
                     "messages": [{"role": "user", "content": f"Give an example of {entry['describe']} as JSON."}]}
        if index % 2 == 0:
            choice = (await sdk.chat.completions.create(**arguments)).choices[0]
            assert choice.finish_reason == "stop", (entry["name"], choice.message.content)
            return choice.message.content
        chunks = [chunk async for chunk in await sdk.chat.completions.create(**arguments, stream=True)]
        assert chunks[-1].choices[0].finish_reason == "stop", entry["name"]
        return "".join(chunk.choices[0].delta.content or "" for chunk in chunks)

    async def run() -> list[str]:
        async with openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as sdk:
            return await asyncio.gather(*(one(sdk, index, entry) for index, entry in enumerate(entries)))

    for entry, text in zip(entries, asyncio.run(run())):
        jsonschema.validate(json.loads(text), entry["schema"])


def _chat(client: openai.OpenAI, model: str, question: str, **extra) -> str:
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                          temperature=0, max_tokens=48, **extra).choices[0].message.content


def test_json_object_and_the_vllm_spellings(client: openai.OpenAI, model: str) -> None:
    question = 'What is 2 + 2? Reply with the JSON object {"answer": <the number>} and nothing else.'
    assert isinstance(json.loads(_chat(client, model, question, response_format={"type": "json_object"})), dict)
    person = raw_cases()["schemas"][0]["schema"]
    jsonschema.validate(json.loads(_chat(client, model, "Give a person as JSON.", extra_body={"guided_json": person})),
                        person)
    date = raw_cases()["regexes"][0]["regex"]
    assert re.fullmatch(date, _chat(client, model, "When did it happen?", extra_body={"guided_regex": date}))
    choices = ["positive", "negative", "neutral"]
    assert _chat(client, model, "Sentiment of 'great film'?", extra_body={"guided_choice": choices}) in choices
    completion = client.completions.create(model=model, prompt="The date of the meeting is ", max_tokens=16,
                                           temperature=0, extra_body={"guided_regex": date}).choices[0]
    assert re.fullmatch(date, completion.text) and completion.finish_reason == "stop"


def test_completion_logit_bias_forces_a_token(client: openai.OpenAI, model: str, smollm2_dir) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(smollm2_dir / "tokenizer.json"))
    forced = tokenizer.encode(" Berlin", add_special_tokens=False).ids[0]

    def complete(**extra) -> str:
        return client.completions.create(model=model, prompt="The capital of France is", max_tokens=2,
                                         temperature=0, **extra).choices[0].text

    assert complete(logit_bias={str(forced): 100}) == tokenizer.decode([forced, forced]) != complete()


@pytest.mark.parametrize("tool_choice", ["required", NAMED], ids=["required", "named"])
def test_constrained_tool_choice_gives_a_valid_call(client: openai.OpenAI, model: str, tool_choice) -> None:
    arguments = {"model": model, "messages": ASK, "tools": [WEATHER, TIME], "tool_choice": tool_choice,
                 "temperature": 0, "max_tokens": 64}
    choice = client.chat.completions.create(**arguments).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in (WEATHER, TIME)}
    for call in choice.message.tool_calls:
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
    if tool_choice is NAMED:
        assert [call.function.name for call in choice.message.tool_calls] == ["get_weather"]
    chunks = list(client.chat.completions.create(**arguments, stream=True))
    streamed: dict[int, dict[str, str]] = {}
    for delta in (delta for chunk in chunks for delta in chunk.choices[0].delta.tool_calls or ()):
        entry = streamed.setdefault(delta.index, {"name": "", "arguments": ""})
        entry["name"] += delta.function.name or ""
        entry["arguments"] += delta.function.arguments or ""
    assert [streamed[index] for index in sorted(streamed)] == [
        {"name": call.function.name, "arguments": call.function.arguments} for call in choice.message.tool_calls]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_round_trip_from_a_named_call(client: openai.OpenAI, model: str) -> None:
    first = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER], tool_choice=NAMED,
                                           temperature=0, max_tokens=64).choices[0].message
    (call,) = first.tool_calls
    history = [*ASK, first.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 degrees Celsius."}]
    final = client.chat.completions.create(model=model, messages=history, tools=[WEATHER], tool_choice="none",
                                           temperature=0, max_tokens=64).choices[0]
    assert (final.finish_reason, final.message.tool_calls) == ("stop", None), final.message.content
    assert "21" in final.message.content


BAD_INPUTS = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "strin"}}}}}}, "response_format.json_schema.schema"),
    ({"extra_body": {"guided_regex": "[0-9"}}, "guided_regex"),
    ({"extra_body": {"guided_grammar": "root ::= missing_rule"}}, "guided_grammar"),
    ({"extra_body": {"structured_outputs": {"choice": []}}}, "structured_outputs.choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
]


@pytest.mark.parametrize(("extra", "param"), BAD_INPUTS)
def test_bad_constraints_answer_400_naming_the_parameter(client: openai.OpenAI, model: str, extra: dict,
                                                         param: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=model, messages=ASK, max_tokens=4, **extra)
    assert raised.value.status_code == 400 and raised.value.body["param"] == param, raised.value.body


def test_a_bad_regex_on_completions_answers_400(client: openai.OpenAI, model: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model=model, prompt="x", max_tokens=4, extra_body={"guided_regex": "(a"})
    assert raised.value.body["param"] == "guided_regex", raised.value.body
