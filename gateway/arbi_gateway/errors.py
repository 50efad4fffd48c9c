"""Errors the gateway answers with: OpenAI's error object on the OpenAI routes, `google.rpc.Status` JSON
on the proto routes, and the HTTP status of each canonical gRPC code.

Every gRPC failure of the upstream is read back with its `google.rpc.Status` details (ErrorInfo reason,
BadRequest field), so the HTTP answer names the same field and reason the server named.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import json_format
from google.rpc import code_pb2, error_details_pb2, status_pb2

# The HTTP status of each canonical gRPC code (the mapping of google.api.http and Envoy's transcoder).
HTTP_STATUS_OF_CODE: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}

# OpenAI's error `type` per HTTP status; any other status is a server error.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    429: "rate_limit_error",
    499: "cancelled_error",
}

_STATUS_DETAILS_KEY = "grpc-status-details-bin"


class ApiError(Exception):
    """A request the gateway answers with an error: HTTP status, message, offending parameter, code."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def openai_body(self) -> dict[str, Any]:
        """OpenAI's error object."""
        return {"error": {
            "message": self.message,
            "type": _ERROR_TYPES.get(self.status, "server_error"),
            "param": self.param,
            "code": self.code,
        }}


def invalid(param: str, message: str, code: str = "invalid_value") -> ApiError:
    """A 400 naming the request parameter at fault."""
    return ApiError(400, message, param, code)


def status_of_rpc_error(error: grpc.RpcError) -> status_pb2.Status:
    """The upstream's `google.rpc.Status`, details included; code and message alone when it sent none."""
    for key, value in error.trailing_metadata() or ():
        if key == _STATUS_DETAILS_KEY:
            status = status_pb2.Status()
            status.ParseFromString(value)
            return status
    return status_pb2.Status(code=error.code().value[0], message=error.details() or error.code().name)


def http_status_of(status: status_pb2.Status) -> int:
    return HTTP_STATUS_OF_CODE.get(_code_of(status), 500)


def status_json(status: status_pb2.Status) -> dict[str, Any]:
    """The proto3 JSON of a Status, as Envoy's transcoder writes it for a failed call."""
    return json_format.MessageToDict(status)


def api_error_of(status: status_pb2.Status, params: dict[str, str]) -> ApiError:
    """The OpenAI error of an upstream Status; `params` renames the server's field paths (and the paths under
    them) to the request's parameter names (an unknown field keeps its server name)."""
    reason, field = None, None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason.lower()
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            if bad_request.field_violations:
                field = bad_request.field_violations[0].field
    param = None if field is None else _param_of(field, params)
    return ApiError(http_status_of(status), status.message, param, reason or code_pb2.Code.Name(status.code).lower())


def _param_of(field: str, params: dict[str, str]) -> str:
    """The parameter of the longest renamed field path that `field` starts with (a path segment is cut at
    '.' or '['); the field itself when none is renamed."""
    path = field
    while path:
        if path in params:
            return params[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return field


def _code_of(status: status_pb2.Status) -> grpc.StatusCode:
    return next((code for code in grpc.StatusCode if code.value[0] == status.code), grpc.StatusCode.UNKNOWN)
