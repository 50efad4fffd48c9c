"""One batch input line: parsing `{"custom_id", "method", "url", "body"}` and answering it.

The body is an OpenAI request: the gateway's translation (`openai_requests`, `embedding_routes`) turns it
into GenerateRequests or an EmbedRequest, sent at batch priority to the server's own GenerateService or
EmbeddingService over loopback, and the answers are formatted as the gateway formats a non-streamed
response. Output and error lines follow OpenAI's batch line format.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

import grpc
from arbi_client.arbi.v1 import embedding_service_pb2_grpc as embedding_grpc
from arbi_client.arbi.v1 import generate_service_pb2_grpc as generate_grpc
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

from arbi_gateway.config import GatewayConfig
from arbi_gateway.embedding_routes import EMBED_PARAMS, embed_request_of, embedding_json
from arbi_gateway.errors import ApiError, api_error_of, status_of_rpc_error
from arbi_gateway.openai_output import ChoiceState, usage_json
from arbi_gateway.openai_requests import SERVER_FIELD_PARAMS, GenerationPlan, chat_plan, completion_plan
from arbi_gateway.openai_schemas import chat_request_schema, completion_request_schema

CHAT_URL, COMPLETION_URL, EMBEDDING_URL = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
BATCH_ENDPOINTS = (CHAT_URL, COMPLETION_URL, EMBEDDING_URL)


@dataclass(frozen=True)
class InputLine:
    custom_id: str
    url: str
    body: dict[str, Any]


class LineError(Exception):
    """A line that cannot be answered: its OpenAI error code and message (and HTTP status, when a request
    was made)."""

    def __init__(self, code: str, message: str, status_code: int | None = None,
                 body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.status_code, self.body = code, message, status_code, body


def parse_line(text: str, endpoint: str) -> InputLine:
    """The line's request, or LineError saying what is wrong with it."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise LineError("invalid_json_line", f"the line is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise LineError("invalid_json_line", "the line must be a JSON object")
    custom_id = value.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise LineError("missing_custom_id", "custom_id must be a non-empty string")
    if value.get("method") != "POST":
        raise LineError("invalid_method", f"method must be POST, got {value.get('method')!r}")
    url = value.get("url")
    if url not in BATCH_ENDPOINTS:
        raise LineError("invalid_url", f"url must be one of {', '.join(BATCH_ENDPOINTS)}, got {url!r}")
    if url != endpoint:
        raise LineError("mismatched_url", f"the line's url {url!r} is not the batch's endpoint {endpoint!r}")
    if not isinstance(value.get("body"), dict):
        raise LineError("invalid_body", "body must be a JSON object")
    return InputLine(custom_id, url, value["body"])


def output_line(custom_id: str, status_code: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"id": "batch_req_" + secrets.token_hex(12), "custom_id": custom_id,
            "response": {"status_code": status_code, "request_id": secrets.token_hex(16), "body": body},
            "error": None}


def error_line(custom_id: str | None, error: LineError) -> dict[str, Any]:
    response = None
    if error.status_code is not None:
        response = {"status_code": error.status_code, "request_id": secrets.token_hex(16), "body": error.body}
    return {"id": "batch_req_" + secrets.token_hex(12), "custom_id": custom_id, "response": response,
            "error": {"code": error.code, "message": error.message}}


class LineRunner:
    """Answers lines through the GenerateService and EmbeddingService at `channel`, with `metadata` (the
    server's in-process credential)."""

    def __init__(self, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...]) -> None:
        self._generate = generate_grpc.GenerateServiceStub(channel)
        self._embedding = embedding_grpc.EmbeddingServiceStub(channel)
        self._metadata = metadata
        config = GatewayConfig()
        self._chat_schema = chat_request_schema(config)
        self._completion_schema = completion_request_schema(config)

    async def answer(self, line: InputLine, tenant: str | None = None) -> dict[str, Any]:
        """The response body of the line, run as `tenant` (None: the body's `user`); LineError when the
        request fails."""
        body = {**line.body, "stream": False}
        try:
            if line.url == EMBEDDING_URL:
                return await self._embed(line.body)
            chat = line.url == CHAT_URL
            plan = chat_plan(body, self._chat_schema) if chat else completion_plan(body, self._completion_schema)
            if plan.top_logprob_count is not None or plan.echo:
                raise LineError("unsupported_parameter", "logprobs and echo are not offered in batch lines")
            states = await self._generate_all(plan, tenant)
        except ApiError as error:
            raise LineError(error.code or "invalid_request", error.message, error.status, error.openai_body()) from None
        head = {"id": ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(16), "created": int(time.time()),
                "model": plan.model, "object": "chat.completion" if chat else "text_completion"}
        choices = [_chat_choice(index, state) if chat else _completion_choice(index, state)
                   for index, state in enumerate(states)]
        return {**head, "choices": choices, "usage": usage_json(states, plan.choice_count),
                "system_fingerprint": None}

    async def _embed(self, body: dict[str, Any]) -> dict[str, Any]:
        request, encoding = embed_request_of(body)
        request.priority = types_pb.PRIORITY_BATCH
        try:
            result = await self._embedding.Embed(request, metadata=self._metadata)
        except grpc.RpcError as error:
            raise api_error_of(status_of_rpc_error(error), EMBED_PARAMS) from None
        return embedding_json(result, encoding)

    async def _generate_all(self, plan: GenerationPlan, tenant: str | None) -> list[ChoiceState]:
        states = []
        for request in plan.requests():
            request.scheduling.priority = types_pb.PRIORITY_BATCH
            if tenant is not None:
                request.scheduling.tenant_id = tenant
            state = ChoiceState()
            try:
                async for response in self._generate.Generate(request, metadata=self._metadata):
                    state.add(response)
            except grpc.RpcError as error:
                raise api_error_of(status_of_rpc_error(error), SERVER_FIELD_PARAMS) from None
            states.append(state)
        return states


def _chat_choice(index: int, state: ChoiceState) -> dict[str, Any]:
    return {"index": index, "message": {"role": "assistant", "content": "".join(state.text), "refusal": None},
            "logprobs": None, "finish_reason": state.finish_reason}


def _completion_choice(index: int, state: ChoiceState) -> dict[str, Any]:
    return {"index": index, "text": "".join(state.text), "logprobs": None, "finish_reason": state.finish_reason}
