"""OpenAI's /v1/batches over BatchService: create, retrieve, list (after, limit) and cancel."""

from __future__ import annotations

from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from arbi_client.arbi.v1 import batch_service_pb2 as pb
from arbi_client.arbi.v1 import file_types_pb2 as types_pb
from arbi_gateway.errors import api_error_of, invalid, status_of_rpc_error
from arbi_gateway.gateway_state import GatewayState
from arbi_gateway.openai_requests import parse_json_object
from arbi_gateway.upstream import RpcKind, forwarded_metadata

_SERVICE = "/arbi.v1.BatchService/"
_PARAMS = {"input_file_id": "input_file_id", "endpoint": "endpoint", "completion_window": "completion_window",
           "limit": "limit", "after": "after"}
_TIMES = ("in_progress_at", "finalizing_at", "completed_at", "failed_at", "cancelling_at", "cancelled_at",
          "expired_at")


def batch_json(batch: types_pb.Batch) -> dict[str, Any]:
    errors = None
    if batch.failure_message:
        errors = {"object": "list", "data": [{"code": "invalid_input", "message": batch.failure_message,
                                              "param": None, "line": None}]}
    return {"id": batch.id, "object": "batch", "endpoint": batch.endpoint, "errors": errors,
            "input_file_id": batch.input_file_id, "completion_window": batch.completion_window,
            "status": batch.status, "output_file_id": batch.output_file_id or None,
            "error_file_id": batch.error_file_id or None, "created_at": batch.created_at,
            "expires_at": batch.expires_at, **{name: getattr(batch, name) or None for name in _TIMES},
            "request_counts": {"total": batch.request_counts.total, "completed": batch.request_counts.completed,
                               "failed": batch.request_counts.failed},
            "metadata": dict(batch.metadata) or None}


async def _call(request: Request, name: str, message: Any, response_class: Any) -> Any:
    gateway: GatewayState = request.app.state.gateway
    call = gateway.upstream.method(_SERVICE + name, RpcKind.UNARY_UNARY, type(message).SerializeToString,
                                   response_class.FromString)
    try:
        return await call(message, metadata=forwarded_metadata(request.headers))
    except grpc.RpcError as error:
        raise api_error_of(status_of_rpc_error(error), _PARAMS) from None


def _text(body: dict[str, Any], name: str, default: str | None = None) -> str:
    value = body.get(name, default)
    if not isinstance(value, str):
        raise invalid(name, f"'{name}' must be a string", "missing_required_parameter" if value is None else "invalid_type")
    return value


async def create_batch(request: Request) -> Response:
    body = parse_json_object(await request.body())
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict) or not all(isinstance(value, str) for value in metadata.values()):
        raise invalid("metadata", "'metadata' must be an object of strings")
    message = pb.CreateBatchRequest(input_file_id=_text(body, "input_file_id"), endpoint=_text(body, "endpoint"),
                                    completion_window=_text(body, "completion_window", "24h"), metadata=metadata)
    return JSONResponse(batch_json((await _call(request, "CreateBatch", message, pb.CreateBatchResponse)).batch))


async def retrieve_batch(request: Request) -> Response:
    message = pb.GetBatchRequest(batch_id=request.path_params["batch_id"])
    return JSONResponse(batch_json((await _call(request, "GetBatch", message, pb.GetBatchResponse)).batch))


async def list_batches(request: Request) -> Response:
    limit_text = request.query_params.get("limit", "20")
    if not limit_text.isdigit():
        raise invalid("limit", "'limit' must be an integer between 1 and 100")
    message = pb.ListBatchesRequest(after=request.query_params.get("after", ""), limit=min(int(limit_text), 2**31 - 1))
    if message.limit == 0:
        raise invalid("limit", "'limit' must be an integer between 1 and 100")
    response = await _call(request, "ListBatches", message, pb.ListBatchesResponse)
    data = [batch_json(batch) for batch in response.batches]
    return JSONResponse({"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                         "last_id": data[-1]["id"] if data else None, "has_more": response.has_more})


async def cancel_batch(request: Request) -> Response:
    message = pb.CancelBatchRequest(batch_id=request.path_params["batch_id"])
    return JSONResponse(batch_json((await _call(request, "CancelBatch", message, pb.CancelBatchResponse)).batch))
