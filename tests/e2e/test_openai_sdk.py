"""The official `openai` Python SDK (sync, async, streaming) against the gateway in front of the real
SmolLM2: streamed deltas concatenate to the non-streamed text under greedy sampling, logprobs come back
when asked, `echo` returns the prompt's logprobs, and the SDK raises the right error classes.
"""

from __future__ import annotations

import asyncio

import openai
import pytest
from arbi_gateway.process import GatewayProcess

from tests.conftest import wait_for_idle_pool

QUESTION = "What is the capital of France?"


def _messages(question: str = QUESTION) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def test_chat_completion(client: openai.OpenAI, model: str) -> None:
    completion = client.chat.completions.create(model=model, messages=_messages(), temperature=0, max_tokens=24)
    choice = completion.choices[0]
    assert "Paris" in choice.message.content
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens


def test_streamed_chat_deltas_concatenate_to_the_completion(client: openai.OpenAI, model: str) -> None:
    arguments = {"model": model, "messages": _messages("Name three colours."), "temperature": 0, "max_tokens": 32}
    whole = client.chat.completions.create(**arguments)
    chunks = list(client.chat.completions.create(**arguments, stream=True,
                                                  stream_options={"include_usage": True}))
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert streamed == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_streamed_completion_concatenates_to_the_completion(client: openai.OpenAI, model: str) -> None:
    arguments = {"model": model, "prompt": "The three primary colours are", "temperature": 0, "max_tokens": 20}
    whole = client.completions.create(**arguments)
    streamed = "".join(chunk.choices[0].text for chunk in client.completions.create(**arguments, stream=True))
    assert streamed == whole.choices[0].text and whole.usage.completion_tokens == 20


def test_streamed_choices_of_several_prompts_match_the_completion(client: openai.OpenAI, model: str) -> None:
    arguments = {"model": model, "prompt": ["The sky is", "Water is"], "n": 2, "temperature": 0, "max_tokens": 8}
    whole = client.completions.create(**arguments)
    streamed: dict[int, str] = {}
    for chunk in client.completions.create(**arguments, stream=True):
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + choice.text
    assert streamed == {choice.index: choice.text for choice in whole.choices}
    assert len(streamed) == 4 and streamed[0] == streamed[1] and streamed[0] != streamed[2]


def test_chat_logprobs(client: openai.OpenAI, model: str) -> None:
    completion = client.chat.completions.create(model=model, messages=_messages(), temperature=0, max_tokens=12,
                                                logprobs=True, top_logprobs=3)
    choice = completion.choices[0]
    entries = choice.logprobs.content
    assert len(entries) == completion.usage.completion_tokens
    assert "".join(entry.token for entry in entries).startswith(choice.message.content)
    for entry in entries:
        assert len(entry.top_logprobs) == 3 and entry.logprob <= 0
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-5)  # greedy: the top one
        assert bytes(entry.bytes).decode() == entry.token


def test_completion_echo_returns_prompt_logprobs_with_max_tokens_zero(client: openai.OpenAI, model: str) -> None:
    prompt = "The capital of France is Paris"
    completion = client.completions.create(model=model, prompt=prompt, echo=True, logprobs=2, max_tokens=0)
    choice = completion.choices[0]
    assert choice.text == prompt and choice.finish_reason == "length"
    assert "".join(choice.logprobs.tokens) == prompt
    assert choice.logprobs.token_logprobs[0] is None
    assert all(value <= 0 for value in choice.logprobs.token_logprobs[1:])
    assert choice.logprobs.text_offset[1] == len(choice.logprobs.tokens[0])
    assert completion.usage.completion_tokens == 0 and completion.usage.prompt_tokens == len(choice.logprobs.tokens)


def test_n_choices_with_a_seed_are_reproducible(client: openai.OpenAI, model: str) -> None:
    arguments = {"model": model, "messages": _messages("Tell me a word."), "n": 3, "seed": 7, "temperature": 1.0,
                 "max_tokens": 8}
    first = [choice.message.content for choice in client.chat.completions.create(**arguments).choices]
    again = [choice.message.content for choice in client.chat.completions.create(**arguments).choices]
    assert first == again and len(first) == 3
    assert len(set(first)) > 1  # each choice draws with its own seed


def test_stop_top_p_user_and_max_completion_tokens(client: openai.OpenAI, model: str) -> None:
    completion = client.chat.completions.create(
        model=model, messages=_messages(), temperature=0, stop=["Paris"], top_p=0.9, user="tenant-a",
        max_tokens=24, max_completion_tokens=24,
    )
    choice = completion.choices[0]
    assert "Paris" not in choice.message.content and choice.finish_reason == "stop"


def test_presence_and_frequency_penalties(client: openai.OpenAI, model: str) -> None:
    arguments = {"model": model, "messages": _messages("Repeat the word 'cat' ten times."), "temperature": 0,
                 "max_tokens": 24}
    plain = client.chat.completions.create(**arguments).choices[0].message.content
    penalized = client.chat.completions.create(**arguments, presence_penalty=2.0, frequency_penalty=2.0,
                                               timeout=120).choices[0].message.content
    assert penalized != plain


def test_models_list_and_retrieve(client: openai.OpenAI, model: str) -> None:
    assert [m.id for m in client.models.list()] == [model]
    assert client.models.retrieve(model).id == model


def test_sdk_errors(client: openai.OpenAI, model: str) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        client.chat.completions.create(model="no-such-model", messages=_messages())
    assert "no-such-model" in not_found.value.message
    with pytest.raises(openai.BadRequestError) as too_many:
        client.chat.completions.create(model=model, messages=_messages(), n=99)
    assert too_many.value.param == "n"
    with pytest.raises(openai.BadRequestError) as unsupported:
        client.chat.completions.create(model=model, messages=_messages(), functions=[{"name": "f"}])
    assert (unsupported.value.param, unsupported.value.code) == ("functions", "unsupported_parameter")


def test_async_client_streams_concurrently(gateway: GatewayProcess, model: str, served_smollm2) -> None:
    async def run() -> tuple[list[str], list[str]]:
        async with openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0) as sdk:
            questions = ["What is 2 + 2?", QUESTION]
            wholes = await asyncio.gather(*(sdk.chat.completions.create(
                model=model, messages=_messages(q), temperature=0, max_tokens=16) for q in questions))

            async def streamed(question: str) -> str:
                stream = await sdk.chat.completions.create(model=model, messages=_messages(question),
                                                           temperature=0, max_tokens=16, stream=True)
                return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])

            return [w.choices[0].message.content for w in wholes], list(
                await asyncio.gather(*(streamed(q) for q in questions)))

    wholes, streams = asyncio.run(run())
    assert wholes == streams and "Paris" in wholes[1]
    wait_for_idle_pool(served_smollm2.served.engine)
