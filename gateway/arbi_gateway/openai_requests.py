"""OpenAI request bodies -> GenerateRequests: checks a body against its schema and the rules between
parameters, and builds one GenerateRequest per (prompt, choice) in OpenAI's choice order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

from arbi_gateway import json_schema
from arbi_gateway.errors import invalid
from arbi_gateway.openai_schemas import UNSUPPORTED_CHAT_PARAMETERS, UNSUPPORTED_COMPLETION_PARAMETERS
from arbi_gateway.openai_structured import logit_bias, output_constraint, server_params, set_constraint
from arbi_gateway.openai_tools import add_tools, history_message

# OpenAI's default output length on /v1/completions.
DEFAULT_COMPLETION_MAX_TOKENS = 16

# The server's field paths (BadRequest) under the OpenAI parameter names they come from.
SERVER_FIELD_PARAMS = {
    "model": "model",
    "prompt": "prompt",
    "token_ids": "prompt",
    "chat.messages": "messages",
    "sampling.temperature": "temperature",
    "sampling.top_p": "top_p",
    "sampling.top_k": "top_k",
    "sampling.min_p": "min_p",
    "sampling.repetition_penalty": "repetition_penalty",
    "sampling.presence_penalty": "presence_penalty",
    "sampling.frequency_penalty": "frequency_penalty",
    "sampling.seed": "seed",
    "sampling.logit_bias": "logit_bias",
    "sampling.logprobs_count": "top_logprobs",
    "stopping.max_output_tokens": "max_tokens",
    "stopping.min_output_tokens": "min_tokens",
    "stopping.stop_strings": "stop",
    "scheduling.tenant_id": "user",
    "chat.tools": "tools",
    "chat.tool_choice": "tool_choice",
}


@dataclass(frozen=True)
class Prompt:
    """One prompt: the request that generates from it, and its text when it was given as text."""

    request: pb.GenerateRequest
    text: str | None


@dataclass(frozen=True)
class GenerationPlan:
    """What one OpenAI request asks the server for."""

    model: str
    prompts: tuple[Prompt, ...]
    choice_count: int
    stream: bool
    include_usage: bool
    top_logprob_count: int | None  # None: no logprobs
    echo: bool = False
    discard_output: bool = False  # max_tokens 0 with echo: one token is generated and dropped
    # The server's field paths of this request under its parameter names (the output constraint's origin).
    server_params: dict[str, str] = field(default_factory=dict)

    def requests(self) -> list[pb.GenerateRequest]:
        """One request per choice, prompt-major (choice index = prompt index * n + i); with a seed,
        choice i of a prompt draws with seed + i."""
        requests = []
        for prompt in self.prompts:
            for choice in range(self.choice_count):
                request = pb.GenerateRequest()
                request.CopyFrom(prompt.request)
                if choice and request.sampling.HasField("seed"):
                    request.sampling.seed = (request.sampling.seed + choice) % 2**63
                requests.append(request)
        return requests


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 that says what is wrong with it."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise invalid("body", f"We could not parse the JSON body of your request: {error}.", "invalid_json") from None
    if not isinstance(body, dict):
        raise invalid("body", "The request body must be a JSON object.", "invalid_json")
    return body


def _drop_unsupported(body: dict[str, Any], unsupported: frozenset[str], route: str) -> dict[str, Any]:
    for name in sorted(unsupported & body.keys()):
        if body[name] is not None:
            raise invalid(name, f"'{name}' is not supported by arbi-serve's {route}; remove it.",
                          "unsupported_parameter")
    return {name: value for name, value in body.items() if name not in unsupported}


def _set(body: dict[str, Any], name: str) -> bool:
    return body.get(name) is not None


def _base_request(body: dict[str, Any], max_tokens: int | None, top_logprob_count: int,
                  prompt_logprobs: bool) -> pb.GenerateRequest:
    request = pb.GenerateRequest(model=body["model"])
    sampling = request.sampling
    for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty", "seed"):
        if _set(body, name):
            setattr(sampling, name, body[name])
    stopping = request.stopping
    if max_tokens is not None:
        stopping.max_output_tokens = max_tokens
    if _set(body, "min_tokens"):
        stopping.min_output_tokens = body["min_tokens"]
    stop = body.get("stop")
    stopping.stop_strings.extend([stop] if isinstance(stop, str) else stop or [])
    stopping.ignore_eos = bool(body.get("ignore_eos"))
    request.logprobs.top_logprob_count = top_logprob_count
    request.logprobs.include_prompt_logprobs = prompt_logprobs
    if _set(body, "user"):
        request.scheduling.tenant_id = body["user"]
    return request


def _add_structured(body: dict[str, Any], request: pb.GenerateRequest) -> dict[str, str]:
    """Sets the body's output constraint and logit bias on the request; returns the server_params."""
    constraint = output_constraint(body)
    if constraint is not None:
        set_constraint(constraint, request.sampling)
    for token_id, bias in logit_bias(body).items():
        request.sampling.logit_bias[token_id] = bias
    return server_params(constraint)


def _streaming(body: dict[str, Any]) -> tuple[bool, bool]:
    stream = bool(body.get("stream"))
    options = body.get("stream_options")
    if options is not None and not stream:
        raise invalid("stream_options", "'stream_options' is only allowed when 'stream' is true.")
    return stream, bool((options or {}).get("include_usage"))


def chat_plan(body: dict[str, Any], schema: json_schema.Schema) -> GenerationPlan:
    """The plan of a /v1/chat/completions body."""
    body = json_schema.check(_drop_unsupported(body, UNSUPPORTED_CHAT_PARAMETERS, "/v1/chat/completions"),
                             schema, "")
    if _set(body, "top_logprobs") and not body.get("logprobs"):
        raise invalid("top_logprobs", "'top_logprobs' requires 'logprobs' to be true.")
    if (_set(body, "max_tokens") and _set(body, "max_completion_tokens")
            and body["max_tokens"] != body["max_completion_tokens"]):
        raise invalid("max_completion_tokens", "Set one of 'max_tokens' and 'max_completion_tokens', "
                                               "or both to the same value.")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    logprobs = bool(body.get("logprobs"))
    request = _base_request(body, max_tokens, body.get("top_logprobs") or 0, prompt_logprobs=False)
    for index, message in enumerate(body["messages"]):
        history = history_message(message, index)
        added = request.chat.messages.add(role=history.role, content=history.content,
                                          tool_call_id=history.tool_call_id)
        for call in history.tool_calls:
            added.tool_calls.add(id=call.call_id, name=call.name, arguments=json.dumps(call.arguments))
    add_tools(body, request.chat)
    params = _add_structured(body, request)
    stream, include_usage = _streaming(body)
    return GenerationPlan(
        model=body["model"], prompts=(Prompt(request, None),), choice_count=body.get("n") or 1,
        stream=stream, include_usage=include_usage,
        top_logprob_count=(body.get("top_logprobs") or 0) if logprobs else None, server_params=params,
    )


def completion_plan(body: dict[str, Any], schema: json_schema.Schema) -> GenerationPlan:
    """The plan of a /v1/completions body."""
    body = json_schema.check(_drop_unsupported(body, UNSUPPORTED_COMPLETION_PARAMETERS, "/v1/completions"),
                             schema, "")
    echo = bool(body.get("echo"))
    max_tokens = body.get("max_tokens")
    if max_tokens == 0 and not echo:
        raise invalid("max_tokens", "'max_tokens' may be 0 only with 'echo': true.")
    logprob_count = body.get("logprobs")
    discard_output = max_tokens == 0
    request = _base_request(
        body,
        1 if discard_output else (DEFAULT_COMPLETION_MAX_TOKENS if max_tokens is None else max_tokens),
        logprob_count or 0,
        prompt_logprobs=echo and logprob_count is not None,
    )
    params = _add_structured(body, request)
    prompts = []
    for prompt in _prompt_list(body["prompt"]):
        single = pb.GenerateRequest()
        single.CopyFrom(request)
        if isinstance(prompt, str):
            single.prompt = prompt
        else:
            single.token_ids.CopyFrom(types_pb.TokenIds(ids=prompt))
        prompts.append(Prompt(single, prompt if isinstance(prompt, str) else None))
    stream, include_usage = _streaming(body)
    return GenerationPlan(
        model=body["model"], prompts=tuple(prompts), choice_count=body.get("n") or 1, stream=stream,
        include_usage=include_usage, top_logprob_count=logprob_count, echo=echo, discard_output=discard_output,
        server_params=params,
    )


def _prompt_list(prompt: str | list) -> list[str | list[int]]:
    """The prompts of the `prompt` parameter: a string, a token-id list, or a list of either."""
    if isinstance(prompt, str) or isinstance(prompt[0], int):
        return [prompt]
    return list(prompt)
