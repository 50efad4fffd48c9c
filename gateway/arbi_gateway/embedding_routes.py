"""The embedding routes over EmbeddingService: POST /v1/embeddings (OpenAI's shape) and POST /v1/rerank
(the shape vLLM and Jina use), with the request schemas the OpenAPI document publishes for them.

`input` is a string, a list of strings, a list of token ids or a list of token-id lists; vectors come back
as float lists or, with `encoding_format: base64`, as base64 of little-endian float32 (what the OpenAI SDK
asks for by default). Rerank scores by the embedding model's cosine similarity: the response's `model`
says so (`<model>:cosine`), as no cross-encoder ships in a package here.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import grpc
import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from arbi_client.arbi.v1 import embedding_service_pb2 as pb
from arbi_client.arbi.v1 import embedding_types_pb2 as types_pb
from arbi_client.arbi.v1 import generation_types_pb2 as generation_pb
from arbi_gateway.errors import api_error_of, invalid, status_of_rpc_error
from arbi_gateway.gateway_state import GatewayState
from arbi_gateway.json_schema import Schema
from arbi_gateway.openai_requests import parse_json_object
from arbi_gateway.upstream import RpcKind, forwarded_metadata

_EMBED = "/arbi.v1.EmbeddingService/Embed"
_RERANK = "/arbi.v1.EmbeddingService/Rerank"
EMBED_PARAMS = {"inputs": "input", "dimensions": "dimensions", "model": "model"}
_RERANK_PARAMS = {"query": "query", "documents": "documents", "top_n": "top_n", "model": "model"}
_ENCODINGS = ("float", "base64")

_TOKEN_IDS: Schema = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}
EMBEDDING_REQUEST: Schema = {
    "type": "object", "required": ["input", "model"], "additionalProperties": False,
    "properties": {
        "model": {"type": "string",
                  "description": "A resident embedding model, or a chat model (its own hidden states, pooled)."},
        "input": {"oneOf": [
            {"type": "string", "minLength": 1},
            {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
            _TOKEN_IDS,
            {"type": "array", "minItems": 1, "items": _TOKEN_IDS},
        ]},
        "encoding_format": {"enum": list(_ENCODINGS)},
        "dimensions": {"type": "integer", "minimum": 1},
        "user": {"type": "string"},
    },
}
RERANK_REQUEST: Schema = {
    "type": "object", "required": ["query", "documents"], "additionalProperties": False,
    "properties": {
        "model": {"type": "string",
                  "description": "A resident embedding model or chat model (empty: the first embedding model)."},
        "query": {"type": "string", "minLength": 1},
        "documents": {"type": "array", "minItems": 1, "items": {"oneOf": [
            {"type": "string"},
            {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}},
        ]}},
        "top_n": {"type": "integer", "minimum": 0},
        "return_documents": {"type": "boolean"},
    },
}
OPENAPI_OPERATIONS = {  # path -> (operationId, request schema name, schema, description)
    "/v1/embeddings": ("createEmbedding", "EmbeddingRequest", EMBEDDING_REQUEST, "One embedding per input."),
    "/v1/rerank": ("rerank", "RerankRequest", RERANK_REQUEST, "The documents scored against the query, best first."),
}


def _is_token_ids(value: Any) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(isinstance(t, int) and not isinstance(t, bool) for t in value))


def _inputs(value: Any) -> list[types_pb.EmbeddingInput]:
    if isinstance(value, str):
        return [types_pb.EmbeddingInput(text=value)]
    if _is_token_ids(value):
        return [types_pb.EmbeddingInput(token_ids=generation_pb.TokenIds(ids=value))]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [types_pb.EmbeddingInput(text=v) for v in value]
    if isinstance(value, list) and value and all(_is_token_ids(v) for v in value):
        return [types_pb.EmbeddingInput(token_ids=generation_pb.TokenIds(ids=v)) for v in value]
    raise invalid("input", "'input' must be a non-empty string, list of strings, list of token ids or list of "
                  "token-id lists")


def _optional_int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
        raise invalid(name, f"'{name}' must be a non-negative integer")
    return value


def _refuse_unknown(body: dict[str, Any], schema: Schema) -> None:
    for name in sorted(body.keys() - schema["properties"].keys()):
        raise invalid(name, f"'{name}' is not a parameter of this route; remove it.", "unsupported_parameter")


async def _call(request: Request, method: str, message: Any, response_type: Any, params: dict[str, str]) -> Any:
    gateway: GatewayState = request.app.state.gateway
    call = gateway.upstream.method(method, RpcKind.UNARY_UNARY, type(message).SerializeToString,
                                   response_type.FromString)
    try:
        return await call(message, metadata=forwarded_metadata(request.headers))
    except grpc.RpcError as error:
        raise api_error_of(status_of_rpc_error(error), params) from None


def embed_request_of(body: dict[str, Any]) -> tuple[pb.EmbedRequest, str]:
    """The EmbedRequest of an OpenAI embeddings body and its `encoding_format`; ApiError for a bad body (the
    route and the batch runner's embedding lines share it)."""
    _refuse_unknown(body, EMBEDDING_REQUEST)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model", "'model' must name a resident embedding or chat model", "missing_required_parameter")
    encoding = body.get("encoding_format") or "float"
    if encoding not in _ENCODINGS:
        raise invalid("encoding_format", f"must be one of {', '.join(_ENCODINGS)}")
    message = pb.EmbedRequest(model=model, inputs=_inputs(body.get("input")))
    dimensions = _optional_int(body, "dimensions")
    if dimensions is not None:
        message.dimensions = dimensions
    return message, encoding


def embedding_json(result: pb.EmbedResponse, encoding: str) -> dict[str, Any]:
    """OpenAI's embeddings response body of `result`, vectors as floats or base64 of little-endian float32."""
    def encoded(values: Any) -> Any:
        if encoding == "float":
            return list(values)
        return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode("ascii")

    tokens = result.usage.prompt_tokens
    return {
        "object": "list", "model": result.model,
        "data": [{"object": "embedding", "index": e.index, "embedding": encoded(e.values)} for e in result.embeddings],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


async def embeddings(request: Request) -> Response:
    message, encoding = embed_request_of(parse_json_object(await request.body()))
    result = await _call(request, _EMBED, message, pb.EmbedResponse, EMBED_PARAMS)
    return JSONResponse(embedding_json(result, encoding))


def _document_text(document: Any, index: int) -> str:
    if isinstance(document, dict) and isinstance(document.get("text"), str):
        return document["text"]
    if isinstance(document, str):
        return document
    raise invalid("documents", f"documents[{index}] must be a string or an object with a 'text' string")


async def rerank(request: Request) -> Response:
    body = parse_json_object(await request.body())
    _refuse_unknown(body, RERANK_REQUEST)
    query, documents, model = body.get("query"), body.get("documents"), body.get("model", "")
    if not isinstance(query, str):
        raise invalid("query", "'query' must be a string", "missing_required_parameter")
    if not isinstance(documents, list):
        raise invalid("documents", "'documents' must be a list", "missing_required_parameter")
    if not isinstance(model, str):
        raise invalid("model", "'model' must be a string")
    return_documents = body.get("return_documents", True)
    if not isinstance(return_documents, bool):
        raise invalid("return_documents", "'return_documents' must be a boolean")
    message = pb.RerankRequest(model=model, query=query,
                               documents=[_document_text(d, i) for i, d in enumerate(documents)],
                               top_n=_optional_int(body, "top_n") or 0, return_documents=return_documents)
    result = await _call(request, _RERANK, message, pb.RerankResponse, _RERANK_PARAMS)
    return JSONResponse({
        "id": f"rerank-{uuid.uuid4().hex}", "model": f"{result.model}:{result.scoring}",
        "usage": {"total_tokens": result.usage.prompt_tokens},
        "results": [{"index": r.index, "relevance_score": r.relevance_score,
                     **({"document": {"text": r.document}} if return_documents else {})} for r in result.results],
    })


ROUTES = [
    Route("/v1/embeddings", embeddings, methods=["POST"]),
    Route("/v1/rerank", rerank, methods=["POST"]),
]
