"""POST /v1/chat/completions and POST /v1/completions: one driver for both routes (open the choices'
Generate calls, then answer with one JSON body or a stream of server-sent events) and the shape of each
route's choices.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_gateway.choice_streams import ChoiceStreams
from arbi_gateway.errors import ApiError, api_error_of, status_of_rpc_error
from arbi_gateway.gateway_state import GatewayState
from arbi_gateway.openai_output import ChoiceState, chat_logprobs, completion_logprobs, token_ids, usage_json
from arbi_gateway.openai_requests import (
    SERVER_FIELD_PARAMS,
    GenerationPlan,
    chat_plan,
    completion_plan,
    parse_json_object,
)
from arbi_gateway.stream_response import StreamResponse, wait_for_disconnect
from arbi_gateway.upstream import forwarded_metadata


@dataclass(frozen=True)
class _Reply:
    """One choice's new output, as a streamed chunk or a whole response shows it."""

    state: ChoiceState
    text: str
    tokens: Sequence[Any]
    prompt_tokens: Sequence[Any]
    texts: dict[int, str]
    first: bool
    final: bool
    tool_calls: Sequence[Any] = ()  # this message's tool-call deltas (streaming)


class _ChatShape:
    id_prefix, object_name, chunk_object_name = "chatcmpl", "chat.completion", "chat.completion.chunk"
    BASE_PARAMS: ClassVar[dict[str, str]] = SERVER_FIELD_PARAMS

    def __init__(self, plan: GenerationPlan) -> None:
        self._logprobs = plan.top_logprob_count is not None
        self.params = {**self.BASE_PARAMS, **plan.server_params}

    def choice(self, index: int, reply: _Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
        if reply.state.tool_calls:
            message["tool_calls"] = [call.openai_json() for _, call in sorted(reply.state.tool_calls.items())]
            message["content"] = reply.text or None
        return {"index": index, "message": message,
                "logprobs": chat_logprobs(reply.tokens, reply.texts) if self._logprobs else None,
                "finish_reason": reply.state.finish_reason}

    def deltas(self, index: int, reply: _Reply) -> list[dict[str, Any]]:
        """The chunks' choices of one message: its text (and logprobs), then one chunk per tool-call piece in
        OpenAI's shape (a call's first piece with index, id, type, name and empty arguments, then its
        arguments), the finish reason on the last."""
        chunks: list[dict[str, Any]] = []
        if reply.first or reply.text or (self._logprobs and reply.tokens):
            delta = {"role": "assistant", "content": reply.text} if reply.first else {"content": reply.text}
            chunks.append({"index": index, "delta": delta,
                           "logprobs": chat_logprobs(reply.tokens, reply.texts) if self._logprobs else None,
                           "finish_reason": None})
        for call in reply.tool_calls:
            if call.id:
                chunks.append(self._tool_delta(index, {"index": call.index, "id": call.id, "type": "function",
                                                       "function": {"name": call.name, "arguments": ""}}))
            if call.arguments:
                chunks.append(self._tool_delta(index, {"index": call.index,
                                                       "function": {"arguments": call.arguments}}))
        if reply.final:
            if not chunks:
                chunks.append({"index": index, "delta": {"content": ""}, "logprobs": None, "finish_reason": None})
            chunks[-1]["finish_reason"] = reply.state.finish_reason
        return chunks

    @staticmethod
    def _tool_delta(index: int, call: dict[str, Any]) -> dict[str, Any]:
        return {"index": index, "delta": {"tool_calls": [call]}, "logprobs": None, "finish_reason": None}


class _CompletionShape:
    id_prefix, object_name, chunk_object_name = "cmpl", "text_completion", "text_completion"
    BASE_PARAMS: ClassVar[dict[str, str]] = {**SERVER_FIELD_PARAMS, "sampling.logprobs_count": "logprobs"}

    def __init__(self, plan: GenerationPlan, echo_texts: list[str]) -> None:
        self._logprobs = plan.top_logprob_count is not None
        self.params = {**self.BASE_PARAMS, **plan.server_params}
        self._echo_texts = echo_texts
        self._choice_count = plan.choice_count

    def choice(self, index: int, reply: _Reply) -> dict[str, Any]:
        return {"index": index, "text": self._echo(index, reply) + reply.text,
                "logprobs": self._logprobs_of(reply), "finish_reason": reply.state.finish_reason}

    def deltas(self, index: int, reply: _Reply) -> list[dict[str, Any]]:
        if not (reply.first or reply.text or reply.final or (self._logprobs and reply.tokens)):
            return []
        return [{"index": index, "text": self._echo(index, reply) + reply.text,
                 "logprobs": self._logprobs_of(reply),
                 "finish_reason": reply.state.finish_reason if reply.final else None}]

    def _echo(self, index: int, reply: _Reply) -> str:
        return self._echo_texts[index // self._choice_count] if reply.first and self._echo_texts else ""

    def _logprobs_of(self, reply: _Reply) -> dict[str, Any] | None:
        if not self._logprobs:
            return None
        return completion_logprobs(reply.state, reply.prompt_tokens, reply.tokens, reply.texts)


async def chat_completions(request: Request) -> Response:
    gateway: GatewayState = request.app.state.gateway
    plan = chat_plan(parse_json_object(await request.body()), gateway.chat_schema)
    return await _respond(request, gateway, plan, _ChatShape(plan))


async def completions(request: Request) -> Response:
    gateway: GatewayState = request.app.state.gateway
    plan = completion_plan(parse_json_object(await request.body()), gateway.completion_schema)
    metadata = forwarded_metadata(request.headers)
    echo_texts: list[str] = []
    if plan.echo:
        for prompt in plan.prompts:
            if prompt.text is not None:
                echo_texts.append(prompt.text)
                continue
            try:
                echo_texts.append(await gateway.token_texts.detokenize(
                    plan.model, list(prompt.request.token_ids.ids), metadata))
            except grpc.RpcError as error:
                raise _openai_error(error, _CompletionShape.BASE_PARAMS) from None
    return await _respond(request, gateway, plan, _CompletionShape(plan, echo_texts))


async def _respond(request: Request, gateway: GatewayState, plan: GenerationPlan,
                   shape: _ChatShape | _CompletionShape) -> Response:
    metadata = forwarded_metadata(request.headers)
    streams = ChoiceStreams(gateway.upstream, plan.requests(), metadata)
    try:
        await streams.open()
    except grpc.RpcError as error:
        raise _openai_error(error, shape.params) from None
    head = {"id": f"{shape.id_prefix}-{uuid.uuid4().hex}", "created": int(time.time()), "model": plan.model}
    if plan.stream:
        chunks = _stream(gateway, plan, shape, streams, head, metadata)
        return StreamResponse(chunks, "text/event-stream")
    states = [ChoiceState() for _ in range(len(plan.prompts) * plan.choice_count)]
    collector = asyncio.ensure_future(_collect(gateway, plan, streams, states, metadata))
    watcher = asyncio.ensure_future(wait_for_disconnect(request.receive))
    try:
        await asyncio.wait({collector, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (collector, watcher):
            task.cancel()
        await asyncio.gather(collector, watcher, return_exceptions=True)
        streams.cancel()
    if collector.cancelled():  # the client went away; nobody reads this answer
        return Response(status_code=499)
    try:
        texts = collector.result()
    except grpc.RpcError as error:
        raise _openai_error(error, shape.params) from None
    choices = [shape.choice(index, _Reply(state, "".join(state.text), state.tokens,
                                          state.prompt_tokens if plan.echo else (), texts, True, True))
               for index, state in enumerate(states)]
    return JSONResponse({**head, "object": shape.object_name, "choices": choices,
                         "usage": usage_json(states, plan.choice_count), "system_fingerprint": None})


async def _collect(gateway: GatewayState, plan: GenerationPlan, streams: ChoiceStreams,
                   states: list[ChoiceState], metadata: tuple[tuple[str, str], ...]) -> dict[int, str]:
    """Reads every choice to its end into `states`; returns the token texts the logprobs need."""
    async for event in streams.responses():
        states[event.index].add(event.response, keep_output=not plan.discard_output)
    return await _texts_for(gateway, plan, metadata, [
        token_ids(state.tokens, state.prompt_tokens if plan.echo else ()) for state in states])


async def _stream(gateway: GatewayState, plan: GenerationPlan, shape: _ChatShape | _CompletionShape,
                  streams: ChoiceStreams, head: dict[str, Any],
                  metadata: tuple[tuple[str, str], ...]) -> AsyncIterator[bytes]:
    head = {**head, "object": shape.chunk_object_name, "system_fingerprint": None}
    if plan.include_usage:
        head["usage"] = None
    states = [ChoiceState() for _ in range(len(plan.prompts) * plan.choice_count)]
    keep_output = not plan.discard_output
    try:
        async for event in streams.responses():
            response: pb.GenerateResponse = event.response
            state = states[event.index]
            state.add(response, keep_output)
            tokens = response.tokens if keep_output else ()
            prompt_tokens = response.prompt_tokens if plan.echo else ()
            texts = await _texts_for(gateway, plan, metadata, [token_ids(tokens, prompt_tokens)])
            reply = _Reply(state, response.text if keep_output else "", tokens, prompt_tokens, texts,
                           first=not state.started, final=state.finish_reason is not None,
                           tool_calls=response.tool_calls if keep_output else ())
            state.started = True
            for choice in shape.deltas(event.index, reply):
                yield _event({**head, "choices": [choice]})
        if plan.include_usage:
            yield _event({**head, "choices": [], "usage": usage_json(states, plan.choice_count)})
    except grpc.RpcError as error:
        yield _event(_openai_error(error, shape.params).openai_body())
    finally:
        streams.cancel()
    yield b"data: [DONE]\n\n"


async def _texts_for(gateway: GatewayState, plan: GenerationPlan, metadata: tuple[tuple[str, str], ...],
                     id_sets: list[set[int]]) -> dict[int, str]:
    if plan.top_logprob_count is None:
        return {}
    return await gateway.token_texts.resolve(plan.model, set().union(*id_sets), metadata)


def _openai_error(error: grpc.RpcError, params: dict[str, str]) -> ApiError:
    """The OpenAI error of a failed upstream call; NOT_FOUND on these routes always means the model."""
    api_error = api_error_of(status_of_rpc_error(error), params)
    if api_error.status == 404:
        api_error.param, api_error.code = "model", "model_not_found"
    return api_error


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
